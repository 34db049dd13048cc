"""The review page over HTTP (FastAPI TestClient): blind pair views, answers and undo, the audit
page's guards (identity from the token, loopback-only without tokens, Host check, CSP), resolvers."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from serve_apps.auth import AuthConfigError
from serve_apps.review_app import ReviewAppConfig, make_review_app

TOKENS = {"ann": "ann-review-token-0123456789", "bob": "bob-review-token-9876543210"}
LOCAL = "http://127.0.0.1"


@pytest.fixture()
def cfg(tmp_path):
    (tmp_path / "p.csv").write_text("pair_id,cell,class_a,class_b,models\nq0,CR,rifle,revolver,gpt\n"
                                    "q1,SD,rifle,walking_stick,gemini\n")
    (tmp_path / "tokens.json").write_text(json.dumps(TOKENS))
    return ReviewAppConfig(proposals=str(tmp_path / "p.csv"), db=str(tmp_path / "r.db"))


def test_names_on_loopback(cfg):
    c = TestClient(make_review_app(cfg), base_url=LOCAL)
    page = c.get("/")
    assert page.status_code == 200 and "/static/review/review.js" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    nxt = c.get("/api/next", params={"reviewer": "ann"}).json()
    assert nxt["pair"] == {"pair_id": "q0", "position": 0, "cell": "CR", "class_a": "rifle", "class_b": "revolver",
                           "question": nxt["pair"]["question"]}           # no proposing model: a blind review
    r = c.post("/api/answer", json={"reviewer": "ann", "pair_id": "q0", "decision": "reject"})
    assert r.status_code == 400 and "reject reason" in r.json()["detail"]
    r = c.post("/api/answer", json={"reviewer": "ann", "pair_id": "q0", "decision": "reject", "reason": "convention"})
    assert r.json()["pair"]["pair_id"] == "q1" and r.json()["progress"]["reviewed"] == 1
    assert c.post("/api/undo", json={"reviewer": "ann"}).json()["undone"] == "q0"
    assert c.get("/api/next", headers={"Host": "evil.example"}).status_code == 400


def test_tokens_resolvers_and_bind(cfg, tmp_path):
    with pytest.raises(AuthConfigError, match="review page would listen"):
        make_review_app(cfg.model_copy(update={"host": "0.0.0.0"}))
    app = make_review_app(cfg.model_copy(update={"tokens_file": str(tmp_path / "tokens.json"), "resolvers": ["bob"]}))
    c = TestClient(app, base_url=LOCAL)
    ann = {"Authorization": f"Bearer {TOKENS['ann']}"}
    assert c.get("/api/next").status_code == 401
    assert c.get("/api/whoami", headers=ann).json()["reviewer"] == "ann"
    r = c.post("/api/answer", headers=ann, json={"reviewer": "bob", "pair_id": "q0", "decision": "accept"})
    assert r.status_code == 403                                           # cannot answer as someone else
    assert c.post("/api/answer", headers=ann, json={"pair_id": "q0", "decision": "accept"}).status_code == 200
    r = c.post("/api/resolve", headers=ann, json={"pair_id": "q0", "decision": "accept"})
    assert r.status_code == 403 and "may not resolve" in r.json()["detail"]
    r = c.post("/api/resolve", headers={"Authorization": f"Bearer {TOKENS['bob']}"},
               json={"pair_id": "q0", "decision": "accept"})
    assert r.status_code == 200 and r.json()["status"]["resolved"] == 1
