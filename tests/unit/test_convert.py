"""eval_jobs.convert on small files in each system's own saved layout, scored by hand.

SGB: ``torch.save`` of ``{"groundtruths", "predictions"}`` whose predictions are BoxList objects
pickled under maskrcnn_benchmark's module path (a stand-in class registered there only while
saving, so loading sees exactly what SGB's files hold). OpenPSG: a submission folder with
relation.json and a panoptic PNG. VLM: JSON lines with free-text predicates and the real MiniLM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq
import pytest

from _sgb_files import SGB_MODULES, boxlist_module as _boxlist_module, random_boxlists as _random_boxlists
from eval_jobs.convert import ConvertConfig, main, parse_args
from relate.schema import CORPUS_SCHEMA, SchemaError, scene_graph_predicates, to_table


def _box(x1, y1, x2, y2, cat):
    return {"x1": x1, "y1": y1, "x2": x2, "y2": y2, "category": cat, "is_person": False, "is_body_part": False}


def _rel(s, o, p):
    return {"subject": s, "object": o, "predicate": p, "pass": "human", "gate": "kept", "score": None}


def _corpus(path, images):
    rows = [{"image_id": i, "uri": f"mem://{i}", "width": 100, "height": 100, "source": "t", "split": "test",
             "boxes": b, "relations": r} for i, b, r in images]
    pq.write_table(to_table(rows, CORPUS_SCHEMA), path)
    return str(path)


MAN_HORSE = [_box(0, 0, 9, 9, "man"), _box(20, 20, 29, 29, "horse")]


# ------------------------------------------------------------------ sgb

def _sgb_file(tmp_path, monkeypatch):
    import torch

    BoxList = _boxlist_module(monkeypatch)
    a = BoxList([[0, 0, 9, 9], [20, 20, 29, 29]], (100, 100))
    a.add_field("pred_labels", torch.tensor([1, 2]))
    a.add_field("pred_scores", torch.tensor([.9, .8]))
    a.add_field("rel_pair_idxs", torch.tensor([[1, 0], [0, 1]]))
    # columns: background, on, near
    a.add_field("pred_rel_scores", torch.tensor([[.1, .2, .7], [.3, .6, .1]]))
    a.add_field("pred_rel_labels", torch.tensor([2, 1]))
    b = BoxList([[0, 0, 10, 10], [20, 20, 10, 10]], (100, 100), mode="xywh")  # SGB's xywh: x2 = x + w - 1
    b.add_field("pred_labels", torch.tensor([1, 2]))
    b.add_field("pred_scores", torch.tensor([1.0, 1.0]))
    b.add_field("rel_pair_idxs", torch.tensor([[0, 1]]))
    b.add_field("pred_rel_scores", torch.tensor([[0, .2, .8]]))
    b.add_field("pred_rel_labels", torch.tensor([2]))
    path = tmp_path / "eval_results.pytorch"
    torch.save({"groundtruths": [], "predictions": [a, b]}, path)
    for name in SGB_MODULES:
        monkeypatch.delitem(sys.modules, name)  # loading must not need SGB's code
    dicts = tmp_path / "dicts.json"
    dicts.write_text(json.dumps({"idx_to_label": {"1": "man", "2": "horse"}, "idx_to_predicate": {"1": "on", "2": "near"}}))
    return str(path), str(dicts)


def test_sgb_eval_results_convert_and_score_in_one_command(tmp_path, monkeypatch):
    # A: (1,0) best "near" .7 x .8 x .9 = .504 ranks above (0,1) "on" .6 x .9 x .8 = .432; GT man on
    # horse -> R@1 = 0, R@2 = 1. B (xywh boxes = the GT boxes): (0,1) "near" .8, GT near -> R@1 = 1.
    # sgb R@1 = (0 + 1) / 2, R@2 = 1. Keeping the background column in place of the last one would
    # make (0,1) say "near" in A (R@2 = 1/2); reading xywh as xyxy would invert B's boxes.
    src, dicts = _sgb_file(tmp_path, monkeypatch)
    corpus = _corpus(tmp_path / "c.parquet", [("A", MAN_HORSE, [_rel(0, 1, "on")]),
                                              ("B", MAN_HORSE, [_rel(0, 1, "near")])])
    out = str(tmp_path / "sg.parquet")
    cfg = parse_args(["--from", "sgb", "--input", src, "--dicts", dicts, "--benchmark-reader", "parquet",
                      "--benchmark-path", corpus, "--out", out, "--score", "--ks", "1,2"])
    res = main(cfg)
    assert (res["images"], res["objects"], res["pairs"]) == (2, 4, 3)
    gc = res["scores"]["graph_constrained"]
    assert (gc["R@1"], gc["R@2"]) == (0.5, 1.0)
    t = pq.read_table(out)
    assert scene_graph_predicates(t.schema) == ["on", "near"]
    assert np.allclose(t.column("pair_scores").to_pylist()[0], [[.2, .7], [.6, .1]])
    assert [o["x2"] for o in t.column("objects").to_pylist()[1]] == [9.0, 29.0]


def test_sgb_image_order_must_align_and_strangers_are_refused(tmp_path, monkeypatch):
    import torch

    src, dicts = _sgb_file(tmp_path, monkeypatch)
    ids = tmp_path / "ids.txt"
    ids.write_text("A\n")
    with pytest.raises(SchemaError, match="2 images but the image order has 1"):
        main(ConvertConfig(source_format="sgb", input=src, dicts=dicts, image_ids=str(ids), out=str(tmp_path / "o.parquet")))
    ids.write_text('["A", "B"]')
    assert main(ConvertConfig(source_format="sgb", input=src, dicts=dicts, image_ids=str(ids),
                              out=str(tmp_path / "o.parquet")))["images"] == 2
    bad = tmp_path / "bad.pytorch"
    torch.save({"predictions": [types.SimpleNamespace(x=1)]}, bad)
    with pytest.raises(SchemaError, match="refusing to load it.*types.SimpleNamespace"):
        main(ConvertConfig(source_format="sgb", input=str(bad), dicts=dicts, image_ids=str(ids),
                           out=str(tmp_path / "o.parquet")))
    with pytest.raises(ValueError, match="needs --dicts"):
        ConvertConfig(source_format="sgb", input=src, image_ids=str(ids), out="o.parquet")
    with pytest.raises(SystemExit):  # the CLI names the missing field and exits 2
        parse_args(["--from", "sgb", "--input", src])


def test_sgb_on_a_native_vg150_folder_in_one_command(tmp_path, monkeypatch):
    # A VG150 folder in SGB's own layout (h5 + dicts + image_data, relate.data.export), two test
    # images; the SGB output lists them in the h5's order: "on" for T1 (GT on), "near" for T2 (GT
    # near) -> R@1 = 1; read in the wrong order both would miss (0). Labels and predicates are the
    # dicts' 1-based indices, each pair's scores column 0 the background.
    import torch

    from relate.data.export import write_vg150

    boxes = [_box(8, 8, 48, 48, "man"), _box(100, 100, 140, 160, "horse")]
    rows = [{"image_id": i, "uri": f"mem://{i}", "width": 256, "height": 256, "source": "t", "split": sp,
             "boxes": boxes, "relations": [_rel(0, 1, p)]} for i, sp, p in
            (("T0", "train", "near"), ("T1", "test", "on"), ("T2", "test", "near"))]
    root = write_vg150(to_table(rows, CORPUS_SCHEMA), tmp_path / "vg150")
    dicts = json.loads((root / "VG-SGG-dicts-with-attri.json").read_text())
    lab, pred = dicts["label_to_idx"], dicts["predicate_to_idx"]
    BoxList = _boxlist_module(monkeypatch)
    out = []
    for p in ("on", "near"):
        b = BoxList([[8, 8, 48, 48], [100, 100, 140, 160]], (256, 256))
        b.add_field("pred_labels", torch.tensor([lab["man"], lab["horse"]]))
        b.add_field("pred_scores", torch.tensor([1.0, 1.0]))
        b.add_field("rel_pair_idxs", torch.tensor([[0, 1]]))
        scores = torch.zeros(1, len(pred) + 1)
        scores[0, pred[p]] = .9
        b.add_field("pred_rel_scores", scores)
        out.append(b)
    torch.save({"groundtruths": [], "predictions": out}, tmp_path / "eval_results.pytorch")
    for name in SGB_MODULES:
        monkeypatch.delitem(sys.modules, name)
    res = main(parse_args(["--from", "sgb", "--input", str(tmp_path / "eval_results.pytorch"),
                           "--dicts", str(root / "VG-SGG-dicts-with-attri.json"), "--benchmark-reader", "vg150",
                           "--benchmark-path", str(root), "--out", str(tmp_path / "sg.parquet"), "--score", "--ks", "1"]))
    assert res["images"] == 2
    assert res["scores"]["graph_constrained"]["R@1"] == 1.0
    # read under --protocol sgb (the default): the rows SGB's loader keeps are the rows scored
    assert res["scores"]["gt_rows"]["equal"] and res["scores"]["object_labels"] == "scored"
    assert pq.read_table(tmp_path / "sg.parquet").column("image_id").to_pylist() == ["T1", "T2"]


def test_sgb_shard_folder_scores_as_one_file_with_per_image_rows(tmp_path, monkeypatch):
    # The same 5 images saved as SGB does (one eval_results.pytorch) and as a folder of shards in
    # each accepted shape: a bare list, a single BoxList (a per-image file), an eval_results dict;
    # name order with digits as numbers puts part_2 before part_10. Converted and scored streaming,
    # both give the same file, totals and per-image rows, equal to scoring the file whole.
    import torch

    BoxList = _boxlist_module(monkeypatch)
    boxes = _random_boxlists(BoxList, 5, 0)
    torch.save({"groundtruths": [], "predictions": boxes}, tmp_path / "eval_results.pytorch")
    shards = tmp_path / "shards"
    shards.mkdir()
    torch.save(boxes[:2], shards / "part_1.pytorch")
    torch.save(boxes[2], shards / "part_2.pth")
    torch.save({"predictions": boxes[3:]}, shards / "part_10.pytorch")
    (shards / "README.txt").write_text("not a shard")
    for name in SGB_MODULES:
        monkeypatch.delitem(sys.modules, name)
    dicts = tmp_path / "dicts.json"
    dicts.write_text(json.dumps({"idx_to_label": {"1": "man", "2": "horse"}, "idx_to_predicate": {"1": "on", "2": "near"}}))
    rels = [[_rel(0, 1, "on"), _rel(1, 0, "near")], [_rel(0, 1, "near")], [], [_rel(1, 0, "on")] * 2, [_rel(0, 1, "on")]]
    corpus = _corpus(tmp_path / "c.parquet", [(f"I{i}", MAN_HORSE, r) for i, r in enumerate(rels)])
    res = {}
    for name, src in (("one", tmp_path / "eval_results.pytorch"), ("shards", shards)):
        res[name] = main(ConvertConfig(source_format="sgb", input=str(src), dicts=str(dicts), benchmark_reader="parquet",
                                       benchmark_path=corpus, out=str(tmp_path / f"{name}.parquet"), score=True,
                                       ks=[1, 5, 20], chunk_scores=30))  # row groups of 1-3 images
    # --only-score: ranked where each file is read (the one file in this process; the shards by two
    # forked readers, in a fresh `python -m eval_jobs.convert`, since a process that Ray's tests
    # connected earlier in the session reads in-process), credited here, nothing converted
    # written: the same totals and rows
    only = tmp_path / "only_one" / "sg.parquet"
    res["only_one"] = main(ConvertConfig(source_format="sgb", input=str(tmp_path / "eval_results.pytorch"),
                                         dicts=str(dicts), benchmark_reader="parquet", benchmark_path=corpus,
                                         out=str(only), score=True, ks=[1, 5, 20], chunk_scores=30, only_score=True))
    root = Path(__file__).resolve().parents[2]
    cli = subprocess.run([sys.executable, "-m", "eval_jobs.convert", "--from", "sgb", "--input", str(shards), "--dicts",
                          str(dicts), "--benchmark-reader", "parquet", "--benchmark-path", corpus, "--out",
                          str(tmp_path / "only_shards" / "sg.parquet"), "--score", "--ks", "1,5,20", "--chunk-scores",
                          "30", "--only-score", "--read-workers", "2"], cwd=root, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(root)}, timeout=300)
    assert cli.returncode == 0, cli.stderr[-2000:]
    res["only_shards"] = json.loads(cli.stdout)
    for name in ("only_one", "only_shards"):
        assert not (tmp_path / name / "sg.parquet").exists() and res[name]["images"] == 5
        for mode in ("graph_constrained", "unconstrained"):  # through JSON both, so NaN compares as text
            assert json.dumps(res[name]["scores"][mode], sort_keys=True) == \
                json.dumps(res["one"]["scores"][mode], sort_keys=True)
        assert pq.read_table(res[name]["scores"]["per_image"]).drop(["system"]).equals(
            pq.read_table(res["one"]["scores"]["per_image"]).drop(["system"]))
    assert (res["only_one"]["read_workers"], res["only_shards"]["read_workers"]) == (1, 2)
    one, shard = res["one"], res["shards"]
    assert pq.read_table(one["out"]).equals(pq.read_table(shard["out"]))
    assert pq.ParquetFile(one["out"]).num_row_groups >= 2
    assert one["scores"]["graph_constrained"] == shard["scores"]["graph_constrained"]
    assert one["scores"]["unconstrained"] == shard["scores"]["unconstrained"]
    rows_one, rows_shard = pq.read_table(one["scores"]["per_image"]), pq.read_table(shard["scores"]["per_image"])
    assert rows_one.drop(["system"]).equals(rows_shard.drop(["system"]))
    from eval_jobs.ovsgg_cells import load_benchmark
    from eval_jobs.ovsgg_config import BenchmarkSpec
    from relate.metrics import evaluate_scene_graphs, load_ground_truth, load_scene_graphs

    bench = load_benchmark(BenchmarkSpec(name="c", axis="A1", reader="parquet", path=corpus, split="test"), "sgb")
    gt = load_ground_truth(bench.corpus)
    whole = evaluate_scene_graphs(gt, load_scene_graphs(one["out"], gt), ks=[1, 5, 20], graph_constrained=False,
                                  protocol="sgb", predicates=list(bench.predicates), per_image=True)
    assert {k: v for k, v in whole.metrics.items() if k.split("@")[0] in ("R", "mR") or "@" not in k} == \
        one["scores"]["unconstrained"]
    nogc = rows_one.filter(pa.compute.equal(rows_one.column("mode"), "unconstrained"))
    assert nogc.select(["image_id", "k", "n_gt", "hits", "recall", "predicates"]).to_pylist() == \
        [{k: v for k, v in r.items() if k != "box_source"} for r in whole.per_image]
    # I2 has no GT relation: no row, as SGB's R@K skips it; I3's repeated row counts twice
    assert sorted(set(rows_one.column("image_id").to_pylist())) == ["I0", "I1", "I3", "I4"]
    assert {r["n_gt"] for r in rows_one.to_pylist() if r["image_id"] == "I3"} == {2}
    assert 0 < one["scores"]["graph_constrained"]["R@20"] and one["scores"]["graph_constrained"]["R@1"] < 1


def test_sgb_per_image_rows_by_hand(tmp_path, monkeypatch):
    # The two-image file of the first test: A's GT "man on horse" is found at rank 2, B's "near"
    # at rank 1, so A has 0 hits at K=1 and 1 at K=2, B 1 and 1; R@1 = (0 + 1) / 2 is their mean.
    src, dicts = _sgb_file(tmp_path, monkeypatch)
    corpus = _corpus(tmp_path / "c.parquet", [("A", MAN_HORSE, [_rel(0, 1, "on")]),
                                              ("B", MAN_HORSE, [_rel(0, 1, "near")])])
    res = main(ConvertConfig(source_format="sgb", input=src, dicts=dicts, benchmark_reader="parquet",
                             benchmark_path=corpus, out=str(tmp_path / "sg.parquet"), score=True, ks=[1, 2]))
    rows = pq.read_table(res["scores"]["per_image"]).to_pylist()
    gc = [(r["image_id"], r["k"], r["hits"], r["n_gt"], r["recall"]) for r in rows if r["mode"] == "graph_constrained"]
    assert gc == [("A", 1, 0, 1, 0.0), ("B", 1, 1, 1, 1.0), ("A", 2, 1, 1, 1.0), ("B", 2, 1, 1, 1.0)]
    assert rows[0]["predicates"] == [{"predicate": "on", "hits": 0, "n_gt": 1}]
    assert res["scores"]["graph_constrained"]["R@1"] == np.mean([r[4] for r in gc if r[1] == 1])
    assert (rows[0]["protocol"], rows[0]["matcher"], rows[0]["system"]) == ("sgb", "legacy", "sg")


# ------------------------------------------------------------------ openpsg


def _score_openpsg(tmp_path, source_format, src, stuff):
    """Convert OpenPSG output for image P (GT person on horse) against a two-image corpus, scoring
    R@1 and R@2; psg.json names person and horse as things and on, beside as predicates."""
    psg = tmp_path / "psg.json"
    psg.write_text(json.dumps({"thing_classes": ["person", "horse"], "stuff_classes": stuff,
                               "predicate_classes": ["on", "beside"]}))
    corpus = _corpus(tmp_path / "c.parquet", [("P", [_box(0, 0, 10, 10, "person"), _box(20, 20, 30, 30, "horse")],
                                               [_rel(0, 1, "on")]), ("Q", MAN_HORSE, [_rel(0, 1, "beside")])])
    ids = tmp_path / "ids.json"
    ids.write_text('["P"]')
    return main(ConvertConfig(source_format=source_format, input=str(src), psg_json=str(psg), image_ids=str(ids),
                              benchmark_reader="parquet", benchmark_path=corpus, out=str(tmp_path / "sg.parquet"),
                              score=True, ks=[1, 2]))


def test_openpsg_submission_boxes_from_the_panoptic_png(tmp_path):
    from PIL import Image

    # segment 1 (R=1) covers x, y in 0..9, segment 2 (R=2) 20..29 -> boxes (0,0,10,10), (20,20,30,30).
    # category_id is 1-based into thing + stuff classes: 1 person, 2 horse. Relations ranked:
    # (1,0) beside (predicate 2, 1-based) scores 1, (0,1) on (predicate 1) scores 1 - 1/2 = .5.
    # GT person on horse: R@1 = 0, R@2 = 1. Read 0-based, category 2 would be "grass": R@2 = 0.
    sub = tmp_path / "submission"
    (sub / "panseg").mkdir(parents=True)
    img = np.zeros((40, 40, 3), np.uint8)
    img[0:10, 0:10, 0], img[20:30, 20:30, 0] = 1, 2
    Image.fromarray(img).save(sub / "panseg" / "0.png")
    (sub / "relation.json").write_text(json.dumps([{
        "relations": [[1, 0, 2], [0, 1, 1]], "pan_seg_file_name": "0.png",
        "segments_info": [{"id": 1, "category_id": 1}, {"id": 2, "category_id": 2}]}]))
    res = _score_openpsg(tmp_path, "openpsg", sub, stuff=["grass"])
    gc = res["scores"]["graph_constrained"]
    assert res["triplets"] == 2 and (gc["R@1"], gc["R@2"]) == (0.0, 1.0)
    objs = pq.read_table(tmp_path / "sg.parquet").column("objects").to_pylist()[0]
    assert [(o["x1"], o["x2"], o["label"]) for o in objs] == [(0, 10, "person"), (20, 30, "horse")]


def test_openpsg_pickled_results_keep_dense_scores(tmp_path, monkeypatch):
    import pickle

    # OpenPSG's tools/test.py --out: a pickled list of Result objects (openpsg's class, stood in for
    # here while saving). refine_bboxes carry the label score in column 4; rel_dists column 0 is
    # "no relation". (1,0): beside .8 x .5 x .9 = .36 ranks above (0,1): on .7 x .9 x .5 = .315;
    # GT person on horse -> R@1 = 0, R@2 = 1 (dropping the last column instead of the first: 0).
    mod = types.ModuleType("openpsg.models.relation_heads.approaches.relation_util")

    class Result:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    Result.__module__, Result.__qualname__ = mod.__name__, "Result"
    mod.Result = Result
    parts = mod.__name__.split(".")
    for k in range(1, len(parts)):
        monkeypatch.setitem(sys.modules, ".".join(parts[:k]), types.ModuleType(".".join(parts[:k])))
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    res = Result(refine_bboxes=np.array([[0, 0, 10, 10, .9], [20, 20, 30, 30, .5]]), labels=np.array([1, 2]),
                 rel_pair_idxes=np.array([[1, 0], [0, 1]]), rel_dists=np.array([[.1, .1, .8], [.2, .7, .1]]),
                 masks=None, pan_results=None)
    src = tmp_path / "results.pkl"
    src.write_bytes(pickle.dumps([res], protocol=2))
    for k in range(1, len(parts) + 1):
        monkeypatch.delitem(sys.modules, ".".join(parts[:k]))  # loading must not need OpenPSG's code
    res = _score_openpsg(tmp_path, "openpsg-pkl", src, stuff=[])
    gc = res["scores"]["graph_constrained"]
    assert res["pairs"] == 2 and (gc["R@1"], gc["R@2"]) == (0.0, 1.0)
    objs = pq.read_table(tmp_path / "sg.parquet").column("objects").to_pylist()[0]
    assert [(o["label"], o["score"]) for o in objs] == [("person", pytest.approx(.9)), ("horse", .5)]
    # a pickle that calls anything beyond arrays and containers is refused, not run
    import os

    class Call:
        def __reduce__(self):
            return os.getcwd, ()

    (tmp_path / "bad.pkl").write_bytes(pickle.dumps([Call()], protocol=2))
    with pytest.raises(pickle.UnpicklingError, match="refusing to unpickle (posix|nt).getcwd"):
        main(ConvertConfig(source_format="openpsg-pkl", input=str(tmp_path / "bad.pkl"),
                           psg_json=str(tmp_path / "psg.json"), image_ids=str(tmp_path / "ids.json"),
                           out=str(tmp_path / "o.parquet")))


# ------------------------------------------------------------------ vlm

def test_vlm_strings_map_at_the_calibrated_threshold_and_unmapped_are_counted(tmp_path):
    # Benchmark predicates (from the GT): holding, next to, on. MiniLM cosines: "is holding" ->
    # holding 0.88, "beside" -> next to 0.64; "flying over the rainbow quickly" reaches at most 0.24.
    # The threshold calibrated on the lexicon lies between (0.25 .. 0.6), so the first two map and
    # the third is dropped and counted twice; "ON " matches "on" exactly.
    corpus = _corpus(tmp_path / "c.parquet", [
        ("A", MAN_HORSE, [_rel(0, 1, "holding"), _rel(1, 0, "next to")]), ("B", MAN_HORSE, [_rel(0, 1, "on")])])
    lines = [{"image_id": "A", "triplets": [
        {"subject": 0, "object": 1, "predicate": "flying over the rainbow quickly"},
        {"subject": 1, "object": 0, "predicate": "beside"},
        {"subject": 0, "object": 1, "predicate": "is holding"}, {"subject": 1, "object": 1, "predicate": "on"},
        {"subject": 0, "object": 7, "predicate": "on"}, {"subject": "man", "object": 1, "predicate": "on"}]},
        {"image_id": "B", "triplets": [{"subject": 1, "object": 0, "predicate": "flying over the rainbow quickly",
                                        "score": .9}, {"subject": 0, "object": 1, "predicate": "ON ", "score": .8}]}]
    src = tmp_path / "vlm.jsonl"
    src.write_text("\n".join(json.dumps(x) for x in lines))
    out = str(tmp_path / "sg.parquet")
    res = main(ConvertConfig(source_format="vlm", input=str(src), benchmark_reader="parquet", benchmark_path=corpus,
                             out=out, score=True, ks=[1, 2]))
    report = json.loads(open(out + ".report.json").read())
    assert 0.25 < report["threshold"] < 0.6
    assert report["unmapped"] == {"flying over the rainbow quickly": 2} and report["n_unmapped_triplets"] == 2
    assert report["mapping"] == {"ON ": "on", "beside": "next to", "is holding": "holding", "on": "on"}
    assert res["unmapped"]["triplets"] == 2 and res["triplets"] == 3
    # three answers name no usable pair and are dropped, counted by reason
    assert report["dropped"] == {"subject == object": 1, "index out of range": 1, "index not an integer": 1}
    # A: "beside" (list position 1 of 6) scores 1 - 1/6 and ranks above "is holding" (1 - 2/6): R@1
    # finds horse next to man only (1/2), R@2 both (1). B: "ON " on (0,1) -> R@1 = 1. sgb: R@1 = .75.
    gc = res["scores"]["graph_constrained"]
    assert (gc["R@1"], gc["R@2"]) == (pytest.approx(0.75), 1.0)
    tri = pq.read_table(out).column("triplets").to_pylist()[0]
    assert [(t["predicate"], round(t["score"], 4)) for t in tri] == [("next to", round(5 / 6, 4)), ("holding", round(4 / 6, 4))]


@pytest.mark.parametrize("only_score", [False, True])
@pytest.mark.parametrize("bad", ["nan_score", "pair_out_of_range"])
def test_sgb_scored_while_converted_still_refuses_a_bad_chunk_by_name(tmp_path, monkeypatch, bad, only_score):
    # --score scores each chunk while a second thread validates it: a bad value must still end
    # the job with the validator's SchemaError (not whatever the scorer trips on), and no file.
    # --only-score validates in the reading process (two here, one shard each): the error that
    # comes back names the shard and the image's place in it.
    import torch

    BoxList = _boxlist_module(monkeypatch)
    a = BoxList([[0, 0, 9, 9], [20, 20, 29, 29]], (100, 100))
    a.add_field("pred_labels", torch.tensor([1, 2]))
    a.add_field("pred_scores", torch.tensor([.9, .8]))
    a.add_field("rel_pair_idxs", torch.tensor([[0, 1], [1, 5 if bad == "pair_out_of_range" else 0]]))
    a.add_field("pred_rel_scores", torch.tensor([[.1, float("nan") if bad == "nan_score" else .2, .7], [.3, .6, .1]]))
    good = _random_boxlists(BoxList, 1, 3)[0]
    src = tmp_path / "eval_results.pytorch"
    if only_score:
        src = tmp_path / "shards"
        src.mkdir()
        torch.save([good], src / "part_0.pytorch")
        torch.save([good, a], src / "part_1.pytorch")
    else:
        torch.save({"predictions": [a]}, src)
    for name in SGB_MODULES:
        monkeypatch.delitem(sys.modules, name)
    dicts = tmp_path / "dicts.json"
    dicts.write_text(json.dumps({"idx_to_label": {"1": "man", "2": "horse"}, "idx_to_predicate": {"1": "on", "2": "near"}}))
    images = [("A", MAN_HORSE, [_rel(0, 1, "on")])]
    if only_score:
        images = [("G0", MAN_HORSE, []), ("G1", MAN_HORSE, [])] + images
    corpus = _corpus(tmp_path / "c.parquet", images)
    out = tmp_path / "sg.parquet"
    where = r"part_1\.pytorch.*part_1\.pytorch\[1\].*" if only_score else ""
    with pytest.raises(SchemaError, match=where + ("pair_scores" if bad == "nan_score" else "pairs")):
        main(ConvertConfig(source_format="sgb", input=str(src), dicts=str(dicts), benchmark_reader="parquet",
                           benchmark_path=corpus, out=str(out), score=True, only_score=only_score,
                           read_workers=2 if only_score else None))
    assert not out.exists() and not (tmp_path / "sg.parquet.partial").exists()
