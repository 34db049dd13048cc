"""The audit web app over HTTP (FastAPI TestClient): endpoints, images by id, errors, restarts, and
its guards: auditor tokens, identity from the token, Host check, body cap, security headers."""

from __future__ import annotations

import io
import json
import threading
import time

import httpx
import numpy as np
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from relate.audit.sampler import AuditSampleConfig, sample_audit_batch, write_audit_batch
from relate.data.synthetic import SyntheticConfig, make_scene
from relate.schema import CORPUS_SCHEMA, PASSES, to_table
import serve_apps.audit_guard as guard
from serve_apps.audit_app import OBJECT_COLOUR, SUBJECT_COLOUR, AuditAppConfig, main, make_audit_app
from serve_apps.auth import AuthConfigError

TOKENS = {"ann": "ann-token-0123456789abcdef", "bob": "bob-token-fedcba9876543210"}
LOCAL = "http://127.0.0.1"  # TestClient's default Host (testserver) is not an allowed host name


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


def _client(app, **kw) -> TestClient:
    return TestClient(app, base_url=LOCAL, **kw)


def _auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[who]}"}


@pytest.fixture()
def guarded(setup, tmp_path):
    """The app with a tokens file for ann and bob, and the batch's item ids."""
    cfg, batch = setup
    (tmp_path / "tokens.json").write_text(json.dumps(TOKENS))
    app = make_audit_app(cfg.model_copy(update={"tokens_file": str(tmp_path / "tokens.json")}))
    return _client(app), app, batch.items.column("item_id").to_pylist()


def test_page_and_static_files(setup):
    client = _client(make_audit_app(setup[0]))
    page = client.get("/")
    assert page.status_code == 200 and "/static/audit/audit.js" in page.text and 'id="btn-undo"' in page.text
    js = client.get("/static/audit/audit.js")
    assert js.status_code == 200 and "Backspace" in js.text
    assert client.get("/api/health").json() == {"ok": True, "items": setup[1].items.num_rows}


def test_audit_flow_over_http(setup):
    cfg, batch = setup
    client = _client(make_audit_app(cfg))
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
    again = _client(make_audit_app(cfg))
    assert again.get("/api/next", params={"auditor": "ann"}).json()["item"]["item_id"] == ids[1]
    assert again.get("/api/report").json() == rep


def test_bad_requests_get_clear_4xx(setup):
    cfg, batch = setup
    client = _client(make_audit_app(cfg))
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
    client = _client(make_audit_app(cfg))
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


def _calls(item_id: str) -> list[tuple[str, str, dict]]:
    """Every /api route with a well-formed request (the token test checks this list is complete)."""
    return [("GET", "/api/health", {}), ("GET", "/api/whoami", {}), ("GET", "/api/next", {}),
            ("GET", "/api/progress", {}), ("GET", "/api/report", {}),
            ("GET", "/api/image", {"params": {"item_id": item_id}}),
            ("POST", "/api/verdict", {"json": {"item_id": item_id, "verdict": "true"}}),
            ("POST", "/api/undo", {"json": {}})]


def test_every_api_route_needs_an_auditor_token_but_the_page_shell_does_not(guarded):
    client, app, ids = guarded
    calls = _calls(ids[0])
    assert {r.path for r in app.routes if r.path.startswith("/api")} == {path for _, path, _ in calls}
    bad = [{}, {"Authorization": "Bearer not-a-token-of-anyone-here"}, {"Authorization": TOKENS["ann"]},
           {"Authorization": f"Basic {TOKENS['ann']}"}]
    for method, path, kw in calls:
        for headers in bad:
            r = client.request(method, path, headers=headers, **kw)
            assert r.status_code == 401, (method, path, headers, r.status_code)
            assert "token" in r.json()["message"] and r.headers["www-authenticate"].startswith("Bearer")
        assert client.request(method, path, headers=_auth("ann"), **kw).status_code == 200, (method, path)
    for path in ("/docs", "/openapi.json", "/favicon.ico"):
        assert client.get(path).status_code == 401
    for path in ("/", "/static/audit/audit.js", "/static/audit/audit.css", "/static/common/page.js"):  # the shell: it asks for the token
        assert client.get(path).status_code == 200, path
    assert client.get("/api/whoami", headers=_auth("bob")).json() == {"tokens": True, "auditor": "bob"}


def test_an_auditor_acts_only_as_themselves(guarded):
    client, app, ids = guarded
    store = app.state.store
    r = client.post("/api/verdict", headers=_auth("bob"), json={"item_id": ids[0], "verdict": "false"})  # no name sent
    assert r.status_code == 200
    r = client.post("/api/verdict", headers=_auth("ann"), json={"auditor": "bob", "item_id": ids[0], "verdict": "true"})
    assert r.status_code == 403 and "belongs to auditor 'ann'" in r.json()["detail"]
    r = client.post("/api/undo", headers=_auth("ann"), json={"auditor": "bob"})
    assert r.status_code == 403 and "cannot act as 'bob'" in r.json()["detail"]
    for path in ("/api/next", "/api/progress"):
        assert client.get(path, params={"auditor": "bob"}, headers=_auth("ann")).status_code == 403
    assert store.live_verdicts() == [("bob", ids[0], "false")]            # bob's verdict untouched
    # ann's own undo withdraws nothing of bob's; her own name (or none) files under her token's auditor.
    assert client.post("/api/undo", headers=_auth("ann"), json={}).json()["undone"] is None
    r = client.post("/api/verdict", headers=_auth("ann"), json={"auditor": " ann", "item_id": ids[0], "verdict": "true"})
    assert r.status_code == 200 and r.json()["progress"] == {**r.json()["progress"], "auditor": "ann", "judged": 1}
    assert client.get("/api/next", headers=_auth("bob")).json()["item"]["item_id"] == ids[1]
    assert client.post("/api/undo", headers=_auth("ann"), json={}).json()["undone"] == ids[0]
    assert store.live_verdicts() == [("bob", ids[0], "false")]
    assert client.get("/api/report", headers=_auth("ann")).json()["judged_items"] == 1


def test_token_lookup_checks_every_token_and_files_are_validated(tmp_path, monkeypatch):
    f = tmp_path / "tokens.txt"
    f.write_text("# auditors\nann:" + TOKENS["ann"] + "\n\nbob: " + TOKENS["bob"] + "\n")
    tokens = guard.load_auditor_tokens(f)
    assert tokens.names == ["ann", "bob"] and tokens.auditor_for(None) is None
    seen = []
    real = guard.token_matches
    monkeypatch.setattr(guard, "token_matches", lambda h, t: seen.append(t) or real(h, t))
    assert tokens.auditor_for(f"Bearer {TOKENS['ann']}") == "ann" and len(seen) == 2  # no early exit
    for text, msg in [("ann:short", "at least 16"), ("ann:" + "x" * 20 + "\nbob:" + "x" * 20, "share a token"),
                      ("../x:" + "y" * 20, "auditor name"), ("ann " + "x" * 20, "name:token"), ("", "no auditor"),
                      ('{"ann": 5}', "token string"), ("ann:" + "x" * 20 + "\nann:" + "y" * 20, "twice")]:
        f.write_text(text)
        with pytest.raises(AuthConfigError, match=msg) as err:
            guard.load_auditor_tokens(f)
        assert "x" * 20 not in str(err.value)  # a token is never echoed
    with pytest.raises(AuthConfigError, match="does not exist"):
        guard.load_auditor_tokens(tmp_path / "none.json")


def test_refuses_to_start_beyond_loopback_without_tokens(setup, tmp_path, monkeypatch):
    import uvicorn

    cfg, _ = setup
    with pytest.raises(AuthConfigError, match="'0.0.0.0'.*--tokens FILE.*RELATE_AUDIT_TOKENS_FILE"):
        make_audit_app(cfg.model_copy(update={"host": "0.0.0.0"}))
    bound = []
    monkeypatch.setattr(uvicorn, "run", lambda app, host, **kw: bound.append(host))  # never really bind here
    argv = ["--corpus", cfg.corpus, "--batch", cfg.batch, "--db", cfg.db, "--host", "0.0.0.0"]
    monkeypatch.delenv(guard.TOKENS_FILE_ENV, raising=False)
    with pytest.raises(SystemExit, match="audit page not started.*--tokens"):
        main(argv)
    assert bound == []
    (tmp_path / "tokens.json").write_text(json.dumps(TOKENS))
    monkeypatch.setenv(guard.TOKENS_FILE_ENV, str(tmp_path / "tokens.json"))  # the variable is enough
    main(argv)
    assert bound == ["0.0.0.0"]


def test_only_known_host_names_are_answered(setup):
    cfg, _ = setup
    client = _client(make_audit_app(cfg.model_copy(update={"allowed_hosts": ["audit.example.org"]})))
    for host in ("127.0.0.1:8765", "localhost", "[::1]:8765", "audit.example.org"):
        assert client.get("/api/health", headers={"Host": host}).status_code == 200, host
    for host in ("evil.example.com", "127.0.0.1.nip.io", "audit.example.org.evil.com"):
        r = client.get("/api/health", headers={"Host": host})
        assert r.status_code == 400 and "host" in r.text.lower(), host
        assert client.get("/", headers={"Host": host}).status_code == 400


def test_bodies_over_the_cap_get_413(setup):
    cfg, batch = setup
    client = _client(make_audit_app(cfg))
    item = batch.items.column("item_id")[0].as_py()
    body = json.dumps({"auditor": "ann", "item_id": item, "verdict": "true"})
    ok = body[:-1] + " " * (cfg.max_body_bytes - len(body)) + "}"
    assert client.post("/api/verdict", content=ok, headers={"Content-Type": "application/json"}).status_code == 200
    big = body[:-1] + " " * cfg.max_body_bytes + "}"
    for path in ("/api/verdict", "/api/undo"):
        r = client.post(path, content=big, headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and f"exceeds {cfg.max_body_bytes} bytes" in r.json()["message"]
        r = client.post(path, content=iter([big.encode()]), headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and "content-length" not in r.request.headers  # counted, not declared
    assert client.get("/api/progress", params={"auditor": "ann"}).json()["judged"] == 1  # only the one that fit


def test_streamed_body_is_capped_over_real_loopback(setup):
    import uvicorn

    cfg, _ = setup
    server = uvicorn.Server(uvicorn.Config(make_audit_app(cfg), host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        chunks = (b" " * 512 for _ in range(64))  # chunked: no Content-Length, 32 KiB in all
        r = httpx.post(f"http://127.0.0.1:{port}/api/undo", content=chunks, timeout=10)
        assert r.status_code == 413 and r.json()["error"] == "request_too_large"
        assert "content-security-policy" in r.headers
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_security_headers_on_every_response(guarded):
    client, _, ids = guarded
    responses = [client.get("/"), client.get("/static/audit/audit.js"), client.get("/static/audit/audit.css"),
                 client.get("/api/next", headers=_auth("ann")), client.get("/api/next"),
                 client.get("/api/image", params={"item_id": ids[0]}, headers=_auth("ann")),
                 client.get("/api/image", params={"item_id": "x"}, headers=_auth("ann")),
                 client.get("/api/health", headers={"Host": "evil.example.com"}),
                 client.post("/api/undo", headers=_auth("ann"), content=b"{" + b" " * 9000 + b"}")]
    assert [r.status_code for r in responses] == [200, 200, 200, 200, 401, 200, 404, 400, 413]
    for r in responses:
        csp = r.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp and "img-src 'self' data: blob:" in csp
        assert "unsafe-inline" not in csp and "script-src 'self'" in csp
        assert r.headers["x-content-type-options"] == "nosniff" and r.headers["referrer-policy"] == "no-referrer"
    page = responses[0].text
    assert "<script>" not in page and page.count("<script") == page.count('<script src="/static/')
    assert " on" + "click=" not in page and "style=" not in page  # nothing inline for the CSP to block
