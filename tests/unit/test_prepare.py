"""eval_jobs.prepare on tiny native-layout copies of the six benchmarks: the layout text, a check that
names every missing or malformed file, the hash manifest and its verification, the leakage
exclusion list, and a benchmark entry that eval_jobs.ovsgg reads back to the same images."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import h5py
import pyarrow.parquet as pq
import pytest
import yaml

from eval_jobs.prepare import PrepareConfig, PrepareError, main, parse_args
from relate.data.export import EXPORTERS, synthesize_negatives
from relate.schema import CORPUS_SCHEMA, to_table

NAMES = ["vg150", "indoorvg", "psg", "haystack", "hico_det", "spatialsense"]


def _corpus(n=3):
    rows = []
    for i in range(n):
        boxes = [{"x1": 2.0 + 40 * k, "y1": 5.0, "x2": 30.0 + 40 * k, "y2": 60.0, "category": c, "is_person": False,
                  "is_body_part": False} for k, c in enumerate(["person", "cup", "table"])]
        rels = [{"subject": 0, "object": 1, "predicate": "holding", "pass": "human", "gate": "kept", "score": None},
                {"subject": 1, "object": 2, "predicate": "on", "pass": "human", "gate": "kept", "score": None}]
        rows.append({"image_id": f"{i + 7:06d}", "uri": "u", "width": 160, "height": 90, "source": "synthetic",
                     "split": "test", "boxes": boxes, "relations": rels})
    return to_table(rows, CORPUS_SCHEMA)


def _export(tmp_path, name, corpus=None):
    corpus = corpus if corpus is not None else _corpus()
    kw = {"cells": synthesize_negatives(corpus, seed=0)} if name in ("haystack", "hico_det", "spatialsense") else {}
    return EXPORTERS[name](corpus, tmp_path / "data" / name, **kw)


def _cfg(tmp_path, name, **kw):
    return PrepareConfig(benchmark=name, root=str(tmp_path / "data" / name), out_dir=str(tmp_path / "out"), **kw)


@pytest.mark.parametrize("name", NAMES)
def test_prepare_writes_a_split_ovsgg_reads_back(tmp_path, name, capsys):
    from eval_jobs.ovsgg import BenchmarkSpec
    from eval_jobs.ovsgg_cells import load_benchmark

    root = _export(tmp_path, name)
    res = main(_cfg(tmp_path, name))
    printed = capsys.readouterr().out
    assert "expected layout:" in printed and str(root) in printed and "sha256" in printed
    out = tmp_path / "out" / name / "test"
    assert res.out_dir == out
    corpus = pq.read_table(out / "corpus.parquet")
    assert sorted(corpus.column("image_id").to_pylist()) == ["000007", "000008", "000009"]
    ns = {"vg150": "vg", "indoorvg": "vg", "psg": "coco", "haystack": "coco", "hico_det": "hico",
          "spatialsense": "spatialsense"}[name]  # whose ids these are: VG, COCO, HICO-DET, SpatialSense
    assert (out / "eval_ids.txt").read_text().split() == [f"{ns}:{d}" for d in "789"]  # leakage-normalised ids
    assert (out / "cells.parquet").is_file() == (name in ("haystack", "spatialsense"))
    m = json.loads((out / "manifest.json").read_text())
    assert m["files"] and m["counts"]["images"] == 3 and m["counts"]["relations"] == 6
    for rel, h in m["files"].items():  # the recorded hashes are the files' real ones
        data = (root / rel).read_bytes()
        assert h == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        assert m["checksums"][rel] == "recorded only"
    entry = yaml.safe_load((out / "benchmark.yaml").read_text())["benchmarks"][0]
    spec = BenchmarkSpec.model_validate(entry)
    assert spec.reader == name and spec.path == str(root.resolve())
    assert sorted(load_benchmark(spec).corpus.column("image_id").to_pylist()) == sorted(corpus.column("image_id").to_pylist())


def test_validation_names_every_missing_and_malformed_file(tmp_path):
    root = _export(tmp_path, "vg150")
    (root / "VG-SGG-dicts-with-attri.json").unlink()
    (root / "image_data.json").write_text("[{\"image_id\": 1,")
    with h5py.File(root / "VG-SGG-with-attri.h5", "a") as f:
        del f["predicates"]
    with pytest.raises(PrepareError) as e:
        main(_cfg(tmp_path, "vg150"))
    msg = str(e.value)
    for what in ("VG-SGG-dicts-with-attri.json: missing", "image_data.json: not valid JSON",
                 "VG-SGG-with-attri.h5: lacks dataset(s) ['predicates']"):
        assert what in msg
    assert len(json.loads((tmp_path / "out/vg150/test/validation.json").read_text())["problems"]) == 3
    assert not (tmp_path / "out/vg150/test/corpus.parquet").exists()


def test_validation_names_every_malformed_entry(tmp_path):
    root = _export(tmp_path, "psg")
    doc = json.loads((root / "psg.json").read_text())
    doc["data"][0]["relations"].append([0, 9, 0])          # object beyond its annotations
    doc["data"][2]["relations"].append([0, 1, 99])         # predicate beyond the list
    del doc["data"][1]["width"]
    (root / "psg.json").write_text(json.dumps(doc))
    with pytest.raises(PrepareError, match="3 problem") as e:
        main(_cfg(tmp_path, "psg"))
    msg = str(e.value)
    assert "image_id='000007'): relations triple [0, 9, 0]" in msg and "[0, 1, 99]" in msg
    assert "data[1] lacks ['width']" in msg


def test_hico_and_spatialsense_checks_name_their_files(tmp_path):
    hico = _export(tmp_path, "hico_det")
    (hico / "hico_list_vb.txt").write_text("nothing here\n")
    (hico / "coco_categories.json").unlink()
    with pytest.raises(PrepareError) as e:
        main(_cfg(tmp_path, "hico_det"))
    assert "hico_list_vb.txt: no '<id> <name>' lines" in str(e.value) and "coco_categories.json: missing" in str(e.value)
    ss = _export(tmp_path, "spatialsense")
    doc = json.loads((ss / "annotations.json").read_text())
    doc[0]["annotations"][0]["subject"]["bbox"] = [1, 2]
    (ss / "annotations.json").write_text(json.dumps(doc))
    with pytest.raises(PrepareError, match=r"annotations.json: entry 0 \(https://.*\): relation"):
        main(_cfg(tmp_path, "spatialsense"))


def test_expected_manifest_is_verified(tmp_path, monkeypatch):
    import eval_jobs.prepare as prep

    root = _export(tmp_path, "spatialsense")
    first = main(_cfg(tmp_path, "spatialsense")).out_dir / "manifest.json"
    kept = tmp_path / "manifest.json"
    kept.write_text(first.read_text())
    assert main(_cfg(tmp_path, "spatialsense", expect=str(kept))).manifest["checksums"] == {
        "annotations.json": "expected manifest"}
    doc = json.loads((root / "annotations.json").read_text())
    doc[0]["annotations"][0]["label"] = not doc[0]["annotations"][0]["label"]
    (root / "annotations.json").write_text(json.dumps(doc))
    with pytest.raises(PrepareError, match=r"annotations.json: \d+ bytes sha256 .* differs from the expected"):
        main(_cfg(tmp_path, "spatialsense", expect=str(kept)))
    assert prep.KNOWN_CHECKSUMS == {}  # nothing published to pin; see the module docstring
    monkeypatch.setitem(prep.KNOWN_CHECKSUMS, "spatialsense", {"annotations.json": (1, "0" * 64)})
    with pytest.raises(PrepareError, match="differs from the expected 1 bytes"):
        main(_cfg(tmp_path, "spatialsense"))


def test_leakage_exclusion_list_is_applied_and_travels_with_the_entry(tmp_path):
    from eval_jobs.ovsgg import BenchmarkSpec
    from eval_jobs.ovsgg_cells import load_benchmark

    _export(tmp_path, "haystack")
    # Haystack numbers COCO images; vg:7 has the digits of a kept image but is another dataset's image
    (tmp_path / "excluded_ids.csv").write_text("image_id,reason\ncoco:8,id_map:vg_coco.csv:vg:8\nvg:7,same_id\n")
    (tmp_path / "more.txt").write_text("# by hand\ncoco:0000009\n")  # padded spelling
    res = main(_cfg(tmp_path, "haystack", exclude=[str(tmp_path / "excluded_ids.csv"), str(tmp_path / "more.txt")]))
    out = res.out_dir
    assert (out / "excluded_ids.txt").read_text().split() == ["000008", "000009"]
    assert pq.read_table(out / "corpus.parquet").column("image_id").to_pylist() == ["000007"]
    assert pq.read_table(out / "cells.parquet").column("image_id").to_pylist() == ["000007"]
    assert (out / "eval_ids.txt").read_text().split() == ["coco:7"]
    assert res.manifest["excluded"] == 2
    spec = BenchmarkSpec.model_validate(yaml.safe_load((out / "benchmark.yaml").read_text())["benchmarks"][0])
    assert spec.reader_options["exclude"] == str((out / "exclusion_list.txt").resolve())
    assert load_benchmark(spec).corpus.column("image_id").to_pylist() == ["000007"]  # the evaluation job's read
    # a list from before namespaces is refused before anything is read
    (tmp_path / "old.txt").write_text("0000009\n")
    with pytest.raises(ValueError, match="old.txt line 1: image id '0000009' names no dataset"):
        main(_cfg(tmp_path, "haystack", exclude=[str(tmp_path / "old.txt")]))


def test_vg_pixels_in_sgb_folder_name_are_found(tmp_path):
    root = _export(tmp_path, "vg150")
    (root / "images").rename(root / "VG_100K")  # Scene-Graph-Benchmark's folder name
    res = main(_cfg(tmp_path, "vg150"))
    assert res.manifest["reader_options"] == {"image_dir": "VG_100K"} and res.manifest["missing_images"] == 0
    assert yaml.safe_load((res.out_dir / "benchmark.yaml").read_text())["benchmarks"][0]["reader_options"] == \
        {"image_dir": "VG_100K"}


def test_missing_images_are_all_named(tmp_path):
    root = _export(tmp_path, "vg150")
    for i in ("000007", "000009"):
        (root / "images" / f"{i}.jpg").unlink()
    with pytest.raises(PrepareError, match=r"images \(2 of 3\)") as e:
        main(_cfg(tmp_path, "vg150"))
    assert "000007.jpg: image missing" in str(e.value) and "000009.jpg: image missing" in str(e.value)
    res = main(_cfg(tmp_path, "vg150", require_images=False))
    assert res.manifest["missing_images"] == 2
    assert len((res.out_dir / "missing_images.txt").read_text().split()) == 2


def test_reader_notes_reach_the_manifest(tmp_path):
    root = _export(tmp_path, "haystack")
    doc = json.loads((root / "haystack.json").read_text())
    doc["data"][0]["neg_relations"].append([0, 1, -1])
    (root / "haystack.json").write_text(json.dumps(doc))
    m = main(_cfg(tmp_path, "haystack")).manifest
    assert m["notes"] == {"neg_relations with predicate -1 skipped (unusable, as Haystack's scorer)": 1}


def test_empty_split_is_reported_not_prepared(tmp_path):
    _export(tmp_path, "psg")
    with pytest.raises(PrepareError, match=r"(?s)reading: .*split 'train' of .* yields no images"):
        main(_cfg(tmp_path, "psg", split="train"))


def test_command_line(tmp_path):
    _export(tmp_path, "psg")
    cfg, text = parse_args(["psg", "--root", str(tmp_path / "data" / "psg"), "--describe"])
    assert cfg is None and "psg.json" in text and "OpenPSG" in text
    cfg, _ = parse_args(["vg150", "--root", "/d", "--exclude", "a.csv", "--set", "reader_options.image_dir=VG_100K"])
    assert cfg.exclude == ["a.csv"] and cfg.reader_options == {"image_dir": "VG_100K"} and cfg.split == "test"
    run = subprocess.run([sys.executable, "-m", "eval_jobs.prepare", "psg", "--root", str(tmp_path / "data" / "psg"),
                          "--out", str(tmp_path / "cli")], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "cli" / "psg" / "test" / "benchmark.yaml").is_file()
    bad = subprocess.run([sys.executable, "-m", "eval_jobs.prepare", "psg", "--root", str(tmp_path / "nowhere")],
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    assert bad.returncode == 1 and "nowhere: not a folder" in bad.stderr


@pytest.mark.parametrize("name", NAMES)
def test_describe_says_where_the_data_comes_from(name):
    _, text = parse_args([name, "--root", "/data/x", "--describe"])
    assert text.startswith(f"{name}: ") and "expected layout:\n/data/x/\n" in text
