"""`relate predict` through the real console script: images as cameras and web pages write them
(EXIF-rotated JPEG, CMYK JPEG, 16-bit PNG, RGBA PNG, WebP, greyscale), a truncated JPEG reported
while the others are processed, JSON graphs with the /v1/graph body and a PNG for each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from relate.predict import UsageError, collect_images, read_boxes_file, read_vocabulary

W, H = 96, 64  # stored size of the landscape images
BOXES = [[4, 4, 50, 40], [30, 20, 90, 60], [10, 30, 70, 62]]
SHOWN_BOXES = [[4, 4, 60, 50], [20, 40, 62, 90], [2, 60, 50, 94]]  # in the EXIF-rotated (64 x 96) picture


def _relate() -> str:
    script = Path(sys.executable).parent / "relate"
    assert script.is_file(), f"console script {script} missing: install the project (scripts/venv.sh)"
    return str(script)


def _run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([_relate(), "predict", *args, "--threads", "1"], capture_output=True, text=True,
                          timeout=600, env=env, cwd=cwd)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from serve_apps.tiny import save_tiny_checkpoint

    root = tmp_path_factory.mktemp("predict")
    ck = save_tiny_checkpoint(root / "ck", ["on", "near", "holding", "under"])
    rng = np.random.default_rng(0)
    rgb = (rng.random((H, W, 3)) * 255).astype(np.uint8)
    d = root / "images"
    d.mkdir()
    # EXIF orientation 6: the stored landscape is shown rotated 90 degrees clockwise (64 wide, 96 tall)
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(rgb).save(d / "camera.jpg", exif=exif, quality=95)
    Image.fromarray(rgb).convert("CMYK").save(d / "print.jpg")
    grey16 = (rng.random((H, W)) * 65535).astype(np.uint16)
    Image.fromarray(grey16).save(d / "scan16.png")
    assert Image.open(d / "scan16.png").mode.startswith("I")
    rgba = np.dstack([rgb, (rng.random((H, W)) * 255).astype(np.uint8)])
    Image.fromarray(rgba, "RGBA").save(d / "web.png")
    Image.fromarray(rgb).save(d / "web.webp", lossless=True)
    Image.fromarray(rgb[:, :, 0]).save(d / "grey.jpg")
    (d / "broken.jpg").write_bytes((d / "grey.jpg").read_bytes()[:200])
    (d / "notes.txt").write_text("not an image; a folder run skips it")
    # references decoded by hand, to compare graphs with: the picture as displayed, 16-bit scaled to 8
    ref = root / "ref"
    ref.mkdir()
    Image.open(d / "camera.jpg").transpose(Image.Transpose.ROTATE_270).save(ref / "camera.png")
    Image.fromarray(((grey16.astype(np.int64) + 128) // 257).astype(np.uint8)).convert("RGB").save(ref / "scan16.png")
    Image.fromarray(rgb).save(ref / "web.png")
    boxes = {name: BOXES for name in ("print.jpg", "scan16.png", "web.png", "web.webp", "grey.jpg", "broken.jpg")}
    boxes["camera.jpg"] = [{"x1": b[0], "y1": b[1], "x2": b[2], "y2": b[3], "label": lab}
                           for b, lab in zip(SHOWN_BOXES, ["person", "cup", "table"])]
    (root / "boxes.json").write_text(json.dumps(boxes))
    with open(root / "ref_boxes.csv", "w") as fh:
        fh.write("image,x1,y1,x2,y2,label\n")
        for name, bx in (("camera.png", SHOWN_BOXES), ("scan16.png", BOXES), ("web.png", BOXES)):
            for b in bx:
                fh.write(f"{name},{b[0]},{b[1]},{b[2]},{b[3]},\n")
    return root, ck


@pytest.fixture(scope="module")
def folder_run(world):
    root, ck = world
    res = _run(str(root / "images"), "--checkpoint", str(ck), "--boxes", str(root / "boxes.json"),
               "--vocabulary", "on, next to ,holding", "--out", str(root / "out"))
    return root, ck, res


def test_folder_with_a_truncated_jpeg_processes_the_rest_and_reports_it(folder_run):
    root, _, res = folder_run
    assert res.returncode == 1, res.stderr
    out = root / "out"
    done = sorted(p.name for p in out.glob("*.json"))
    assert done == ["camera.json", "grey.json", "print.json", "scan16.json", "web-2.json", "web.json"], res.stderr
    assert sorted(p.name[:-4] for p in out.glob("*.png")) == sorted(p[:-5] for p in done)
    assert "1 of 7 image(s) failed" in res.stderr
    assert "broken.jpg: image: not a decodable image" in res.stderr
    assert "notes.txt" not in res.stderr


def test_graph_json_is_the_v1_graph_body(folder_run):
    from serve_apps.schemas import GraphResponse

    root, _, _ = folder_run
    body = json.loads((root / "out" / "print.json").read_text())
    assert set(body) == set(GraphResponse.model_fields)
    GraphResponse.model_validate(body)
    assert (body["width"], body["height"], body["vocabulary_size"]) == (W, H, 3)
    assert body["bank"].startswith("request:") and not body["calibrated"]
    preds = {t["predicate"] for t in body["triplets"]}
    assert preds <= {"on", "next to", "holding"} and preds
    assert all(r["score"] == 1.0 and r["label"] == "" for r in body["regions"])
    png = Image.open(root / "out" / "print.png")
    assert png.size[0] >= 720 and png.size[1] >= 480  # a 96 x 64 image is drawn scaled up to 720 x 480


def test_exif_rotation_16_bit_and_alpha_decode_as_displayed(folder_run):
    """Each graph equals the one of a reference PNG decoded by hand: the EXIF-rotated JPEG as shown
    (boxes given in the shown orientation), 16-bit grey scaled to 8 bits, RGBA without its alpha."""
    root, ck, _ = folder_run
    res = _run(str(root / "ref"), "--checkpoint", str(ck), "--boxes", str(root / "ref_boxes.csv"),
               "--vocabulary-file", str(_vocab_file(root)), "--out", str(root / "ref_out"), "--no-png")
    assert res.returncode == 0, res.stderr
    assert not list((root / "ref_out").glob("*.png"))
    for name, ref in (("camera", "camera"), ("scan16", "scan16"), ("web", "web")):
        got = json.loads((root / "out" / f"{name}.json").read_text())
        want = json.loads((root / "ref_out" / f"{ref}.json").read_text())
        assert (got["width"], got["height"]) == (want["width"], want["height"])
        assert [(t["subject"], t["object"], t["predicate"]) for t in got["triplets"]] == \
               [(t["subject"], t["object"], t["predicate"]) for t in want["triplets"]]
        np.testing.assert_allclose([t["score"] for t in got["triplets"]], [t["score"] for t in want["triplets"]],
                                   atol=1e-6)
    camera = json.loads((root / "out" / "camera.json").read_text())
    assert (camera["width"], camera["height"]) == (H, W)
    assert [r["label"] for r in camera["regions"]] == ["person", "cup", "table"]


def _vocab_file(root: Path) -> Path:
    p = root / "vocab.txt"
    p.write_text("# predicates\non\n\nnext to\nholding\n")
    return p


def test_glob_single_file_and_bad_boxes_are_per_file_errors(world, tmp_path):
    root, ck = world
    boxes = {"grey.jpg": [[0, 0, 10, 10], [5, 5, 200, 20]]}  # the second box leaves the 96 x 64 image
    (tmp_path / "b.json").write_text(json.dumps(boxes))
    res = _run(str(root / "images" / "*.jpg"), "--checkpoint", str(ck), "--boxes", str(tmp_path / "b.json"),
               "--out", str(tmp_path / "o"), "--quiet")
    assert res.returncode == 1
    assert "grey.jpg: boxes for" in res.stderr and "[1] = (5, 5, 200, 20)" in res.stderr
    assert "camera.jpg: no boxes for this image" in res.stderr
    assert "4 of 4 image(s) failed" in res.stderr  # grey (bad box), camera, print (no boxes), broken
    missing = _run(str(tmp_path / "nope.jpg"), "--checkpoint", str(ck), "--boxes", str(tmp_path / "b.json"),
                   "--out", str(tmp_path / "o2"))
    assert missing.returncode == 1 and "nope.jpg: cannot read the file" in missing.stderr


def test_command_line_errors_exit_2(world, tmp_path):
    root, ck = world
    res = _run(str(root / "images"), "--checkpoint", str(tmp_path / "no_ck"), "--boxes", str(root / "boxes.json"))
    assert res.returncode == 2 and f"not found at {tmp_path / 'no_ck'};" in res.stderr and "make it with: make demo" in res.stderr
    (tmp_path / "empty_ck").mkdir()
    res = _run(str(root / "images"), "--checkpoint", str(tmp_path / "empty_ck"), "--boxes", str(root / "boxes.json"))
    assert res.returncode == 2 and "not a relation checkpoint" in res.stderr


def test_boxes_files_parse_and_refuse_with_where(tmp_path):
    p = tmp_path / "b.csv"
    p.write_text("image,x1,y1,x2,y2,label\na.jpg,1,2,3,4,dog\na.jpg,5,6,7,8,\nb.png,0,0,1,1,cat\n")
    got = read_boxes_file(p)
    assert got == {"a.jpg": [([1, 2, 3, 4], "dog"), ([5, 6, 7, 8], "")], "b.png": [([0, 0, 1, 1], "cat")]}
    (tmp_path / "bad.csv").write_text("file,x1,y1,x2,y2\n")
    with pytest.raises(UsageError, match="header image,x1,y1,x2,y2"):
        read_boxes_file(tmp_path / "bad.csv")
    (tmp_path / "b.json").write_text(json.dumps({"a.jpg": [[1, 2, 3, 4], {"x1": 1, "y1": 2, "x2": 3}]}))
    with pytest.raises(UsageError, match=r"'a.jpg'\[1\]: box object lacks \['y2'\]"):
        read_boxes_file(tmp_path / "b.json")
    (tmp_path / "c.json").write_text(json.dumps({"a.jpg": [[1, 2, "x", 4]]}))
    with pytest.raises(UsageError, match="must be numbers"):
        read_boxes_file(tmp_path / "c.json")


def test_inputs_vocabulary_and_ambiguous_names(tmp_path):
    from relate.predict import _match_boxes

    for sub in ("x", "y"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "same.png").write_bytes(b"")
    (tmp_path / "x" / "deep").mkdir()
    (tmp_path / "x" / "deep" / "z.webp").write_bytes(b"")
    assert [j.rel.as_posix() for j in collect_images([str(tmp_path / "x")])] == ["same.png"]
    jobs = collect_images([str(tmp_path / "x"), str(tmp_path / "y"), str(tmp_path / "*" / "same.png")],
                          recursive=True)
    assert [j.rel.as_posix() for j in jobs] == ["deep/z.webp", "same.png", "same.png"]  # each file once
    with pytest.raises(UsageError, match="names 2 inputs"):
        _match_boxes({"same.png": []}, jobs)
    assert _match_boxes({"deep/z.webp": [1]}, jobs) == {0: [1]}
    with pytest.raises(UsageError, match="pattern matches no file"):
        collect_images([str(tmp_path / "*.jpeg")])
    assert read_vocabulary(" on, next to ,,", None) == ["on", "next to"]
    with pytest.raises(UsageError, match="repeats"):
        read_vocabulary("on,on", None)


def test_boxes_from_a_named_detector(world, tmp_path):
    """--detector: a local OWLv2 folder (random weights, offline) finds the regions; the JSON lists
    them with their scores and query labels, as /v1/graph does, and the triplets index them."""
    from serve_apps.tiny import save_tiny_owlv2

    root, ck = world
    det = save_tiny_owlv2(tmp_path / "owl")
    res = _run(str(root / "images" / "web.webp"), "--checkpoint", str(ck), "--detector", str(det),
               "--queries", "person,cup", "--detector-threshold", "0", "--max-boxes", "4",
               "--out", str(tmp_path / "o"), "--no-png")
    assert res.returncode == 0, res.stderr[-2000:]
    body = json.loads((tmp_path / "o" / "web.json").read_text())
    regions = body["regions"]
    assert 2 <= len(regions) <= 4
    assert {r["label"] for r in regions} <= {"person", "cup"}
    assert all(0 <= r["x1"] < r["x2"] <= W and 0 <= r["y1"] < r["y2"] <= H for r in regions)
    assert [r["score"] for r in regions] == sorted((r["score"] for r in regions), reverse=True)
    assert body["triplets"] and all(max(t["subject"], t["object"]) < len(regions) for t in body["triplets"])
    assert body["bank"] == "default" and body["vocabulary_size"] == 4
