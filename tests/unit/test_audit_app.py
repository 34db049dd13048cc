"""The audit web app over HTTP (FastAPI TestClient): endpoints, images by id, errors, restarts."""

from __future__ import annotations

import io

import numpy as np
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from relate.audit.sampler import AuditSampleConfig, sample_audit_batch, write_audit_batch
from relate.data.synthetic import SyntheticConfig, make_scene
from relate.schema import CORPUS_SCHEMA, PASSES, to_table
from serve_apps.audit_app import OBJECT_COLOUR, SUBJECT_COLOUR, AuditAppConfig, make_audit_app


def _write_corpus(root, n=3, seed=5):
    world = SyntheticConfig(seed=seed, num_scenes=n, min_size=64, max_size=96)
    (root / "images").mkdir(parents=True)
    rows = []
    for i in range(n):
        s = make_scene(i, world)
        path = root / "images" / f"{s.image_id}.png"
        Image.fromarray(s.image).save(path)
        rels = [dict(subject=r["subject"], object=r["object"], predicate=r["predicate"], score=None,
                     gate="kept" if j % 3 else "swapped", **{"pass": PASSES[j % 2]}) for j, r in enumerate(s.relations)]
        rows.append(dict(image_id=s.image_id, uri=str(path), width=s.width, height=s.height, source="synthetic",
                         split="train", boxes=s.boxes, relations=rels))
    table = to_table(rows, CORPUS_SCHEMA)
    (root / "corpus" / "train").mkdir(parents=True)
    pq.write_table(table, root / "corpus" / "train" / "part-0.parquet")
    return table


@pytest.fixture()
def setup(tmp_path):
    table = _write_corpus(tmp_path / "run")
    batch = sample_audit_batch(table, AuditSampleConfig(strata=("pass", "gate"), per_stratum=2))
    bpath = write_audit_batch(batch, tmp_path / "batch.parquet")
    cfg = AuditAppConfig(corpus=str(tmp_path / "run"), batch=str(bpath), db=str(tmp_path / "v.db"), display_side=200)
    return cfg, batch


def test_page_and_static_files(setup):
    client = TestClient(make_audit_app(setup[0]))
    page = client.get("/")
    assert page.status_code == 200 and "/static/audit/audit.js" in page.text and 'id="btn-undo"' in page.text
    js = client.get("/static/audit/audit.js")
    assert js.status_code == 200 and "Backspace" in js.text
    assert client.get("/api/health").json() == {"ok": True, "items": setup[1].items.num_rows}


def test_audit_flow_over_http(setup):
    cfg, batch = setup
    client = TestClient(make_audit_app(cfg))
    ids = batch.items.column("item_id").to_pylist()
    first = client.get("/api/next", params={"auditor": "ann"}).json()
    assert first["item"]["item_id"] == ids[0] and first["progress"]["judged"] == 0
    assert set(first["item"]) == {"item_id", "position", "predicate", "subject", "object", "display"}  # blind: no pass/gate
    png = Image.open(io.BytesIO(client.get("/api/image", params={"item_id": ids[0]}).content))
    assert [first["item"]["display"]["width"], first["item"]["display"]["height"]] == list(png.size)  # laid out ahead
    assert max(png.size) == cfg.display_side
    r = client.post("/api/verdict", json={"auditor": "ann", "item_id": ids[0], "verdict": "true"}).json()
    assert r["item"]["item_id"] == ids[1] and r["progress"]["counts"]["true"] == 1
    client.post("/api/verdict", json={"auditor": "ann", "item_id": ids[1], "verdict": "false"})
    u = client.post("/api/undo", json={"auditor": "ann"}).json()
    assert u["undone"] == ids[1] and u["item"]["item_id"] == ids[1] and u["progress"]["judged"] == 1
    client.post("/api/verdict", json={"auditor": "bob", "item_id": ids[0], "verdict": "false"})
    assert client.get("/api/progress", params={"auditor": "bob"}).json()["judged"] == 1
    rep = client.get("/api/report").json()
    assert rep["judged_items"] == 1 and rep["unresolved_items"] == 1  # ann true vs bob false: a tie
    assert sum(s["corpus_relations"] for s in rep["strata"]) == sum(batch.corpus_strata.values())
    # Restart: a new app on the same files sees every verdict.
    again = TestClient(make_audit_app(cfg))
    assert again.get("/api/next", params={"auditor": "ann"}).json()["item"]["item_id"] == ids[1]
    assert again.get("/api/report").json() == rep


def test_bad_requests_get_clear_4xx(setup):
    cfg, batch = setup
    client = TestClient(make_audit_app(cfg))
    item = batch.items.column("item_id")[0].as_py()
    r = client.post("/api/verdict", json={"auditor": "ann", "item_id": item, "verdict": "maybe"})
    assert r.status_code == 400 and "verdict 'maybe'" in r.json()["detail"]
    r = client.post("/api/verdict", json={"auditor": "ann", "item_id": "x:1", "verdict": "true"})
    assert r.status_code == 404 and "not in this audit batch" in r.json()["detail"]
    r = client.post("/api/verdict", json={"auditor": "", "item_id": item, "verdict": "true"})
    assert r.status_code == 400 and "auditor name" in r.json()["detail"]
    assert client.post("/api/verdict", json={"auditor": "a", "item_id": item, "verdict": "true", "x": 1}).status_code == 422
    assert client.get("/api/next").status_code == 422
    for bad in ("../../etc/passwd", "/etc/passwd", "x"):
        assert client.get("/api/image", params={"item_id": bad}).status_code == 404


def test_image_has_both_boxes_in_their_colours(setup):
    cfg, batch = setup
    client = TestClient(make_audit_app(cfg))
    item = batch.items.to_pylist()[0]
    r = client.get("/api/image", params={"item_id": item["item_id"]})
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    img = np.asarray(Image.open(io.BytesIO(r.content)).convert("RGB"))
    assert max(img.shape[:2]) == cfg.display_side
    for colour in (SUBJECT_COLOUR, OBJECT_COLOUR):
        assert (img == np.array(colour, np.uint8)).all(axis=-1).sum() > 20, colour


def test_refuses_a_different_corpus_or_missing_images(setup, tmp_path):
    cfg, _ = setup
    _write_corpus(tmp_path / "other", seed=6)
    with pytest.raises(ValueError, match="does not match the audit batch"):
        make_audit_app(cfg.model_copy(update={"corpus": str(tmp_path / "other")}))
    for f in (tmp_path / "run" / "images").iterdir():
        f.unlink()
    with pytest.raises(FileNotFoundError, match="not a local file"):
        make_audit_app(cfg)
