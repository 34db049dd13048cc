"""The Ray Serve application: a FastAPI ingress composing Detector, RelationModel and Judge.

``build_app(cfg)`` returns an unstarted ``Application``; ``serve run serve_apps/configs/local.yaml``
calls it with the YAML's ``args`` (validated against :class:`ServeAppConfig`). The ingress
decodes and validates every request (security.py) before a model sees it, then calls the
deployments through ``DeploymentHandle``s, so a bad request costs no model time and the model
replicas only ever receive well-formed arrays.

Endpoints (JSON in and out, versioned under /v1; each POST has a multipart ``/upload`` twin):
``/v1/relations`` (client regions), ``/v1/graph`` (detector + relations), ``/v1/judge`` (A5b
verdicts with the corruption control), ``/v1/render`` (PNG); ``/healthz``, ``/readyz``,
``/openapi.json``, ``/docs``; ``/ui/relate.html``, a page that calls the same API from a browser.
"""

# no "from __future__ import annotations": Serve rebuilds these signatures and needs real types

import asyncio
import logging
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import Depends, FastAPI, File, Form, Request, UploadFile
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ValidationError
from ray import serve
from ray.exceptions import RayActorError
from ray.serve.exceptions import BackPressureError

from serve_apps import security as S
from serve_apps.admission import AdmissionMiddleware, ImageBudgetMiddleware, reserve_pixels
from serve_apps.allocator import bound_malloc_retention
from serve_apps.auth import (PAGE_SUFFIXES, BearerAuthMiddleware, HostCheckMiddleware, allowed_host_names,
                             require_token_for_bind)
from serve_apps.config import ServeAppConfig
from serve_apps.metrics import RequestMetricsMiddleware
from serve_apps.schemas import (ErrorBody, GraphParams, GraphRequest, GraphResponse, HealthResponse, JudgeParams,
                                JudgeRequest, JudgeResponse, ReadyResponse, RelationsParams, RelationsRequest,
                                RelationsResponse, RenderParams, RenderRequest)

__all__ = ["build_app", "api", "IngressDeployment"]

_LOG = logging.getLogger("ray.serve")

api = FastAPI(title="relate: open-vocabulary visual relations", version="1.0.0",
              description="Score (subject, predicate, object) triplets between image regions against any "
                          "vocabulary, detect-and-relate, judge relations with a VLM, and render graphs.")
# innermost, inside the body limit: a JSON body that opens with its image has the image's pixels
# reserved from its first bytes, before the rest is read or any of it parsed (serve_apps/admission.py)
api.add_middleware(ImageBudgetMiddleware, budget=lambda: S.STATE["max_inflight_pixels"])
api.add_middleware(S.BodyLimitMiddleware, max_bytes=lambda: S.STATE["max_request_bytes"],
                   timeout_s=lambda: S.STATE["body_timeout_s"])
# outside the body limit, inside auth: a model request beyond what this replica holds is refused
# from its headers, before its body is read (an unauthenticated one is refused before that)
api.add_middleware(AdmissionMiddleware, max_requests=lambda: S.STATE["max_inflight_requests"])
# every route (docs and health included) needs the token when one is set; the page's static
# files do not (a browser loads them before it can send the token; they carry no data)
api.add_middleware(BearerAuthMiddleware, token=lambda: S.STATE["token"], open_paths=(), open_suffixes=PAGE_SUFFIXES)
# without a token (loopback only) only loopback Host names pass, page files included: a page
# served from a name its attacker points at 127.0.0.1 (DNS rebinding) gets nothing
api.add_middleware(HostCheckMiddleware, allowed=lambda: S.STATE["allowed_hosts"])
api.add_middleware(RequestMetricsMiddleware)  # added last, so it runs first: refused requests are counted too
S.install_error_handlers(api)
_bearer = HTTPBearer(auto_error=False, description="required when the server is configured with a token")


def _auth(request: Request, _: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> None:
    S.check_token(request, S.STATE["token"])


_ERRORS = {c: {"model": ErrorBody} for c in (400, 401, 408, 413, 415, 422, 500, 503, 504)}
_V1 = {"dependencies": [Depends(_auth)], "responses": _ERRORS}
_READY_STATES = {"HEALTHY", "UPSCALING", "DOWNSCALING"}
_PARAMS_DOC = "JSON object with the same fields as the JSON endpoint's body, minus 'image'"
_PAGE_DIR = Path(__file__).parent / "static" / "ui"
_PAGE_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
               ".css": "text/css; charset=utf-8"}
# the page runs only its own script and talks only to this origin; images stay in the browser (blob:, data:)
_PAGE_HEADERS = {"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                                            "img-src 'self' blob: data:; connect-src 'self'; base-uri 'none'; "
                                            "form-action 'none'; frame-ancestors 'none'",
                 "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}


def _page_file(name: str) -> Response:
    path = _PAGE_DIR / name
    return Response(path.read_bytes(), media_type=_PAGE_TYPES[path.suffix], headers=_PAGE_HEADERS)


def _parse(model: type[BaseModel], text: str) -> Any:
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        msgs = [f"params.{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()[:10]]
        raise S.ApiError(422, "invalid_request", "; ".join(msgs)) from None


async def _read_upload(upload: UploadFile) -> bytes:
    return await upload.read()


def _cause(exc: BaseException) -> str:
    """The innermost message of a (Ray-wrapped) exception, without the remote traceback."""
    cause = getattr(exc, "cause", None) or exc
    text = str(cause).strip().splitlines()
    return text[-1] if text else type(cause).__name__


@serve.deployment(name="Ingress")
@serve.ingress(api)
class IngressDeployment:
    def __init__(self, cfg: ServeAppConfig, relation, detector, judge) -> None:
        bound_malloc_retention()  # decoded images leave with their request (serve_apps/allocator.py)
        self.cfg, self.sec = cfg, cfg.security
        S.configure(cfg.security)
        # the proxy's real settings (http_options of the YAML or serve.start), not cfg.http
        proxy = self._serve_http_options()
        host = proxy.host
        require_token_for_bind(host, S.STATE["token"], "the relate API")
        cfg.security.check_proxy_timeout(proxy.request_timeout_s)
        S.STATE["allowed_hosts"] = None if S.STATE["token"] else allowed_host_names(host, self.sec.allowed_hosts)
        self.relation, self.detector, self.judge_handle = relation, detector, judge
        self.banks = {"default", *cfg.relation.banks}
        self._ready: tuple[float, dict[str, str]] = (0.0, {})
        # renders run here, not in the shared default pool: at most max_concurrent_renders at once
        self._render_pool = ThreadPoolExecutor(max_workers=self.sec.max_concurrent_renders, thread_name_prefix="render")
        self._render_slots = threading.BoundedSemaphore(self.sec.max_concurrent_renders)

    # ---- shared steps ---------------------------------------------------------------------
    async def _image(self, data: bytes, p) -> np.ndarray:
        """The decoded picture, once the request's regions fit its header (see :meth:`_admit`)."""
        self._admit(data, p)
        # decoding a large image takes tens of ms: keep the ingress event loop free meanwhile
        return await asyncio.to_thread(S.decode_image, data, self.sec)

    def _admit(self, data: bytes, p) -> None:
        """Refuse what the request and the image header already show to be too much, before a pixel
        is decoded: a box count over the limit, or masks whose dense size (masks x width x height,
        the same whichever way EXIF turns the picture) exceeds max_mask_pixels, or pixels that do
        not fit this replica's in-flight budget (``serve_apps.admission``). A 5000 x 5000 image
        with three full masks is a 413 here, not 75 MB of decoded pixels first. A JSON body that
        opens with its image had the image's pixels reserved from its first bytes already; the
        total reserved here adds the masks."""
        masks, boxes = getattr(p, "masks", None), getattr(p, "boxes", None)
        if boxes is not None and len(boxes) > self.sec.max_regions:
            raise S.ApiError(422, "too_many_regions", f"boxes: {len(boxes)} regions exceed the limit of "
                                                      f"{self.sec.max_regions}")
        if isinstance(p, RenderParams):
            self._labels(p.boxes)
        size = S.image_header_size(data)
        if size is not None:
            if masks:
                S.check_mask_budget(len(masks), size[1], size[0], self.sec)
            # held until the answer: the decoded picture here, its copy and the dense masks in the model
            reserve_pixels(size[0] * size[1] * (1 + len(masks or ())), self.sec.max_inflight_pixels,
                           "image and masks" if masks else "image")

    def _labels(self, boxes) -> list[str]:
        """Box labels as a render draws them (beside the numbers and in the table): each at most
        max_string_chars printable characters, like every other string a request hands us, so a
        page of text or a control or direction-override character is refused, not drawn."""
        out = []
        for i, b in enumerate(boxes):
            text = (b.label or "").strip()
            if len(text) > self.sec.max_string_chars or not text.isprintable():
                raise S.ApiError(422, "invalid_request", f"boxes[{i}].label: must be at most "
                                                         f"{self.sec.max_string_chars} printable characters")
            out.append(text)
        return out

    async def _draw(self, *args) -> bytes:
        """``render_graph_png`` in the bounded render pool: beyond max_concurrent_renders at once a
        503 (not a queue), past model_timeout_s a 504. A thread cannot be stopped, so a render past
        its deadline keeps its slot until it ends: late renders cannot pile up behind the answers."""
        from relate.render import render_graph_png

        if not self._render_slots.acquire(blocking=False):
            raise S.ApiError(503, "render_busy", f"all {self.sec.max_concurrent_renders} render slots are busy, "
                                                 "retry later", headers={"Retry-After": "1"})
        try:
            fut = self._render_pool.submit(render_graph_png, *args)
        except BaseException:
            self._render_slots.release()
            raise
        fut.add_done_callback(lambda _: self._render_slots.release())
        try:
            return await asyncio.wait_for(asyncio.wrap_future(fut), timeout=self.sec.model_timeout_s)
        except asyncio.TimeoutError:
            raise S.ApiError(504, "render_timeout", f"render took longer than {self.sec.model_timeout_s:g} s") from None

    def _vocab(self, p) -> dict:
        topk = p.topk or self.cfg.relation.default_topk
        if topk > self.sec.max_topk:
            raise S.ApiError(422, "invalid_request", f"topk={topk} exceeds the limit of {self.sec.max_topk}")
        vocab = None
        if p.vocabulary is not None:
            vocab = S.validate_strings(p.vocabulary, self.sec.max_vocabulary, self.sec.max_string_chars, "vocabulary")
        if p.bank is not None and p.bank not in self.banks:
            raise S.ApiError(422, "unknown_bank", f"bank {p.bank!r} is not configured; valid: {sorted(self.banks)}")
        return {"vocabulary": vocab, "bank": p.bank, "topk": topk, "threshold": p.threshold}

    async def _call(self, method, *args) -> Any:
        """Call a deployment method once. A replica that dies mid-request is not retried: the
        request may be what killed it, and a replay would take down the next replica too."""
        try:
            out = await asyncio.wait_for(method.remote(*args), timeout=self.sec.model_timeout_s)
        except BackPressureError as exc:  # the model deployment's bounded queue is full
            retry = exc.retry_after_s if exc.retry_after_s is not None else 1.0
            raise S.ApiError(503, "overloaded", f"model queue is full, retry later: {exc}",
                             headers={"Retry-After": str(max(1, math.ceil(retry)))}) from None
        except asyncio.TimeoutError:
            raise S.ApiError(504, "model_timeout", f"model call took longer than {self.sec.model_timeout_s:g} s") from None
        except ValueError as exc:  # raised by a model for bad input (RayTaskError keeps the type)
            raise S.ApiError(422, "invalid_request", _cause(exc)) from None
        except RayActorError as exc:
            raise S.ApiError(503, "replica_failed", "the model replica failed while handling this request; "
                                                    f"it is not retried automatically ({type(exc).__name__})",
                             headers={"Retry-After": "1"}) from None
        except Exception as exc:  # noqa: BLE001  anything else from the model side
            raise S.ApiError(503, "unavailable", f"model call failed: {type(exc).__name__}: {_cause(exc)}"[:300],
                             headers={"Retry-After": "1"}) from None
        if isinstance(out, dict) and "error" in out:
            if out.get("retry_after_s"):  # the model is busy with this kind of work, not refusing the input
                raise S.ApiError(503, out.get("code", "busy"), out["error"],
                                 headers={"Retry-After": str(max(1, math.ceil(out["retry_after_s"])))})
            raise S.ApiError(422, "invalid_request", out["error"])
        return out

    async def _score(self, image: np.ndarray, regions: np.ndarray, p) -> dict:
        req = {"image": image, "regions": regions, **self._vocab(p)}
        out = await self._call(self.relation.relations, req)
        return {"width": int(image.shape[1]), "height": int(image.shape[0]), **out}

    async def _relations(self, image: np.ndarray, p: RelationsParams) -> dict:
        h, w = image.shape[:2]
        regions = (S.validate_boxes(p.boxes, w, h, self.sec) if p.boxes is not None
                   else S.validate_masks(p.masks, w, h, self.sec))  # runs, expanded in the model replica
        return await self._score(image, regions, p)

    async def _graph(self, image: np.ndarray, p: GraphParams) -> dict:
        queries = None
        if p.queries is not None:
            queries = S.validate_strings(p.queries, self.sec.max_vocabulary, self.sec.max_string_chars, "queries")
        if p.max_boxes is not None and p.max_boxes > self.sec.max_regions:
            raise S.ApiError(422, "invalid_request", f"max_boxes={p.max_boxes} exceeds the limit of {self.sec.max_regions}")
        self._vocab(p)  # fail fast before running the detector
        if self.detector is None:
            raise S.ApiError(422, "no_detector", "this deployment has no detector; send regions to /v1/relations")
        dets = await self._call(self.detector.detect, image, queries, p.detector_threshold, p.max_boxes)
        if len(dets) < 2:
            strings = len(p.vocabulary) if p.vocabulary is not None else 0
            return {"width": int(image.shape[1]), "height": int(image.shape[0]), "regions": dets,
                    "bank": p.bank or ("request" if p.vocabulary is not None else "default"),
                    "vocabulary_size": strings, "calibrated": False, "triplets": [], "layout": [], "content": []}
        boxes = np.array([[d["x1"], d["y1"], d["x2"], d["y2"]] for d in dets], dtype=np.float64)
        return {"regions": dets, **await self._score(image, boxes, p)}

    async def _judge(self, image: np.ndarray, p: JudgeParams) -> dict:
        h, w = image.shape[:2]
        boxes = S.validate_boxes(p.boxes, w, h, self.sec)
        if self.judge_handle is None:
            raise S.ApiError(422, "no_judge", "this deployment has no judge")
        if len(p.relations) > self.sec.max_relations_judged:
            raise S.ApiError(422, "invalid_request", f"relations: {len(p.relations)} exceed the limit of "
                                                     f"{self.sec.max_relations_judged}")
        rels = []
        for i, r in enumerate(p.relations):
            if r.subject >= len(boxes) or r.object >= len(boxes) or r.subject == r.object:
                raise S.ApiError(422, "invalid_request", f"relations[{i}]: subject {r.subject} and object {r.object} "
                                                         f"must be distinct indices below {len(boxes)}")
            pred = S.validate_strings([r.predicate], 1, self.sec.max_string_chars, f"relations[{i}].predicate")[0]
            rels.append({"subject": r.subject, "object": r.object, "predicate": pred})
        out = await self._call(self.judge_handle.judge, image, boxes, rels, p.corruption_share, p.seed)
        strip = lambda xs: [{k: v for k, v in x.items() if k != "raw"} for x in xs]  # noqa: E731
        return {"verdicts": strip(out["verdicts"]), "controls": strip(out["controls"]),
                "control_acceptance": out["control_acceptance"]}

    async def _render(self, image: np.ndarray, p: RenderParams) -> Response:
        h, w = image.shape[:2]
        boxes = S.validate_boxes(p.boxes, w, h, self.sec, min_count=1)
        if p.triplets is not None:
            triplets = S.validate_triplets(p.triplets, len(boxes), self.sec)
        elif len(boxes) >= 2:
            triplets = (await self._score(image, boxes, p))["triplets"]
        else:
            triplets = []
        names = self._labels(p.boxes)  # what relate predict draws: number, label, top-triplet table
        png = await self._draw(image, boxes, triplets, names)
        return Response(content=png, media_type="image/png")

    # ---- JSON endpoints ---------------------------------------------------------------------
    @api.post("/v1/relations", response_model=RelationsResponse, **_V1)
    async def relations(self, body: RelationsRequest) -> dict:
        """Scored triplets for client-given regions (boxes or masks) against a vocabulary."""
        return await self._relations(await self._image(S.decode_base64(body.image), body), body)

    @api.post("/v1/graph", response_model=GraphResponse, **_V1)
    async def graph(self, body: GraphRequest) -> dict:
        """Detect regions with the open-vocabulary detector, then score their relations."""
        return await self._graph(await self._image(S.decode_base64(body.image), body), body)

    @api.post("/v1/judge", response_model=JudgeResponse, **_V1)
    async def judge(self, body: JudgeRequest) -> dict:
        """Per-relation true/false verdicts from the VLM judge, with the optional corruption control."""
        return await self._judge(await self._image(S.decode_base64(body.image), body), body)

    @api.post("/v1/render", response_class=Response, dependencies=_V1["dependencies"],
              responses={200: {"content": {"image/png": {}}, "description": "PNG"}, **_ERRORS})
    async def render(self, body: RenderRequest) -> Response:
        """PNG of the image with numbered boxes and the relation graph drawn."""
        return await self._render(await self._image(S.decode_base64(body.image), body), body)

    # ---- multipart twins ----------------------------------------------------------------------
    @api.post("/v1/relations/upload", response_model=RelationsResponse, **_V1)
    async def relations_upload(self, image: UploadFile = File(..., description="image file"),
                               params: str = Form(..., description=_PARAMS_DOC)) -> dict:
        p = _parse(RelationsParams, params)
        return await self._relations(await self._image(await _read_upload(image), p), p)

    @api.post("/v1/graph/upload", response_model=GraphResponse, **_V1)
    async def graph_upload(self, image: UploadFile = File(..., description="image file"),
                           params: str = Form("{}", description=_PARAMS_DOC)) -> dict:
        p = _parse(GraphParams, params)
        return await self._graph(await self._image(await _read_upload(image), p), p)

    @api.post("/v1/judge/upload", response_model=JudgeResponse, **_V1)
    async def judge_upload(self, image: UploadFile = File(..., description="image file"),
                           params: str = Form(..., description=_PARAMS_DOC)) -> dict:
        p = _parse(JudgeParams, params)
        return await self._judge(await self._image(await _read_upload(image), p), p)

    @api.post("/v1/render/upload", response_class=Response, dependencies=_V1["dependencies"],
              responses={200: {"content": {"image/png": {}}, "description": "PNG"}, **_ERRORS})
    async def render_upload(self, image: UploadFile = File(..., description="image file"),
                            params: str = Form(..., description=_PARAMS_DOC)) -> Response:
        p = _parse(RenderParams, params)
        return await self._render(await self._image(await _read_upload(image), p), p)

    # ---- the page -------------------------------------------------------------------------------
    @api.get("/ui/relate.html", include_in_schema=False)
    async def page(self) -> Response:
        """Draw or detect boxes on your own image, type predicates, read the ranked triplets."""
        return _page_file("relate.html")

    @api.get("/ui/relate.js", include_in_schema=False)
    async def page_script(self) -> Response:
        return _page_file("relate.js")

    @api.get("/ui/relate.css", include_in_schema=False)
    async def page_style(self) -> Response:
        return _page_file("relate.css")

    # ---- health -----------------------------------------------------------------------------
    @api.get("/healthz", response_model=HealthResponse)
    async def healthz(self) -> dict:
        """Liveness: the ingress answers (no model is called)."""
        return {"status": "ok"}

    # module-level functions are not shipped with the class (Serve pickles it by value)
    @staticmethod
    def _serve_http_options():
        from ray.serve.context import _get_global_client

        return _get_global_client().http_config

    @staticmethod
    def _deployment_states() -> dict[str, str]:
        """Per deployment of this replica's app: 'ok' or why not (from the controller's status)."""
        try:
            app_name = serve.get_replica_context().app_name
            app = serve.status().applications[app_name]
        except Exception as exc:  # noqa: BLE001  controller unreachable: not ready
            return {"controller": f"{type(exc).__name__}: {exc}"[:200]}
        names = {"RelationModel": "relation", "Detector": "detector", "Judge": "judge"}
        out = {}
        for dep_name, d in app.deployments.items():
            if dep_name not in names:
                continue
            running = d.replica_states.get("RUNNING", 0)
            status = str(getattr(d.status, "value", d.status))
            out[names[dep_name]] = "ok" if status in _READY_STATES and running > 0 else f"{status}: {running} running"
        return out

    @api.get("/readyz", response_model=ReadyResponse, responses={503: {"model": ReadyResponse}})
    async def readyz(self):
        """Readiness: every deployment of this app has a running, healthy replica (the Serve
        controller's view from its health checks; no request joins a model queue, so a full
        queue does not make the service look down)."""
        now = time.monotonic()
        if now - self._ready[0] > 1.0:
            self._ready = (now, await asyncio.to_thread(self._deployment_states))
        states = self._ready[1]
        ready = bool(states) and all(v == "ok" for v in states.values())
        return JSONResponse({"status": "ready" if ready else "not_ready", "deployments": states},
                            status_code=200 if ready else 503)


def build_app(cfg: ServeAppConfig | dict[str, Any] | None = None):
    """The unstarted Serve application for ``cfg`` (a ServeAppConfig or its dict form)."""
    from serve_apps.deployments import DetectorDeployment, JudgeDeployment, RelationModelDeployment

    cfg = ServeAppConfig.model_validate(cfg or {}) if not isinstance(cfg, ServeAppConfig) else cfg
    S.resolve_token(cfg.security)  # a missing token variable fails here, not on the first request
    cfg = cfg.model_copy(update={"relation": cfg.relation.resolved()})  # 'latest': one folder for every replica
    _LOG.info("relation model: %s", cfg.relation.weights_label())
    relation = RelationModelDeployment.options(**cfg.relation.deployment.serve_options()).bind(cfg.relation)
    detector = (None if cfg.detector is None else
                DetectorDeployment.options(**cfg.detector.deployment.serve_options()).bind(cfg.detector))
    judge = None if cfg.judge is None else JudgeDeployment.options(**cfg.judge.deployment.serve_options()).bind(cfg.judge.judge)
    return IngressDeployment.options(**cfg.ingress.serve_options()).bind(cfg, relation, detector, judge)


def app_builder(args: dict[str, Any]):
    """Entry point for Serve config files (``import_path: serve_apps.app:app_builder``)."""
    return build_app(ServeAppConfig.model_validate(args or {}))
