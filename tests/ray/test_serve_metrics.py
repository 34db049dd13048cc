"""The app's custom Serve metrics, end to end: requests over real HTTP on loopback, then the
node's Prometheus endpoint (Ray's metrics agent, the same one a Prometheus server scrapes) is read
until every series shows the counts those requests must produce. Tiny random-weight models."""

from __future__ import annotations

import time
import urllib.request

import httpx
import pytest

from _serve_helpers import AUTH, b64png as _b64, tiny_app  # noqa: E402

APP = "relate_metrics"
VOCAB = ["left of", "holding", "on top of", "near", "behind"]
REQUEST_VOCAB = ["beside", "under", "carrying"]


def _scene(i: int):
    from relate.data.synthetic import SyntheticConfig, make_scene

    s = make_scene(i, SyntheticConfig(seed=0, min_size=64, max_size=96))
    return _b64(s.image), [{k: float(b[k]) for k in ("x1", "y1", "x2", "y2")} for b in s.boxes]


@pytest.fixture(scope="module")
def served(ray_session, tmp_path_factory):
    with tiny_app(tmp_path_factory.mktemp("serve_metrics"), APP, VOCAB, max_boxes=4) as url, \
            httpx.Client(base_url=url, timeout=120, headers=AUTH) as client:
        yield client


def _scrape(ray) -> list[tuple[str, dict, float]]:
    """Every sample of this app on the local node's Prometheus endpoint."""
    from prometheus_client.parser import text_string_to_metric_families

    port = next(n["MetricsExportPort"] for n in ray.nodes() if n["Alive"])
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return [(s.name, s.labels, s.value) for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.labels.get("application") == APP]


def _total(samples, name: str, **labels) -> float | None:
    """Sum over replicas and workers of ``name`` with ``labels``; None when no such series exists."""
    def same(lab: dict, k: str, x) -> bool:  # a float `le` compares as a number ('1', '1.0' alike)
        return lab.get(k) == x if not isinstance(x, float) else k in lab and float(lab[k]) == x

    hits = [v for n, lab, v in samples if n == name and all(same(lab, k, x) for k, x in labels.items())]
    return sum(hits) if hits else None


def test_custom_metrics_count_what_the_requests_did(served, ray_session):
    client = served
    answers = []
    for i, vocab in enumerate([REQUEST_VOCAB, REQUEST_VOCAB, None]):  # miss, hit, default bank (pinned): hit
        image, boxes = _scene(i)
        body = {"image": image, "boxes": boxes, "topk": 1000, **({"vocabulary": vocab} if vocab else {})}
        r = client.post("/v1/relations", json=body)
        assert r.status_code == 200, r.text
        answers.append(r.json())
    image, boxes = _scene(3)
    assert client.post("/v1/relations", json={"image": image, "boxes": boxes, "bank": "nope"}).status_code == 422
    assert client.get("/v1/relations").status_code == 405
    assert [client.get("/healthz").status_code for _ in range(2)] == [200, 200]
    assert client.get("/no/such/path").status_code == 404
    graph = client.post("/v1/graph", json={"image": image, "topk": 1000})
    assert graph.status_code == 200, graph.text
    graph = graph.json()
    relation_calls = 3 + (len(graph["regions"]) >= 2)
    if len(graph["regions"]) >= 2:
        answers.append(graph)
    scores = sum(len(a["triplets"]) for a in answers)  # topk covers every (pair, predicate): all are listed
    assert scores > 0

    # requests went one at a time, so every serve.batch call held one request and one forward ran per call
    want = {
        ("ray_relate_requests_total", (("route", "/v1/relations"), ("method", "POST"), ("status", "200"))): 3,
        ("ray_relate_requests_total", (("route", "/v1/relations"), ("method", "POST"), ("status", "422"))): 1,
        ("ray_relate_requests_total", (("route", "/v1/relations"), ("method", "GET"), ("status", "405"))): 1,
        ("ray_relate_requests_total", (("route", "/healthz"), ("method", "GET"), ("status", "200"))): 2,
        ("ray_relate_requests_total", (("route", "other"), ("method", "GET"), ("status", "404"))): 1,
        ("ray_relate_requests_total", (("route", "/v1/graph"), ("method", "POST"), ("status", "200"))): 1,
        ("ray_relate_request_latency_seconds_count", (("route", "/v1/relations"),)): 5,
        ("ray_relate_request_latency_seconds_bucket", (("route", "/v1/relations"), ("le", "+Inf"))): 5,
        ("ray_relate_request_latency_seconds_count", (("route", "/healthz"),)): 2,
        ("ray_relate_requests_in_flight", (("deployment", "Ingress"),)): 0,
        ("ray_relate_vocabulary_cache_lookups_total", (("result", "miss"),)): 1,
        ("ray_relate_vocabulary_cache_lookups_total", (("result", "hit"),)): relation_calls - 1,
        ("ray_relate_predicate_scores_total", ()): scores,
        ("ray_relate_batch_size_count", (("deployment", "RelationModel"),)): relation_calls,
        ("ray_relate_batch_size_bucket", (("deployment", "RelationModel"), ("le", 1.0))): relation_calls,
        ("ray_relate_forward_latency_seconds_count", (("deployment", "RelationModel"),)): relation_calls,
        ("ray_relate_batch_size_count", (("deployment", "Detector"),)): 1,
        ("ray_relate_forward_latency_seconds_count", (("deployment", "Detector"),)): 1,
        ("ray_relate_detections_total", (("deployment", "Detector"),)): len(graph["regions"]),
        ("ray_relate_detections_per_image_count", (("deployment", "Detector"),)): 1,
        ("ray_relate_replica_queue_depth", (("deployment", "RelationModel"),)): 0,
        ("ray_relate_replica_queue_depth", (("deployment", "Detector"),)): 0,
    }
    deadline, got = time.monotonic() + 90, {}
    while time.monotonic() < deadline:  # Ray's agent exports every few seconds; wait for all of it
        samples = _scrape(ray_session)
        got = {k: _total(samples, k[0], **dict(k[1])) for k in want}
        if got == want:
            break
        time.sleep(3)
    assert got == want, {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
