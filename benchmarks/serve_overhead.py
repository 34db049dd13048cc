"""Serving overhead of the Ray Serve app against the same model called in process (CPU).

Figures:
* ``http_over_inproc_p50``: HTTP end-to-end p50 of ``POST /v1/relations`` (base64 PNG in, JSON
  out, through the proxy, the ingress and the batched RelationModel deployment) over the p50 of
  ``RelationPredictor.predict`` in this process, batch 1, the released 448 px architecture
  (random weights, identical in both). Calls alternate between the two paths so machine load
  drifts hit both alike. Goal <= 1.10. ``handle_over_inproc_p50`` calls the RelationModel
  deployment through a DeploymentHandle (no proxy, no ingress) and ``http_over_handle_p50`` is
  the share the HTTP path adds on top of it, which separates transport from replica compute.
* ``batched_over_unbatched_throughput``: requests/s at concurrency 16 with ``serve.batch``
  (max_batch_size 8) over the same deployment with max_batch_size 1, on the cpu_small
  architecture (the 448 px model is too slow on 2 cores for a 16-way load in under a minute).
* ``auth_overhead_p50``: HTTP p50 of the small app with a bearer token configured (every request
  checked in constant time by the token middleware) over the same app without one, on the
  lightest real call (64 px, two boxes) so the check's share is not hidden; calls alternate.
  ``auth_extra_ms`` is the difference itself. Goal <= 1.02.

Every app here is relation-only (``detector: null``, ``judge: null``). The full run starts four
apps, each with its own RelationModel replica: ``overhead`` (released model), ``batched``,
``unbatched`` and ``token`` (small model). ``--quick`` reports ``http_over_inproc_p50`` and
``auth_overhead_p50`` (not the batching figure) and starts less: ``overhead``, ``batched`` and
``token`` as a second ingress (the same IngressDeployment code, token middleware and ``/v1``
dependency, configured with the token) in front of ``batched``'s RelationModel replica. So the
auth pair differs only in the ingress's token check, and two replica processes import torch
and timm instead of four. The http-overhead part runs fewer rounds (6) without the handle path.

``python -m benchmarks.serve_overhead [--quick] [--out FILE]``
"""

from __future__ import annotations

import asyncio
import base64
import io
import os
import socket
import sys
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

SMALL_MODEL = {"backbone": {"name": "vit_tiny_patch16_224", "img_size": 96, "depth": 3, "patch_size": 8,
                            "taps": [-3, -2, -1]},
               "dim": 128, "heads": 4, "pair_layers": 1, "joint_layers": 1, "scene_grid": 6, "deformable": {"heads": 4}}
VOCAB = [f"predicate {i}" for i in range(50)]


def _scene():
    from relate.data.synthetic import SyntheticConfig, make_scene

    s = make_scene(0, SyntheticConfig(seed=0, min_size=224, max_size=224))
    boxes = [{k: float(b[k]) for k in ("x1", "y1", "x2", "y2")} for b in s.boxes]
    return s.image, boxes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TOKEN = "benchmark-token-0123456789abcdef"


def _config(ckpt: Path, port: int, max_batch: int, threads: int, token: str | None = None) -> dict:
    # No drain on delete: nothing is in flight when an app is deleted here, and the default
    # graceful wait cost 3 s per app.
    fast = {"graceful_shutdown_timeout_s": 0}
    return {"http": {"port": port}, "security": {"bearer_token": token},
            "relation": {"checkpoint": str(ckpt), "max_batch_size": max_batch, "torch_threads": threads,
                         "deployment": {"num_cpus": 0.4, "max_ongoing_requests": 32, "max_queued_requests": 64,
                                        **fast}},
            "detector": None, "judge": None,
            "ingress": {"num_cpus": 0.1, "max_ongoing_requests": 128, **fast}}


def _app(ckpt: Path, port: int, max_batch: int, threads: int, token: str | None = None):
    from serve_apps.app import build_app

    return build_app(_config(ckpt, port, max_batch, threads, token))


def _guarded_ingress(ckpt: Path, port: int, threads: int, shared_app: str):
    """The app's ingress, configured with the bearer token, in front of ``shared_app``'s
    RelationModel replica (no replica of its own)."""
    from ray import serve

    from serve_apps.app import IngressDeployment
    from serve_apps.config import ServeAppConfig

    cfg = ServeAppConfig.model_validate(_config(ckpt, port, 8, threads, TOKEN))
    relation = serve.get_deployment_handle("RelationModel", app_name=shared_app, _check_exists=False)
    return IngressDeployment.options(**cfg.ingress.serve_options()).bind(cfg, relation, None, None)


# The small-model apps: "token" is "batched" with a bearer token configured (the auth pair).
APPS = (("batched", 8, None), ("unbatched", 1, None), ("token", 8, TOKEN))


def _checkpoints(tmp: Path) -> tuple[Path, Path, int]:
    """The released and the small random-weight checkpoints, and this process's torch threads."""
    import torch

    from relate.model import RelationModelConfig
    from serve_apps.tiny import save_tiny_checkpoint

    released = save_tiny_checkpoint(tmp / "released", VOCAB, model=RelationModelConfig().model_dump(mode="json"))
    return released, save_tiny_checkpoint(tmp / "small", VOCAB, model=SMALL_MODEL), torch.get_num_threads()


def _start(ckpts: tuple[Path, Path, int], port: int, quick: bool):
    """Start every app at once: replicas load in parallel and idle ones take no CPU from the one
    being measured (full: four apps of two deployments each, eight processes; quick: five
    processes, see the module docstring). Returns the released model loaded in this process
    (the in-process baseline)."""
    from ray import serve

    from relate.api import load_model

    released, small, threads = ckpts
    targets = [serve.RunTarget(_app(released, port, 8, threads), name="overhead", route_prefix="/overhead")]
    if quick:
        targets += [serve.RunTarget(_app(small, port, 8, threads), name="batched", route_prefix="/batched"),
                    serve.RunTarget(_guarded_ingress(small, port, threads, "batched"), name="token",
                                    route_prefix="/token")]
    else:
        targets += [serve.RunTarget(_app(small, port, mb, threads, tok), name=name, route_prefix=f"/{name}")
                    for name, mb, tok in APPS]
    with ThreadPoolExecutor(1) as pool:  # the in-process baseline loads while the replicas start
        predictor = pool.submit(load_model, released)
        serve.run_many(targets)
        return predictor.result()


def _overhead(predictor, port: int, n: int, with_handle: bool = True) -> dict[str, float]:
    import httpx
    from ray import serve

    image, boxes = _scene()
    arr = np.asarray([[b["x1"], b["y1"], b["x2"], b["y2"]] for b in boxes])
    body = {"image": base64.b64encode(_png(image)).decode(), "boxes": boxes, "topk": 50}
    handle = serve.get_deployment_handle("RelationModel", app_name="overhead")
    req = {"image": image, "regions": arr, "vocabulary": None, "bank": None, "topk": 50, "threshold": None}
    inproc, http, direct = [], [], []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}/overhead", timeout=600) as c:
        for i in range(n + 1):  # first round warms every path up
            t0 = time.perf_counter()
            predictor.predict(image, arr, topk=50)
            t1 = time.perf_counter()
            r = c.post("/v1/relations", json=body)
            t2 = time.perf_counter()
            if with_handle:
                handle.relations.remote(req).result()  # the model replica alone, no HTTP or ingress
            t3 = time.perf_counter()
            r.raise_for_status()
            if i:
                inproc.append(t1 - t0)
                http.append(t2 - t1)
                direct.append(t3 - t2)
    p_in, p_http = statistics.median(inproc), statistics.median(http)
    out = {"http_over_inproc_p50": round(p_http / p_in, 4), "inproc_p50_ms": round(p_in * 1e3, 1),
           "http_p50_ms": round(p_http * 1e3, 1)}
    if with_handle:
        p_h = statistics.median(direct)
        out.update({"handle_over_inproc_p50": round(p_h / p_in, 4), "http_over_handle_p50": round(p_http / p_h, 4),
                    "handle_p50_ms": round(p_h * 1e3, 1)})
    return out


def _png(arr: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    return buf.getvalue()


async def _throughput(url: str, body: dict, n: int, concurrency: int, headers: dict | None = None) -> float:
    import httpx

    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=600, headers=headers,
                                 limits=httpx.Limits(max_connections=concurrency)) as c:
        async def one():
            async with sem:
                (await c.post("/v1/relations", json=body)).raise_for_status()
        await asyncio.gather(*[one() for _ in range(concurrency)])  # warm-up round
        t0 = time.perf_counter()
        await asyncio.gather(*[one() for _ in range(n)])
        return n / (time.perf_counter() - t0)


def _batching(port: int, n: int) -> dict[str, float]:
    image, boxes = _scene()
    body = {"image": base64.b64encode(_png(image)).decode(), "boxes": boxes, "topk": 50}
    out = {name: asyncio.run(_throughput(f"http://127.0.0.1:{port}/{name}", body, n, 16))
           for name in ("batched", "unbatched")}
    return {"batched_over_unbatched_throughput": round(out["batched"] / out["unbatched"], 4),
            "batched_rps": round(out["batched"], 2), "unbatched_rps": round(out["unbatched"], 2)}


def _auth(port: int, rounds: int) -> dict[str, float]:
    import httpx

    image, _ = _scene()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    # the auth pair uses the lightest real call (a 64 px image, two boxes): the shorter the request,
    # the larger the token check's share of it
    light = {"image": base64.b64encode(_png(image[:64, :64])).decode(), "topk": 5,
             "boxes": [{"x1": 0, "y1": 0, "x2": 40, "y2": 40}, {"x1": 20, "y1": 20, "x2": 64, "y2": 64}]}
    base, guarded = [], []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as c:
        assert c.post("/token/v1/relations", json=light).status_code == 401  # the token is really checked
        for i in range(rounds + 2):  # alternate, so load drifts hit both alike; two warm-up rounds
            t0 = time.perf_counter()
            c.post("/batched/v1/relations", json=light).raise_for_status()
            t1 = time.perf_counter()
            c.post("/token/v1/relations", json=light, headers=auth).raise_for_status()
            t2 = time.perf_counter()
            if i >= 2:
                base.append(t1 - t0)
                guarded.append(t2 - t1)
    p_base, p_tok = statistics.median(base), statistics.median(guarded)
    return {"auth_overhead_p50": round(p_tok / p_base, 4), "auth_p50_ms": round(p_tok * 1e3, 2),
            "no_auth_p50_ms": round(p_base * 1e3, 2), "auth_extra_ms": round((p_tok - p_base) * 1e3, 2)}


def measure(quick: bool) -> dict[str, float]:
    if "torch" in sys.modules:
        raise RuntimeError("import serve_overhead before torch: OMP_NUM_THREADS must be set first")
    import ray
    from ray import serve

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # Same threading environment on both paths: Ray gives the replica OMP_NUM_THREADS=1 (from its
    # fractional num_cpus) and the deployment sets torch's intra-op threads to ours. Left unset in
    # this process, OpenMP's defaults alone made the in-process baseline ~2x slower on 2 shared cores.
    os.environ["OMP_NUM_THREADS"] = "1"
    t0 = time.perf_counter()

    def phase(name: str) -> None:
        print(f"[serve_overhead] {name} done at {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory() as d, ThreadPoolExecutor(1) as pool:
        ckpts = pool.submit(_checkpoints, Path(d))  # torch import and weights, while Ray starts
        ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        try:
            port = _free_port()
            serve.start(http_options={"host": "127.0.0.1", "port": port})
            phase("ray and serve start")
            predictor = _start(ckpts.result(), port, quick)
            phase("apps start")
            figures = _overhead(predictor, port, 6 if quick else 20, with_handle=not quick)
            phase("http overhead")
            if not quick:
                figures.update(_batching(port, 320))
                phase("batching")
            figures.update(_auth(port, 60 if quick else 300))
            phase("auth")
        finally:
            ray.shutdown()  # takes Serve with it
            phase("ray shutdown")
    return figures


if __name__ == "__main__":
    from benchmarks._common import run_benchmark

    run_benchmark("serve_overhead", measure)
