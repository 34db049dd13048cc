"""A small standalone web app for the human audit of a relation corpus.

``python -m serve_apps.audit_app --corpus DIR --batch FILE --db FILE [--tokens FILE] [--host 127.0.0.1 --port 8765]``

One relation at a time: the image with the subject box (orange, tag S) and the object box (blue,
tag O) drawn server-side, the predicate in words, true / false / unsure / undo by button or key.
Verdicts go straight into the SQLite store (one transaction each), so closing the browser or
restarting the server loses nothing. Images are looked up from the corpus by item id; the client
never names a path. The auditor does not see the pass, gate or stratum (a blind audit).

With a tokens file (:mod:`serve_apps.audit_guard`) every auditor has their own bearer token and
every ``/api`` call needs it; who is judging comes from the token, so nobody can file, undo or read
verdicts under another name. Without one the page asks for a name, which is allowed on loopback
only: a non-loopback ``--host`` without tokens refuses to start. Every response carries a strict
Content-Security-Policy, bodies are capped and only known Host names are answered.
"""

from __future__ import annotations

import argparse
import io
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Sequence

from fastapi import FastAPI, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from PIL import Image, ImageDraw, ImageFont
from pydantic import BaseModel, ConfigDict, Field

from relate.audit.report import report_from_store
from relate.audit.sampler import load_audit_batch, verify_batch
from relate.audit.store import VERDICTS, AuditStoreError, UnknownItemError, VerdictStore, open_verdict_store
from relate.config import StrictConfig
from relate.data.corpus import corpus_dir, read_corpus
from serve_apps.audit_guard import (TOKENS_FILE_ENV, AuditorTokens, acting_person, load_auditor_tokens,
                                    serve_page)
from serve_apps.auth import AuthConfigError, allowed_host_names, require_token_for_bind

__all__ = ["AuditAppConfig", "make_audit_app", "main", "SUBJECT_COLOUR", "OBJECT_COLOUR"]

STATIC_DIR = Path(__file__).parent / "static" / "audit"
# Okabe-Ito orange and blue: distinguishable with the common colour-vision deficiencies.
SUBJECT_COLOUR = (230, 159, 0)
OBJECT_COLOUR = (0, 114, 178)


class AuditAppConfig(StrictConfig):
    """Where the corpus, batch and verdict database live, and how the page is served."""

    corpus: str = Field(..., description="Corpus folder (run folder or its corpus/) the batch was drawn from.")
    batch: str = Field(..., description="Audit batch file written by relate.audit.sampler (.json or .parquet).")
    db: str = Field(..., description="SQLite verdict database (created if missing; one batch per file).")
    host: str = Field("127.0.0.1", description="Interface to bind; loopback unless you mean to share the page.")
    port: int = Field(8765, ge=0, le=65535, description="TCP port to listen on.")
    display_side: int = Field(560, ge=64, le=4096, description="Images are scaled so their longer side is this many px.")
    confidence: float = Field(0.95, gt=0, lt=1, description="Confidence level of the report's intervals.")
    tokens_file: str | None = Field(None, description="Auditor tokens file (JSON {name: token} or name:token "
                                    "lines); every /api call then needs its auditor's bearer token. Required "
                                    "when host is not loopback.")
    allowed_hosts: list[str] = Field([], description="Host names the page answers to besides 127.0.0.1, "
                                     "localhost, ::1 and host (others get 400: DNS-rebinding defence).")
    max_body_bytes: int = Field(4096, ge=256, le=2**20, description="Largest request body accepted (413 beyond).")


class _Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    auditor: str | None = Field(None, description="Auditor name; with tokens, must be the token's auditor if given.")
    item_id: str = Field(..., description="Item being judged (as shown on the page).")
    verdict: str = Field(..., description=f"One of {list(VERDICTS)}.")


class _Undo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    auditor: str | None = Field(None, description="Auditor whose latest verdict is withdrawn; with tokens, "
                                "must be the token's auditor if given.")


def _display_size(size: tuple[int, int], side: int) -> tuple[int, int]:
    """Size of an image of ``size`` once scaled so its longer side is ``side`` (what the page shows)."""
    scale = side / max(size)
    return max(1, round(size[0] * scale)), max(1, round(size[1] * scale))


def _image_index(corpus_root: str, image_ids: set[str], table, side: int) -> dict[str, dict[str, Any]]:
    """image_id -> local path, boxes and display size, for the batch's images only (checked at start-up).

    The display size goes to the page with each item, so the picture's box is laid out before the
    picture arrives and the buttons beside it never move under the auditor's pointer."""
    root = corpus_dir(corpus_root).parent
    out: dict[str, dict[str, Any]] = {}
    for row in table.select(["image_id", "uri", "boxes"]).to_pylist():
        if row["image_id"] not in image_ids:
            continue
        uri = row["uri"][7:] if row["uri"].startswith("file://") else row["uri"]
        path = Path(uri) if Path(uri).is_absolute() else root / uri
        if not path.is_file():
            raise FileNotFoundError(f"image {row['image_id']!r}: {row['uri']!r} is not a local file; "
                                    "the audit app serves local corpora only")
        with Image.open(path) as im:  # reads the header only
            display = _display_size(im.size, side)
        out[row["image_id"]] = {"path": path, "boxes": row["boxes"], "display": display}
    return out


def _render(path: Path, boxes: list[dict], subject: int, obj: int, side: int) -> bytes:
    """PNG of the image scaled to ``side`` with the subject and object boxes and S/O tags."""
    img = Image.open(path).convert("RGB")
    scale = side / max(img.size)
    img = img.resize(_display_size(img.size, side), Image.BICUBIC)
    draw = ImageDraw.Draw(img)
    width = max(2, side // 160)
    font = ImageFont.load_default(size=max(12, side // 28))
    for idx, colour, tag in ((obj, OBJECT_COLOUR, "O"), (subject, SUBJECT_COLOUR, "S")):
        b = boxes[idx]
        x1, y1, x2, y2 = (b[k] * scale for k in ("x1", "y1", "x2", "y2"))
        draw.rectangle([x1 - 1, y1 - 1, x2 + 1, y2 + 1], outline=(0, 0, 0), width=width + 2)  # contrast halo
        draw.rectangle([x1, y1, x2, y2], outline=colour, width=width)
        tx, ty = x1, max(0.0, y1 - font.size - 6)
        tw = draw.textlength(tag, font=font)
        draw.rectangle([tx, ty, tx + tw + 8, ty + font.size + 6], fill=colour)
        draw.text((tx + 4, ty + 2), tag, fill=(255, 255, 255), font=font)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _view(item: dict[str, Any], images: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What the page may see of an item (no pass, gate or stratum: the audit is blind)."""
    boxes = images[item["image_id"]]["boxes"]
    width, height = images[item["image_id"]]["display"]
    return {"item_id": item["item_id"], "position": item["position"], "predicate": item["predicate"],
            "display": {"width": width, "height": height},
            "subject": {"index": item["subject"], "category": boxes[item["subject"]]["category"]},
            "object": {"index": item["object"], "category": boxes[item["object"]]["category"]}}


def _load_tokens(cfg: AuditAppConfig) -> AuditorTokens | None:
    """The auditor tokens, or None on loopback without a tokens file (anything else refuses to start)."""
    tokens = load_auditor_tokens(cfg.tokens_file) if cfg.tokens_file else None
    try:
        require_token_for_bind(cfg.host, None if tokens is None else tokens.source, "the audit page")
    except AuthConfigError as exc:  # name the audit page's own setting, not the Serve app's token
        raise AuthConfigError(f"the audit page would listen on {cfg.host!r}, beyond this machine, with no auditor "
                              f"tokens: pass --tokens FILE (or set {TOKENS_FILE_ENV}, or the config's tokens_file), "
                              "or bind 127.0.0.1") from exc
    return tokens


def make_audit_app(cfg: AuditAppConfig) -> FastAPI:
    """Check the bind and tokens, load and check batch and corpus, open the store, and return the
    FastAPI app (not started) behind its guards."""
    tokens = _load_tokens(cfg)
    batch = load_audit_batch(cfg.batch)
    corpus = read_corpus(cfg.corpus)
    corpus_strata = verify_batch(batch, corpus)
    images = _image_index(cfg.corpus, set(batch.items.column("image_id").to_pylist()), corpus,
                          cfg.display_side)
    store = open_verdict_store(cfg.db, batch)
    app = FastAPI(title="Relation audit", version="1", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.store = store
    app.state.tokens = tokens

    @lru_cache(maxsize=256)
    def png(item_id: str) -> bytes:
        item = store.item(item_id)
        im = images[item["image_id"]]
        return _render(im["path"], im["boxes"], item["subject"], item["object"], cfg.display_side)

    _add_routes(app, store, images, png, lambda: report_from_store(store, corpus_strata, cfg.confidence))
    serve_page(app, "audit", STATIC_DIR, tokens=tokens, host=cfg.host, allowed_hosts=cfg.allowed_hosts,
               max_body_bytes=cfg.max_body_bytes)
    return app


def _add_routes(app: FastAPI, store: VerdictStore, images: dict[str, dict[str, Any]],
                png: Callable[[str], bytes], make_report: Callable[[], dict[str, Any]]) -> None:
    """The page, the JSON endpoints and the image endpoint (items only by id, never by path)."""

    @app.exception_handler(AuditStoreError)
    async def _bad_input(_: Request, exc: AuditStoreError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404 if isinstance(exc, UnknownItemError) else 400)

    def state(auditor: str) -> dict[str, Any]:
        nxt = store.next_item(auditor)
        return {"item": None if nxt is None else _view(nxt, images), "progress": store.progress(auditor)}

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html")

    @app.get("/api/health")
    def health() -> dict[str, Any]:
        return {"ok": True, "items": store.num_items()}

    @app.get("/api/whoami")
    def whoami(request: Request) -> dict[str, Any]:
        """How the page signs in: by token (and as whom) or, without tokens, by typing a name."""
        tokens = request.app.state.tokens is not None
        return {"tokens": tokens, "auditor": acting_person(request, None) if tokens else None}

    @app.get("/api/next")
    def next_item(request: Request, auditor: str | None = Query(None, description="Auditor name (the "
                  "token's, when tokens are configured).")) -> dict[str, Any]:
        return state(acting_person(request, auditor))

    @app.get("/api/progress")
    def progress(request: Request, auditor: str | None = Query(None, description="Auditor name (the "
                 "token's, when tokens are configured).")) -> dict[str, Any]:
        return store.progress(acting_person(request, auditor))

    @app.post("/api/verdict")
    def verdict(request: Request, body: _Verdict) -> dict[str, Any]:
        auditor = acting_person(request, body.auditor)
        store.record(auditor, body.item_id, body.verdict)
        return state(auditor)

    @app.post("/api/undo")
    def undo(request: Request, body: _Undo) -> dict[str, Any]:
        auditor = acting_person(request, body.auditor)
        item_id = store.undo(auditor)
        # Show the withdrawn item again (not merely the first open one) so undo feels like undo.
        out = state(auditor)
        if item_id is not None:
            out["item"] = _view(store.item(item_id), images)
        out["undone"] = item_id
        return out

    @app.get("/api/report")
    def report() -> dict[str, Any]:
        return make_report()

    @app.get("/api/image", response_class=Response)
    def image(item_id: str = Query(..., description="Item id from the batch.")) -> Response:
        return Response(png(item_id), media_type="image/png", headers={"Cache-Control": "private, max-age=3600"})


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the command line, build the app and serve it with uvicorn until interrupted."""
    import uvicorn

    ap = argparse.ArgumentParser(description="Audit corpus relations in the browser.")
    ap.add_argument("--corpus", required=True, help="corpus folder the batch was drawn from")
    ap.add_argument("--batch", required=True, help="audit batch file (.json or .parquet)")
    ap.add_argument("--db", required=True, help="SQLite verdict database")
    ap.add_argument("--host", default="127.0.0.1", help="interface to bind (default loopback)")
    ap.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    ap.add_argument("--tokens", default=os.environ.get(TOKENS_FILE_ENV) or None,
                    help=f"auditor tokens file: JSON {{name: token}} or name:token lines (default ${TOKENS_FILE_ENV}); "
                    "required beyond loopback")
    ap.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                    help="a Host name the page answers to besides loopback and --host (repeatable)")
    args = ap.parse_args(argv)
    cfg = AuditAppConfig(corpus=args.corpus, batch=args.batch, db=args.db, host=args.host, port=args.port,
                         tokens_file=args.tokens, allowed_hosts=args.allowed_host)
    try:
        app = make_audit_app(cfg)
    except AuthConfigError as exc:
        raise SystemExit(f"audit page not started: {exc}") from None
    who = f"{len(app.state.tokens.names)} auditor tokens" if app.state.tokens else "no tokens: auditors type a name"
    print(f"audit page: http://{cfg.host}:{cfg.port}/ ({who}; Host names "
          f"{', '.join(allowed_host_names(cfg.host, cfg.allowed_hosts))})", flush=True)
    uvicorn.run(app, host=cfg.host, port=cfg.port, log_level="warning")


if __name__ == "__main__":  # pragma: no cover
    main()
