"""The "try it" page (/ui/relate.html) in a real browser against a real Serve app: sign in with
the token, upload an image, draw two boxes, type three predicates, and read the ranked triplets;
then move and delete a box, detect boxes, and download the JSON and the PNG.

What the page shows is checked against the API itself: the downloaded JSON's boxes are posted to
/v1/relations with httpx and must give the same triplets the table lists, and the boxes must be
where the mouse drew them. Needs Debian's Chromium and playwright (tests/_browser.py: a failure
under CI when missing, a loud skip elsewhere).
"""

from __future__ import annotations

import base64
import io
import json
import tempfile

import httpx
import numpy as np
import pytest
from PIL import Image

import _browser
from _serve_helpers import AUTH, SERVE_TOKEN, tiny_app

pytestmark = pytest.mark.slow
APP = "relate_page"
VOCAB = ["left of", "holding", "on top of", "near", "behind"]
TYPED = ["beside", "under", "carrying"]


@pytest.fixture(scope="module")
def served(ray_session, tmp_path_factory):
    with tiny_app(tmp_path_factory.mktemp("page"), APP, VOCAB, max_boxes=3) as url:
        yield url


def _photo(path) -> tuple[int, int]:
    """A 320 x 200 picture with two coloured blocks on a gradient (a PNG, as a camera app saves)."""
    h, w = 200, 320
    img = np.zeros((h, w, 3), np.uint8)
    img[..., 0] = np.linspace(40, 200, w, dtype=np.uint8)[None, :]
    img[..., 2] = np.linspace(200, 40, h, dtype=np.uint8)[:, None]
    img[40:140, 30:130] = (230, 160, 20)
    img[90:180, 190:300] = (20, 120, 220)
    Image.fromarray(img).save(path)
    return w, h


def _rows(page) -> list[list[str]]:
    return page.eval_on_selector_all("#triplets tbody tr",
                                     "rows => rows.map(r => Array.from(r.cells).map(c => c.textContent))")


def _until(page, js: str, timeout: int = 120_000) -> None:
    """Wait for ``js`` (a function: the page's CSP forbids evaluating strings) to hold; on a
    timeout fail with what the page's status line said."""
    try:
        page.wait_for_function(js, timeout=timeout)
    except _browser.sync_api.TimeoutError:
        raise AssertionError(f"page never reached {js!r}: status {page.text_content('#status')!r}") from None


def _drag(page, box, a, b) -> None:
    """Mouse from a to b, given as fractions of the canvas's displayed size."""
    page.mouse.move(box["x"] + a[0] * box["width"], box["y"] + a[1] * box["height"])
    page.mouse.down()
    page.mouse.move(box["x"] + (a[0] + b[0]) / 2 * box["width"], box["y"] + (a[1] + b[1]) / 2 * box["height"])
    page.mouse.move(box["x"] + b[0] * box["width"], box["y"] + b[1] * box["height"])
    page.mouse.up()


def test_static_files_are_open_and_guarded_by_a_csp(served):
    for name, kind in (("relate.html", "text/html"), ("relate.js", "text/javascript"), ("relate.css", "text/css")):
        r = httpx.get(f"{served}/ui/{name}", timeout=30)  # no token: the files carry no data
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind), (name, r.status_code)
        assert "script-src 'self'" in r.headers["content-security-policy"]
        assert r.headers["x-content-type-options"] == "nosniff"
    assert httpx.post(f"{served}/ui/relate.html", timeout=30).status_code == 401
    assert httpx.get(f"{served}/v1/relations", timeout=30).status_code == 401  # the API still needs the token


def test_the_page_scores_drawn_boxes_against_typed_predicates(served, tmp_path):
    _browser.require_browser("relate page")
    photo = tmp_path / "my photo.png"
    W, H = _photo(photo)
    with _browser.sync_api.sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(tempfile.mkdtemp(dir=tmp_path), executable_path=_browser.CHROMIUM,
                                                    headless=True, args=_browser.ARGS, accept_downloads=True,
                                                    viewport={"width": 1200, "height": 900})
        page = ctx.new_page()
        problems = []
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto(f"{served}/ui/relate.html")

        # no token yet: the first call is refused and the page says how to fix it
        page.set_input_files("#file", str(photo))
        page.wait_for_selector("#canvas:not([hidden])")
        canvas = page.locator("#canvas").bounding_box()
        _drag(page, canvas, (0.10, 0.20), (0.40, 0.70))
        _drag(page, canvas, (0.60, 0.45), (0.93, 0.90))
        _until(page, "() => document.getElementById('status').textContent.includes('401')", timeout=60_000)
        assert "enter the API token" in page.text_content("#status")

        page.fill("#vocabulary", "\n".join(TYPED))
        page.fill("#token", SERVE_TOKEN)
        page.click("#auth button")
        assert page.text_content("#box-count") == "2 boxes"
        _until(page, "() => document.querySelectorAll('#triplets tbody tr').length > 0", timeout=120_000)
        rows = _rows(page)
        # 2 ordered pairs x 3 predicates = 6 triplets, within top 10; each names a typed predicate
        assert len(rows) == 6, rows
        assert {r[2] for r in rows} == set(TYPED)
        assert {(r[1], r[3]) for r in rows} == {("1", "2"), ("2", "1")}
        scores = [float(r[4]) for r in rows]
        assert scores == sorted(scores, reverse=True)

        with page.expect_download() as dl:
            page.click("#download-json")
        graph = json.loads(open(dl.value.path()).read())
        assert dl.value.suggested_filename == "my photo.graph.json"
        boxes = graph["boxes"]
        # the boxes are where the mouse drew them, in image pixels (within a pixel of rounding)
        want = [(0.10, 0.20, 0.40, 0.70), (0.60, 0.45, 0.93, 0.90)]
        for b, (x1, y1, x2, y2) in zip(boxes, want):
            assert b["x1"] == pytest.approx(x1 * W, abs=1.5) and b["y1"] == pytest.approx(y1 * H, abs=1.5)
            assert b["x2"] == pytest.approx(x2 * W, abs=1.5) and b["y2"] == pytest.approx(y2 * H, abs=1.5)
        # what the table lists is what the API answers for those boxes and predicates
        direct = httpx.post(f"{served}/v1/relations", headers=AUTH, timeout=120, json={
            "image": base64.b64encode(photo.read_bytes()).decode(), "boxes": boxes,
            "vocabulary": TYPED, "topk": 10}).json()
        assert [(t["subject"] + 1, t["predicate"], t["object"] + 1) for t in direct["triplets"]] == \
            [(int(r[1]), r[2], int(r[3])) for r in rows]
        assert [round(t["score"], 3) for t in direct["triplets"]] == pytest.approx(scores, abs=1e-3)

        with page.expect_download() as dl:
            page.click("#download-png")
        png = Image.open(io.BytesIO(open(dl.value.path(), "rb").read()))
        assert png.format == "PNG" and png.width >= W

        # move box 2 left by a tenth of the width: the boxes change and the triplets are rescored
        _drag(page, canvas, (0.75, 0.70), (0.65, 0.70))
        _until(page, "() => document.querySelectorAll('#triplets tbody tr').length === 6", timeout=120_000)
        with page.expect_download() as dl:
            page.click("#download-json")
        moved = json.loads(open(dl.value.path()).read())["boxes"][1]
        assert moved["x1"] == pytest.approx(boxes[1]["x1"] - 0.10 * W, abs=1.5)
        assert moved["y1"] == pytest.approx(boxes[1]["y1"], abs=1e-6)

        # select box 1 and delete it: one box left, no triplets
        page.mouse.click(canvas["x"] + 0.2 * canvas["width"], canvas["y"] + 0.4 * canvas["height"])
        page.keyboard.press("Delete")
        assert page.text_content("#box-count") == "1 box"
        assert _rows(page) == []

        # the detector replaces the boxes and the graph it answers is listed
        page.click("#detect")
        _until(page, "() => document.getElementById('status').textContent.includes('detected')",
                               timeout=120_000)
        detected = httpx.post(f"{served}/v1/graph", headers=AUTH, timeout=120, json={
            "image": base64.b64encode(photo.read_bytes()).decode(), "vocabulary": TYPED,
            "topk": 10}).json()
        assert page.text_content("#box-count").startswith(f"{len(detected['regions'])} box")
        assert len(_rows(page)) == len(detected["triplets"])
        page.screenshot(path=str(tmp_path / "page.png"))
        ctx.close()
    refused = [m for m in problems if "status of 401" in m]  # the calls made before the token was given
    assert refused and not [m for m in problems if m not in refused], problems  # no script error, no CSP block
