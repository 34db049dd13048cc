"""End to end: two reviewers review PoporoIN's proposed pairs in a real browser (the server killed
and restarted midway), a resolver settles the disagreements on the page, and the report's kappa
must equal scikit-learn's on what the store holds; the accepted pairs go to the PoporoIN planner.

Run twice: with a reviewer tokens file and without one (loopback: the page asks for a name). Needs
``pip install playwright`` and Debian's ``/usr/bin/chromium``, as the audit page's browser test
(:mod:`_browser`): when either is missing the test FAILS if ``CI`` is set and is skipped with a
warning otherwise.
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.metrics import cohen_kappa_score

import _browser
from eval_jobs.review_report import ReviewReportConfig, main as review_report
from pipelines.poporo_in import PairListsConfig
from relate.data.poporo import plan_class_triplets, read_pair_list

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
TOKENS = {"alice": "alice-review-token-0123456789", "bob": "bob-review-token-9876543210",
          "carol": "carol-review-token-5555555555"}
PAIRS = [("p0", "CR", "microphone", "loudspeaker"), ("p1", "CR", "rifle", "revolver"),
         ("p2", "TR", "microphone", "stage"), ("p3", "TR", "rifle", "holster"),
         ("p4", "CD", "rifle", "tomato"), ("p5", "SD", "microphone", "ice_lolly"),
         ("p6", "CD", "microphone", "strawberry")]
KEY = {"a": ("accept", None), "1": ("reject", "convention"), "2": ("reject", "broad_label"),
       "3": ("reject", "related_distractor")}
WAIT_MS = 30_000


def _require_browser() -> None:
    _browser.require_browser("review page")


def _until(page, server: _browser.PageServer, js: str, arg, what: str) -> None:
    try:
        page.wait_for_function(js, arg=arg, timeout=WAIT_MS)
    except _browser.sync_api.TimeoutError:
        raise AssertionError(f"page never showed {what}: progress {page.locator('#progress-text').text_content()!r}, "
                             f"status {page.locator('#status').text_content()!r}, "
                             f"server log: {server.log.read_text()[-1500:]!r}") from None


def _wait(page, server: _browser.PageServer, reviewed: int, who: str, pair: str | None = None) -> None:
    _until(page, server, "t => document.getElementById('progress-text').textContent === t",
           f"{reviewed} / {len(PAIRS)} reviewed by {who}", f"{reviewed} reviewed by {who}")
    if pair is not None:
        _until(page, server, "id => document.getElementById('pair').dataset.pairId === id", pair, f"pair {pair}")


def _sign_in(page, server: _browser.PageServer, who: str) -> None:
    field = "#token" if server.tokens else "#reviewer"
    page.fill(field, TOKENS[who] if server.tokens else who)
    page.press(field, "Enter")


def _answer(page, server, rec, who: str, key: str, done: int, click: bool = False) -> None:
    """Answer the pair shown by key, or by its button; wait until the server has it."""
    pair = page.locator("#pair").get_attribute("data-pair-id")
    decision, reason = KEY[key]
    rec[who][pair] = (decision, reason)
    if click:
        page.click("#btn-accept" if reason is None else f"#btn-reject-{reason}")
    else:
        page.keyboard.press(key)
    _wait(page, server, done, who)


def _review(page, server: _browser.PageServer, rec: dict) -> None:
    page.goto(f"http://127.0.0.1:{server.port}/")
    _sign_in(page, server, "alice")
    _wait(page, server, 0, "alice", "p0")
    assert "convention" in page.locator("#btn-reject-convention .why").text_content().lower()
    _answer(page, server, rec, "alice", "a", 1, click=True)      # p0
    _answer(page, server, rec, "alice", "1", 2)                  # p1 reject: convention
    _answer(page, server, rec, "alice", "a", 3)                  # p2
    _answer(page, server, rec, "alice", "2", 4, click=True)      # p3 reject ...
    page.keyboard.press("z")                                     # ... undone: p3 comes back
    _wait(page, server, 3, "alice", "p3")
    _answer(page, server, rec, "alice", "a", 4)                  # p3 accept
    server.kill()                                                # the server dies midway ...
    server.start()                                               # ... and comes back on the same files
    page.reload()
    _wait(page, server, 4, "alice", "p4")
    _answer(page, server, rec, "alice", "3", 5, click=True)      # p4 reject: related, not just alike
    _answer(page, server, rec, "alice", "a", 6)                  # p5
    _answer(page, server, rec, "alice", "a", 7)                  # p6
    assert page.locator("#done").is_visible()

    _sign_in(page, server, "bob")                                # the second reviewer, blind to the first
    _wait(page, server, 0, "bob", "p0")
    for n, key in enumerate(["a", "a", "a", "2", "3", "a", "a"], start=1):
        _answer(page, server, rec, "bob", key, n, click=n % 2 == 0)


def _resolve(page, server: _browser.PageServer) -> None:
    """Carol opens the disagreements, sees p1 and p3, accepts p1 and rejects p3 (label too broad)."""
    _sign_in(page, server, "carol")
    _wait(page, server, 0, "carol", "p0")
    page.click("#btn-disagreements")
    _until(page, server, "() => document.getElementById('resolve').dataset.open === '2'", None, "two disagreements")
    assert [li.get_attribute("data-pair-id") for li in page.locator("#disagreements li").all()] == ["p1", "p3"]
    page.click('#disagreements li[data-pair-id="p1"] button[data-decision="accept"]')
    _until(page, server, "() => document.getElementById('resolve').dataset.open === '1'", None, "p1 resolved")
    page.click('#disagreements li[data-pair-id="p3"] button[data-reason="broad_label"]')
    _until(page, server, "() => document.getElementById('resolve').dataset.open === '0'", None, "p3 resolved")
    assert "by carol" in page.locator('#disagreements li[data-pair-id="p3"] .resolution').text_content()


def _stored(db: Path) -> dict[str, dict[str, tuple[str, str | None]]]:
    """Each reviewer's live answers as the database holds them (latest row not undone)."""
    out: dict[str, dict[str, tuple[str, str | None]]] = {}
    rows = sqlite3.connect(db).execute("SELECT reviewer, pair_id, decision, reason FROM answers "
                                       "WHERE undone_at IS NULL ORDER BY id").fetchall()
    for who, pair, decision, reason in rows:
        out.setdefault(who, {})[pair] = (decision, reason)
    return out


def test_a_missing_browser_fails_under_ci_and_skips_loudly_elsewhere(monkeypatch, tmp_path):
    monkeypatch.setattr(_browser, "CHROMIUM", str(tmp_path / "no-chromium"))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI is set .*/no-chromium is missing"):
        _require_browser()
    monkeypatch.setenv("CI", "0")
    with pytest.warns(UserWarning, match="REVIEW PAGE BROWSER TEST NOT RUN"), \
            pytest.raises(pytest.skip.Exception, match="fails instead when CI is set"):
        _require_browser()


@pytest.mark.parametrize("tokens", [True, False], ids=["tokens", "names"])
def test_two_reviewers_in_the_browser(tmp_path, tokens):
    _require_browser()
    proposals = tmp_path / "proposals.parquet"
    pq.write_table(pa.table({"pair_id": [p[0] for p in PAIRS], "cell": [p[1] for p in PAIRS],
                             "class_a": [p[2] for p in PAIRS], "class_b": [p[3] for p in PAIRS],
                             "models": [["gpt-4o", "gemini-1.5"]] * len(PAIRS)}), proposals)
    db = tmp_path / "review.sqlite"
    args = ["--proposals", str(proposals), "--db", str(db)]
    if tokens:
        (tmp_path / "tokens.txt").write_text("".join(f"{who}:{tok}\n" for who, tok in TOKENS.items()))
        args += ["--tokens", str(tmp_path / "tokens.txt")]
    server = _browser.PageServer("serve_apps.review_app", args, _browser.free_port(), tmp_path / "server.log",
                                 TOKENS if tokens else None)
    rec: dict[str, dict[str, tuple[str, str | None]]] = {"alice": {}, "bob": {}}
    server.start()
    try:
        with _browser.sync_api.sync_playwright() as pw:
            ctx = pw.chromium.launch_persistent_context(tempfile.mkdtemp(dir=tmp_path),
                                                        executable_path=_browser.CHROMIUM, headless=True,
                                                        args=_browser.ARGS, viewport={"width": 1000, "height": 700})
            page = ctx.new_page()
            console: list[str] = []
            page.on("console", lambda msg: console.append(msg.text))
            _review(page, server, rec)
            _resolve(page, server)
            page_kappa = page.locator("#kappa").get_attribute("data-kappa")
            assert not [m for m in console if "Content Security Policy" in m], console
            ctx.close()
        report = httpx.get(f"http://127.0.0.1:{server.port}/api/report", headers=server.headers()).json()
    finally:
        server.kill()

    stored = _stored(db)
    assert stored == rec                                          # every click, nothing else
    pairs = [p[0] for p in PAIRS]
    ya, yb = ([stored[w][p][0] for p in pairs] for w in ("alice", "bob"))
    ca, cb = ([stored[w][p][1] or "accept" for p in pairs] for w in ("alice", "bob"))
    g = report["agreement"][0]
    assert g["reviewers"] == ["alice", "bob"] and g["pairs"] == 7
    assert g["decision"]["kappa"] == pytest.approx(cohen_kappa_score(ya, yb))
    assert g["decision"]["kappa"] == pytest.approx(0.3)           # po = 5/7, pe = 29/49
    assert g["category"]["kappa"] == pytest.approx(cohen_kappa_score(ca, cb))
    assert float(page_kappa.strip("[]")) == pytest.approx(0.3)
    assert [d["pair_id"] for d in report["disagreements"]] == ["p1", "p3"]
    assert report["status"] == {"agreed": 5, "resolved": 2, "disagreement": 0, "pending": 0}

    out = review_report(ReviewReportConfig(db=str(db), pairs_out=str(tmp_path / "pairs")))
    assert out["agreement"][0]["decision"]["kappa"] == pytest.approx(cohen_kappa_score(ya, yb))
    cfg = PairListsConfig.model_validate_json((tmp_path / "pairs" / "pairs.json").read_text())
    lists = {c: read_pair_list(getattr(cfg, c)) for c in ("CR", "TR", "CD", "SD")}
    assert lists == {"CR": [("microphone", "loudspeaker"), ("rifle", "revolver")], "TR": [("microphone", "stage")],
                     "CD": [("microphone", "strawberry")], "SD": [("microphone", "ice_lolly")]}
    assert len(plan_class_triplets(lists, 8, seed=0)) == 8
