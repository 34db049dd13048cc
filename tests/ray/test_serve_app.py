"""The Serve app over real HTTP on loopback: every endpoint against in-process calls of the same
models, bad input, a schemathesis run over the generated OpenAPI spec, and a load test with a
replica killed mid-load. One app is started for the module (tiny random-weight models)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time

import httpx
import numpy as np
import pytest
from PIL import Image

from _serve_helpers import AUTH, SERVE_TOKEN as TOKEN, b64png as _b64, free_port as _free_port, png as _png  # noqa: E402
VOCAB = ["left of", "holding", "on top of", "near", "behind"]


def _scene(i: int):
    from relate.data.synthetic import SyntheticConfig, make_scene

    s = make_scene(i, SyntheticConfig(seed=0, min_size=64, max_size=96))
    return s.image, [{k: float(b[k]) for k in ("x1", "y1", "x2", "y2")} for b in s.boxes]


@pytest.fixture(scope="module")
def served(ray_session, tmp_path_factory):
    from ray import serve

    from serve_apps.app import build_app
    from serve_apps.config import ServeAppConfig
    from serve_apps.tiny import save_tiny_checkpoint, save_tiny_owlv2

    root = tmp_path_factory.mktemp("serve")
    ckpt, owl = save_tiny_checkpoint(root / "ckpt", VOCAB), save_tiny_owlv2(root / "owl")
    port = _free_port()
    cfg = ServeAppConfig.model_validate({
        "http": {"port": port},
        "security": {"bearer_token": TOKEN, "max_request_bytes": 2_000_000, "max_vocabulary": 64, "max_regions": 40},
        "relation": {"checkpoint": str(ckpt), "banks": {"spatial": ["left of", "right of", "above"]},
                     "max_batch_size": 8, "batch_wait_timeout_s": 0.02, "torch_threads": 1,
                     "deployment": {"num_replicas": 2, "num_cpus": 0.4, "max_ongoing_requests": 16,
                                    "health_check_period_s": 2, "health_check_timeout_s": 30}},
        "detector": {"detector": {"mode": "transformers", "model": str(owl), "threshold": 0.0, "max_boxes": 6,
                                  "queries": ["person", "cup"], "torch_threads": 1},
                     "deployment": {"num_cpus": 0.2}},
        "judge": {"deployment": {"num_cpus": 0.1}},
        "ingress": {"num_cpus": 0.1, "max_ongoing_requests": 64},
    })
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(build_app(cfg), name="relate_test", route_prefix="/")
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120, headers=AUTH)
    yield {"client": client, "cfg": cfg, "ckpt": ckpt, "owl": owl, "url": f"http://127.0.0.1:{port}"}
    client.close()
    serve.shutdown()


@pytest.fixture(scope="module")
def local(served):
    """The same models, in process."""
    from actors.detector import DetectorActor
    from actors.judge import JudgeActor
    from relate.api import load_model

    cfg = served["cfg"]
    return {"predictor": load_model(served["ckpt"]), "detector": DetectorActor(cfg.detector.detector),
            "judge": JudgeActor(cfg.judge.judge)}


def _close(http: list[dict], direct: list[dict]) -> None:
    key = lambda t: (t["subject"], t["object"], t["predicate"])  # noqa: E731
    assert len(http) == len(direct) > 0
    d = {key(t): t for t in direct}
    assert set(d) == {key(t) for t in http}
    for t in http:
        for f in ("score", "spatial_score", "semantic_score"):
            assert abs(t[f] - d[key(t)][f]) <= 1e-5, (t, d[key(t)])


def test_relations_match_in_process_under_batching(served, local):
    scenes = [_scene(i) for i in range(6)]

    async def fire():
        async with httpx.AsyncClient(base_url=served["url"], timeout=120, headers=AUTH) as c:
            return await asyncio.gather(*[c.post("/v1/relations", json={"image": _b64(im), "boxes": bx, "topk": 1000})
                                          for im, bx in scenes])

    for r, (im, bx) in zip(asyncio.run(fire()), scenes):  # concurrent: scored in shared batches
        assert r.status_code == 200, r.text
        body = r.json()
        boxes = [[b["x1"], b["y1"], b["x2"], b["y2"]] for b in bx]
        _close(body["triplets"], local["predictor"].predict(im, boxes, topk=1000))
        split = local["predictor"].predict(im, boxes, topk=1000, decompose=True)
        _close(body["layout"], split["layout"])
        _close(body["content"], split["content"])
        assert body["bank"] == "default" and body["vocabulary_size"] == len(VOCAB) and not body["calibrated"]


def test_request_vocabulary_masks_and_upload(served, local):
    c, pred = served["client"], local["predictor"]
    im, bx = _scene(7)
    boxes = np.array([[b["x1"], b["y1"], b["x2"], b["y2"]] for b in bx])
    vocab = ["riding", "next to", "wearing"]
    r = c.post("/v1/relations", json={"image": _b64(im), "boxes": bx, "vocabulary": vocab, "topk": 20})
    assert r.status_code == 200, r.text
    assert r.json()["bank"].startswith("request:") and r.json()["vocabulary_size"] == 3
    _close(r.json()["triplets"], pred.predict(im, boxes, vocabulary=vocab, topk=20))
    r = c.post("/v1/relations", json={"image": _b64(im), "boxes": bx, "bank": "spatial", "topk": 5})
    _close(r.json()["triplets"], pred.predict(im, boxes, vocabulary=["left of", "right of", "above"], topk=5))
    # masks: COCO uncompressed RLE of box-shaped masks
    h, w = im.shape[:2]
    masks = np.zeros((len(boxes), h, w), bool)
    for k, (x1, y1, x2, y2) in enumerate(np.round(boxes).astype(int)):
        masks[k, y1:y2, x1:x2] = True
    rles = []
    for m in masks:
        flat = m.T.reshape(-1).astype(np.int8)
        edges = np.flatnonzero(np.diff(np.concatenate([[0], flat, [1 - flat[-1]]])))
        rles.append({"size": [h, w], "counts": np.diff(np.concatenate([[0], edges])).tolist()})
    r = c.post("/v1/relations", json={"image": _b64(im), "masks": rles, "topk": 50})
    assert r.status_code == 200, r.text
    _close(r.json()["triplets"], pred.predict(im, masks, topk=50))
    params = json.dumps({"boxes": bx, "topk": 50})
    r = c.post("/v1/relations/upload", files={"image": ("x.png", _png(im), "image/png")}, data={"params": params})
    assert r.status_code == 200, r.text
    _close(r.json()["triplets"], pred.predict(im, boxes, topk=50))


def test_graph_judge_render_match_in_process(served, local):
    from relate.render import render_graph_png

    c = served["client"]
    im, bx = _scene(3)
    r = c.post("/v1/graph", json={"image": _b64(im), "queries": ["person", "cup"], "max_boxes": 4, "topk": 30})
    assert r.status_code == 200, r.text
    dets = local["detector"].detect(im, ["person", "cup"], None, 4)
    assert [round(d["score"], 5) for d in r.json()["regions"]] == [round(d["score"], 5) for d in dets]
    boxes = np.array([[d["x1"], d["y1"], d["x2"], d["y2"]] for d in dets])
    _close(r.json()["triplets"], local["predictor"].predict(im, boxes, topk=30))

    rels = [{"subject": 0, "object": 1, "predicate": "left of"}, {"subject": 1, "object": 0, "predicate": "near"},
            {"subject": 0, "object": 2, "predicate": "holding"}]
    r = c.post("/v1/judge", json={"image": _b64(im), "boxes": bx, "relations": rels, "corruption_share": 0.67, "seed": 1})
    assert r.status_code == 200, r.text
    direct = local["judge"].judge(im, np.array([[b["x1"], b["y1"], b["x2"], b["y2"]] for b in bx]), rels, 0.67, 1)
    assert [v["verdict"] for v in r.json()["verdicts"]] == [v["verdict"] for v in direct["verdicts"]]
    assert len(r.json()["controls"]) == 2 and r.json()["control_acceptance"] == direct["control_acceptance"]

    # /v1/render draws with relate.render, as relate predict does: box labels beside the numbers
    edges = [{"subject": 0, "object": 1, "predicate": "near"}]
    named = [dict(bx[0], label="person")] + bx[1:]
    boxes = np.array([[b["x1"], b["y1"], b["x2"], b["y2"]] for b in bx])
    r = c.post("/v1/render", json={"image": _b64(im), "boxes": named, "triplets": edges})
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    assert r.content == render_graph_png(im, boxes, edges, ["person"] + [""] * (len(bx) - 1))
    assert r.content != render_graph_png(im, boxes, edges)
    # no triplets given: the model's, as /v1/relations answers them, with their scores in the table
    r = c.post("/v1/render/upload", files={"image": ("x.png", _png(im))}, data={"params": json.dumps({"boxes": bx})})
    scored = c.post("/v1/relations", json={"image": _b64(im), "boxes": bx}).json()["triplets"]
    assert r.status_code == 200 and r.content == render_graph_png(im, boxes, scored, [""] * len(bx))
    side = 720 / max(im.shape[:2])  # the picture scaled up to 720 px on its long side, the table beside it
    assert Image.open(io.BytesIO(r.content)).size[0] >= im.shape[1] * side + 300


def test_health_openapi_and_auth(served):
    c = served["client"]
    assert c.get("/healthz").json() == {"status": "ok"}
    ready = c.get("/readyz").json()
    assert ready["status"] == "ready" and set(ready["deployments"].values()) == {"ok"}
    spec = c.get("/openapi.json").json()
    for p in ("/v1/relations", "/v1/graph", "/v1/judge", "/v1/render", "/v1/relations/upload", "/healthz", "/readyz"):
        assert p in spec["paths"]
    assert "description" in spec["components"]["schemas"]["Triplet"]["properties"]["spatial_score"]
    assert c.get("/docs").status_code == 200
    im, bx = _scene(0)
    r = httpx.post(f"{served['url']}/v1/relations", json={"image": _b64(im), "boxes": bx}, timeout=60)
    assert r.status_code == 401 and "bearer token" in r.json()["message"]


@pytest.mark.parametrize("body,status,needle", [
    ({"image": "not base64!", "boxes": []}, 400, "base64"),
    ({"image": base64.b64encode(b"\x89PNG\r\n\x1a\nbroken").decode(), "boxes": []}, 400, "not a decodable image"),
    ({"boxes": [{"x1": 0, "y1": 0, "x2": 10, "y2": 10}]}, 422, "image"),
    ({"image": "@img", "boxes": [{"x1": 0, "y1": 0, "x2": 500, "y2": 10}] * 2}, 422, "boxes[0]"),
    ({"image": "@img", "boxes": "@boxes", "vocabulary": []}, 422, "at least one"),
    ({"image": "@img", "boxes": "@boxes", "vocabulary": [f"p{i}" for i in range(65)]}, 422, "limit of 64"),
    ({"image": "@img", "boxes": "@boxes", "bank": "nope"}, 422, "valid: ['default', 'spatial']"),
    ({"image": "@img", "boxes": "@boxes", "topk": "many"}, 422, "topk"),
    ({"image": "@img", "boxes": "@boxes", "threshold": 0.5}, 422, "calibrated"),
    ({"image": 5, "boxes": "@boxes"}, 422, "image"),
])
def test_bad_input_is_4xx_with_message(served, body, status, needle):
    im, bx = _scene(1)
    body = {k: (_b64(im) if v == "@img" else bx if v == "@boxes" else v) for k, v in body.items()}
    r = served["client"].post("/v1/relations", json=body)
    assert r.status_code == status, r.text
    assert needle in r.json()["message"] and r.json()["error"]


def _bomb_png(w: int, h: int) -> bytes:
    import struct
    import zlib

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


def test_oversized_body_and_bomb_keep_server_up(served):
    c = served["client"]
    im, bx = _scene(2)
    r = c.post("/v1/relations", json={"image": "A" * 2_100_000, "boxes": bx})
    assert r.status_code == 413 and "exceeds 2000000 bytes" in r.json()["message"]
    r = c.post("/v1/relations", json={"image": base64.b64encode(_bomb_png(6000, 6000)).decode(), "boxes": bx})
    assert r.status_code == 413 and "6000x6000" in r.json()["message"]
    r = c.post("/v1/judge", json={"image": _b64(im), "boxes": bx, "relations": [{"subject": 0, "object": 0, "predicate": "on"}]})
    assert r.status_code == 422 and "distinct" in r.json()["message"]
    r = c.post("/v1/relations/upload", files={"image": ("x.png", b"garbage")}, data={"params": "{not json"})
    assert r.status_code in (400, 422) and r.json()["message"]
    assert c.get("/healthz").status_code == 200


def test_schemathesis_fuzz_no_server_errors(served):
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable

    schema = schemathesis.openapi.from_url(f"{served['url']}/openapi.json", headers=AUTH)
    failures, calls, with_input = [], {}, set()
    for result in schema.get_all_operations():
        op = result.ok()
        if op.body or op.query or op.path_parameters:
            with_input.add(op.label)
        for mode in schemathesis.GenerationMode:  # valid and invalid inputs, 25 examples each
            @settings(max_examples=25, deadline=None, database=None, derandomize=True,
                      suppress_health_check=list(HealthCheck))
            @given(case=op.as_strategy(generation_mode=mode))
            def run(case):
                resp = case.call(base_url=served["url"], headers=AUTH, timeout=60)
                calls[op.label] = calls.get(op.label, 0) + 1
                if resp.status_code >= 500:
                    failures.append((op.label, resp.status_code, resp.text[:200]))
                elif resp.status_code >= 400 and "message" not in resp.text:
                    failures.append((op.label, resp.status_code, resp.text[:200]))
            try:
                run()
            except Unsatisfiable:  # e.g. no invalid input exists for a parameterless GET
                pass
    print(f"\nschemathesis calls per operation: {calls}")
    assert not failures, failures
    # every operation was called; each one that takes input far more often than the 6 examples
    # per operation this test used to run
    assert set(calls) == {r.ok().label for r in schema.get_all_operations()}, calls
    assert len(with_input) >= 8 and all(calls[label] >= 25 for label in with_input), calls
    assert served["client"].get("/readyz").json()["status"] == "ready"


async def _load(url: str, bodies: list[dict], concurrency: int, on_progress=None) -> tuple[list[float], list[str]]:
    """POST every body to /v1/relations with ``concurrency`` in flight; latencies (s) and errors."""
    sem, lat, errors, done = asyncio.Semaphore(concurrency), [], [], 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=120, headers=AUTH, limits=limits) as c:
        async def one(body):
            nonlocal done
            async with sem:
                t0 = time.perf_counter()
                try:
                    r = await c.post("/v1/relations", json=body)
                    if r.status_code != 200:
                        errors.append(f"{r.status_code}: {r.text[:120]}")
                except httpx.HTTPError as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                lat.append(time.perf_counter() - t0)
                done += 1
                if on_progress is not None:
                    on_progress(done)
        await asyncio.gather(*[one(b) for b in bodies])
    return lat, errors


def _replicas(app: str, deployment: str) -> list[str]:
    import ray

    return sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                  if a["name"].startswith(f"SERVE_REPLICA::{app}#{deployment}#"))


@pytest.mark.slow
def test_load_500_at_16_then_replica_killed(served):
    import ray

    scenes = [_scene(i) for i in range(4)]
    bodies = [{"image": _b64(im), "boxes": bx, "topk": 20} for im, bx in scenes]
    t0 = time.perf_counter()
    lat, errors = asyncio.run(_load(served["url"], [bodies[i % 4] for i in range(500)], 16))
    wall = time.perf_counter() - t0
    p50, p99 = np.percentile(lat, [50, 99])
    print(f"\nload: 500 requests at concurrency 16: errors={len(errors)} p50={p50 * 1e3:.0f} ms "
          f"p99={p99 * 1e3:.0f} ms throughput={500 / wall:.1f} req/s")
    assert errors == [] and len(lat) == 500

    before = _replicas("relate_test", "RelationModel")
    assert len(before) == 2
    killed = {}

    def kill_once(done: int) -> None:  # mid-load: one replica dies with requests in flight
        if done == 40 and not killed:
            ray.kill(ray.get_actor(before[0], namespace="serve"), no_restart=True)
            killed["at"] = time.perf_counter()

    lat2, errors2 = asyncio.run(_load(served["url"], [bodies[i % 4] for i in range(160)], 16, kill_once))
    print(f"replica kill: {len(errors2)} of 160 requests failed during the kill; {errors2[:3]}")
    deadline = time.time() + 60
    while time.time() < deadline:
        now = _replicas("relate_test", "RelationModel")
        if len(now) == 2 and before[0] not in now and served["client"].get("/readyz").status_code == 200:
            break
        time.sleep(1)
    now = _replicas("relate_test", "RelationModel")
    assert killed and before[0] not in now and len(now) == 2, now  # Serve replaced the dead replica
    lat3, errors3 = asyncio.run(_load(served["url"], [bodies[i % 4] for i in range(32)], 16))
    assert errors3 == []
    # at most the requests in flight on the dead replica: each answered 503 once, never replayed
    assert len(errors2) <= 16 and all(e.startswith("503") for e in errors2), errors2
