"""Serve a relation checkpoint locally and query it once over HTTP (the main job's serving step).

Starts Ray Serve on 127.0.0.1 with ``serve_apps/configs/local.yaml``'s application settings
(the given checkpoint, or the newest one under runs/), sends one ``POST /v1/relations`` with
``httpx`` for a synthetic scene (its true boxes as regions), prints the returned graph, asks
``/v1/render`` for the PNG and saves it. A calibrated checkpoint (training installs its Platt map)
is also asked for every triplet at or above a calibrated score of 0.5. The scene and its boxes are
saved beside the graph (``scene.png``, ``boxes.json``) as ``relate predict --boxes`` reads them.

    python scripts/serve_demo.py [--checkpoint DIR] [--out runs/demo/serve] [--scene 0] [--port 8000]
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import socket
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _local_args(checkpoint: str | None, port: int) -> dict:
    import yaml

    doc = yaml.safe_load((ROOT / "serve_apps" / "configs" / "local.yaml").read_text())
    args = doc["applications"][0]["args"]
    args["http"]["port"] = port
    if checkpoint is not None:
        args["relation"]["checkpoint"] = str(checkpoint)
    return args


def _port(preferred: int) -> int:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", preferred))
        except OSError:  # taken: any free port
            s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


THRESHOLD = 0.5


def run(checkpoint: str | None = None, out_dir: str | Path = "runs/demo/serve", scene: int = 0, port: int = 8000) -> dict:
    """Serve, query, print, save; returns the /v1/relations response body."""
    import httpx
    import ray
    from PIL import Image
    from ray import serve

    from relate.data.synthetic import SyntheticConfig, make_scene
    from serve_apps.app import build_app
    from serve_apps.config import ServeAppConfig

    cfg = ServeAppConfig.model_validate(_local_args(checkpoint, _port(port)))
    started = not ray.is_initialized()
    if started:
        ray.init(include_dashboard=False, configure_logging=False, log_to_driver=False)
    serve.start(http_options={"host": cfg.http.host, "port": cfg.http.port})
    serve.run(build_app(cfg), name="relate", route_prefix="/")
    s = make_scene(scene, SyntheticConfig(seed=0))
    buf = io.BytesIO()
    Image.fromarray(s.image).save(buf, "PNG")
    boxes = [{"x1": float(b["x1"]), "y1": float(b["y1"]), "x2": float(b["x2"]), "y2": float(b["y2"]),
              "label": b.get("category")} for b in s.boxes]
    body = {"image": base64.b64encode(buf.getvalue()).decode(), "boxes": boxes, "topk": 10}
    url = f"http://{cfg.http.host}:{cfg.http.port}"
    try:
        with httpx.Client(base_url=url, timeout=300) as client:
            graph = client.post("/v1/relations", json=body)
            graph.raise_for_status()
            result = graph.json()
            edges = [{k: t[k] for k in ("subject", "object", "predicate")} for t in result["triplets"]]
            png = client.post("/v1/render", json={**body, "triplets": edges})
            png.raise_for_status()
            thresholded = None
            if result["calibrated"]:  # a calibrated checkpoint answers an operating point, not only a top-k
                thresholded = client.post("/v1/relations", json={**body, "topk": 50, "threshold": THRESHOLD})
                thresholded.raise_for_status()
                thresholded = thresholded.json()
    finally:
        serve.shutdown()
        if started:
            ray.shutdown()
    print(f"POST {url}/v1/relations  ({len(boxes)} regions, bank {result['bank']!r}, "
          f"{result['vocabulary_size']} predicates)")
    names = [b.get("label") or "object" for b in boxes]
    result["region_labels"] = names  # what the request's boxes were (the demo names triplets with them)
    for t in result["triplets"]:
        print(f"  {t['subject'] + 1}:{names[t['subject']]:<10} {t['predicate']:<22} {t['object'] + 1}:"
              f"{names[t['object']]:<10} score {t['score']:.3f} (spatial {t['spatial_score']:.3f}, "
              f"semantic {t['semantic_score']:.3f})")
    if thresholded is None:
        print("  (checkpoint not calibrated: thresholded requests are refused; see train_jobs.calibrate)")
    else:
        print(f"POST {url}/v1/relations threshold={THRESHOLD}: {len(thresholded['triplets'])} triplets with "
              f"calibrated score >= {THRESHOLD}")
        result["thresholded"] = thresholded
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "graph.png").write_bytes(png.content)
    (out / "graph.json").write_text(json.dumps(result, indent=1))
    (out / "scene.png").write_bytes(buf.getvalue())
    (out / "boxes.json").write_text(json.dumps({"scene.png": boxes}, indent=1))
    print(f"rendered graph: {out / 'graph.png'}")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", default=None, help="checkpoint folder (default: the newest under runs/, as local.yaml)")
    ap.add_argument("--out", default=str(ROOT / "runs" / "demo" / "serve"), help="folder for graph.png / graph.json")
    ap.add_argument("--scene", type=int, default=0, help="synthetic scene index to query")
    ap.add_argument("--port", type=int, default=8000, help="preferred port on 127.0.0.1")
    a = ap.parse_args(argv)
    run(a.checkpoint, a.out, a.scene, a.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
