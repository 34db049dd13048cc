"""The review page for PoporoIN's proposed class pairs (seed 000, Sec. 3.3, second stage): the
audit page's sibling, served the same way and behind the same guards.

``python -m serve_apps.review_app --proposals FILE --db FILE [--tokens FILE] [--resolver NAME ...] [--host 127.0.0.1 --port 8766]``

One proposed pair at a time: the two classes and the question of their cell. The reviewer accepts
(key a) or rejects with one of the three reasons (keys 1, 2, 3), z undoes. The page does not show
which model proposed the pair, nor anyone else's answer. Answers go straight into the SQLite review
store (one transaction each), so a closed browser or a killed server loses nothing. The
Disagreements view lists the pairs the reviewers decided differently, with the kappas, and lets a
resolver settle each one; ``python -m eval_jobs.review_report`` then writes the accepted pairs.

Guards are the audit page's (:mod:`serve_apps.audit_guard`): with a tokens file each reviewer has
their own bearer token and is identified by it; without one the page asks for a name, on loopback
only. Strict Content-Security-Policy, capped bodies, known Host names only.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, Sequence

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from relate.audit.review_report import review_report_from_store
from relate.audit.review_store import (CELL_QUESTIONS, DECISIONS, REJECT_REASONS, ReviewStore, load_proposals,
                                       open_review_store)
from relate.audit.store import AuditStoreError, UnknownItemError
from relate.config import StrictConfig
from serve_apps.audit_guard import TOKENS_FILE_ENV, acting_person, load_auditor_tokens, serve_page
from serve_apps.auth import AuthConfigError, require_token_for_bind

__all__ = ["ReviewAppConfig", "make_review_app", "main"]

STATIC_DIR = Path(__file__).parent / "static" / "review"


class ReviewAppConfig(StrictConfig):
    """Where the proposals and the review database live, who may resolve, and how the page is served."""

    proposals: str = Field(..., description="Proposals table (.parquet, .csv or .jsonl; columns pair_id, cell, "
                           "class_a, class_b, models: see relate.audit.review_store).")
    db: str = Field(..., description="SQLite review database (created if missing; one proposals table per file).")
    host: str = Field("127.0.0.1", description="Interface to bind; loopback unless you mean to share the page.")
    port: int = Field(8766, ge=0, le=65535, description="TCP port to listen on.")
    min_reviews: int = Field(2, ge=1, le=10, description="Answers a pair needs before an agreement settles it.")
    resolvers: list[str] = Field([], description="Names allowed to settle disagreements; empty: any reviewer "
                                 "(the paper's two reviewers resolved theirs by discussion).")
    tokens_file: str | None = Field(None, description="Reviewer tokens file (JSON {name: token} or name:token "
                                    "lines), as the audit page's; required when host is not loopback.")
    allowed_hosts: list[str] = Field([], description="Host names the page answers to besides 127.0.0.1, "
                                     "localhost, ::1 and host (others get 400: DNS-rebinding defence).")
    max_body_bytes: int = Field(4096, ge=256, le=2**20, description="Largest request body accepted (413 beyond).")


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reviewer: str | None = Field(None, description="Reviewer name; with tokens, must be the token's if given.")
    pair_id: str = Field(..., description="Pair being answered (as shown on the page).")
    decision: str = Field(..., description=f"One of {list(DECISIONS)}.")
    reason: str | None = Field(None, description=f"With reject, one of {list(REJECT_REASONS)}.")


class _Undo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reviewer: str | None = Field(None, description="Reviewer whose latest answer is withdrawn.")


def _view(pair: dict[str, Any]) -> dict[str, Any]:
    """What a reviewer may see of a pair: no proposing model (the review is blind to the source)."""
    return {"pair_id": pair["pair_id"], "position": pair["position"], "cell": pair["cell"],
            "question": CELL_QUESTIONS[pair["cell"]], "class_a": pair["class_a"], "class_b": pair["class_b"]}


def make_review_app(cfg: ReviewAppConfig) -> FastAPI:
    """Check the bind and tokens, load the proposals, open the store, and return the FastAPI app
    (not started) behind the audit page's guards."""
    tokens = load_auditor_tokens(cfg.tokens_file) if cfg.tokens_file else None
    try:
        require_token_for_bind(cfg.host, None if tokens is None else tokens.source, "the review page")
    except AuthConfigError as exc:
        raise AuthConfigError(f"the review page would listen on {cfg.host!r}, beyond this machine, with no "
                              f"reviewer tokens: pass --tokens FILE (or set {TOKENS_FILE_ENV}), or bind 127.0.0.1"
                              ) from exc
    store = open_review_store(cfg.db, load_proposals(cfg.proposals))
    app = FastAPI(title="Pair review", version="1", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.store, app.state.tokens = store, tokens
    _add_routes(app, store, cfg)
    serve_page(app, "review", STATIC_DIR, tokens=tokens, host=cfg.host, allowed_hosts=cfg.allowed_hosts,
               max_body_bytes=cfg.max_body_bytes)
    return app


def _add_routes(app: FastAPI, store: ReviewStore, cfg: ReviewAppConfig) -> None:
    @app.exception_handler(AuditStoreError)
    async def _bad_input(_: Request, exc: AuditStoreError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=404 if isinstance(exc, UnknownItemError) else 400)

    def state(reviewer: str) -> dict[str, Any]:
        nxt = store.next_pair(reviewer)
        return {"pair": None if nxt is None else _view(nxt), "progress": store.progress(reviewer)}

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html")

    @app.get("/api/health")
    def health() -> dict[str, Any]:
        return {"ok": True, "pairs": store.num_pairs()}

    @app.get("/api/whoami")
    def whoami(request: Request) -> dict[str, Any]:
        tokens = request.app.state.tokens is not None
        return {"tokens": tokens, "reviewer": acting_person(request, None, "reviewer") if tokens else None,
                "reasons": REJECT_REASONS}

    @app.get("/api/next")
    def next_pair(request: Request, reviewer: str | None = Query(None, description="Reviewer name (the "
                  "token's, when tokens are configured).")) -> dict[str, Any]:
        return state(acting_person(request, reviewer, "reviewer"))

    @app.get("/api/progress")
    def progress(request: Request, reviewer: str | None = Query(None, description="Reviewer name.")) -> dict[str, Any]:
        return store.progress(acting_person(request, reviewer, "reviewer"))

    @app.post("/api/answer")
    def answer(request: Request, body: _Answer) -> dict[str, Any]:
        reviewer = acting_person(request, body.reviewer, "reviewer")
        store.record(reviewer, body.pair_id, body.decision, body.reason)
        return state(reviewer)

    @app.post("/api/undo")
    def undo(request: Request, body: _Undo) -> dict[str, Any]:
        reviewer = acting_person(request, body.reviewer, "reviewer")
        pair_id = store.undo(reviewer)
        out = state(reviewer)
        if pair_id is not None:  # show the withdrawn pair again, so undo feels like undo
            out["pair"] = _view(store.pair(pair_id))
        out["undone"] = pair_id
        return out

    @app.get("/api/report")
    def report() -> dict[str, Any]:
        return review_report_from_store(store, cfg.min_reviews)

    @app.post("/api/resolve")
    def resolve(request: Request, body: _Answer) -> dict[str, Any]:
        resolver = acting_person(request, body.reviewer, "reviewer")
        if cfg.resolvers and resolver not in cfg.resolvers:
            raise HTTPException(403, f"{resolver!r} may not resolve; resolvers are {cfg.resolvers}")
        store.resolve(resolver, body.pair_id, body.decision, body.reason)
        return review_report_from_store(store, cfg.min_reviews)


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the command line, build the app and serve it with uvicorn until interrupted."""
    import uvicorn

    ap = argparse.ArgumentParser(description="Review proposed PoporoIN class pairs in the browser.")
    ap.add_argument("--proposals", required=True, help="proposals table (.parquet, .csv or .jsonl)")
    ap.add_argument("--db", required=True, help="SQLite review database")
    ap.add_argument("--host", default="127.0.0.1", help="interface to bind (default loopback)")
    ap.add_argument("--port", type=int, default=8766, help="port (default 8766)")
    ap.add_argument("--min-reviews", type=int, default=2, help="answers a pair needs before agreement settles it")
    ap.add_argument("--resolver", action="append", default=[], metavar="NAME",
                    help="a name allowed to settle disagreements (repeatable; default: any reviewer)")
    ap.add_argument("--tokens", default=os.environ.get(TOKENS_FILE_ENV) or None,
                    help=f"reviewer tokens file (default ${TOKENS_FILE_ENV}); required beyond loopback")
    ap.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                    help="a Host name the page answers to besides loopback and --host (repeatable)")
    args = ap.parse_args(argv)
    cfg = ReviewAppConfig(proposals=args.proposals, db=args.db, host=args.host, port=args.port,
                          min_reviews=args.min_reviews, resolvers=args.resolver, tokens_file=args.tokens,
                          allowed_hosts=args.allowed_host)
    try:
        app = make_review_app(cfg)
    except AuthConfigError as exc:
        raise SystemExit(f"review page not started: {exc}") from None
    who = f"{len(app.state.tokens.names)} reviewer tokens" if app.state.tokens else "no tokens: reviewers type a name"
    print(f"review page: http://{cfg.host}:{cfg.port}/ ({who})", flush=True)
    uvicorn.run(app, host=cfg.host, port=cfg.port, log_level="warning")


if __name__ == "__main__":  # pragma: no cover
    main()
