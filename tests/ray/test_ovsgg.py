"""eval_jobs.ovsgg end to end on a local Ray: the synthetic world exported as native benchmark
layouts, a model plugged in through the inference stage, the frequency baseline from a Parquet
file, and the Table-3 / radar / JSON outputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eval_jobs.ovsgg import BenchmarkSpec, OVSGGConfig, SystemSpec, InferenceSpec, main
from relate.data.export import export_benchmark_suite
from relate.data.synthetic import SyntheticConfig, make_scene
from relate.geometry import iou
from relate.metrics import fit_frequency_baseline, load_ground_truth
from relate.schema import CORPUS_SCHEMA, PREDICTIONS_SCHEMA, SchemaError, to_table


def synthetic_corpus(n: int = 40, n_train: int = 20) -> pa.Table:
    cfg = SyntheticConfig(seed=3, num_scenes=n, min_size=96, max_size=128)
    rows = []
    for i in range(n):
        s = make_scene(i, cfg)
        rels = [{"subject": r["subject"], "object": r["object"], "predicate": r["predicate"], "pass": "human",
                 "gate": "kept", "score": None} for r in s.relations]
        rows.append({"image_id": s.image_id, "uri": f"mem://{s.image_id}", "width": s.width, "height": s.height,
                     "source": "synthetic", "split": "train" if i < n_train else "test", "boxes": s.boxes,
                     "relations": rels})
    return to_table(rows, CORPUS_SCHEMA)


def noisy_oracle(truth: pa.Table, seed: int = 0):
    """A stand-in model: scores the true predicate of a pair high (with noise), others low.
    Regions given to it are matched to the truth by IoU, so it also runs on detector boxes."""
    gt = {r["image_id"]: r for r in truth.to_pylist()}

    def predict(regions: pa.Table, vocabulary: list[str]) -> pa.Table:
        rng = np.random.default_rng(seed)
        out = []
        for r in regions.to_pylist():
            g = gt[r["image_id"]]
            rb = np.array([[b[k] for k in ("x1", "y1", "x2", "y2")] for b in r["boxes"]]).reshape(-1, 4)
            gb = np.array([[b[k] for k in ("x1", "y1", "x2", "y2")] for b in g["boxes"]]).reshape(-1, 4)
            ov = iou(rb[:, None], gb[None]) if rb.size and gb.size else np.zeros((len(rb), len(gb)))
            to_gt = np.where(ov.max(1, initial=0) >= 0.5, ov.argmax(1), -1) if ov.size else np.full(len(rb), -1)
            true = {}
            for x in g["relations"]:
                true.setdefault((x["subject"], x["object"]), []).append(x["predicate"])
            tri = []
            for s in range(len(rb)):
                for o in range(len(rb)):
                    if s == o:
                        continue
                    hit = true.get((int(to_gt[s]), int(to_gt[o])), []) if to_gt[s] >= 0 and to_gt[o] >= 0 else []
                    cand = hit[:1] + list(rng.choice(vocabulary, 2))
                    for j, p in enumerate(cand):
                        score = (0.6 + 0.4 * rng.random()) if (j == 0 and hit and rng.random() < 0.8) else 0.5 * rng.random()
                        tri.append({"subject": s, "object": o, "predicate": str(p), "score": float(score),
                                    "spatial_score": None, "semantic_score": None})
            out.append({"image_id": r["image_id"], "triplets": tri})
        return to_table(out, PREDICTIONS_SCHEMA)

    return predict


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    root = tmp_path_factory.mktemp("ovsgg")
    corpus = synthetic_corpus()
    paths = export_benchmark_suite(corpus, root / "bench", seed=0)
    train = corpus.filter(pa.compute.equal(corpus.column("split"), "train"))
    pq.write_table(train, root / "train.parquet")
    test = corpus.filter(pa.compute.equal(corpus.column("split"), "test"))
    freq = fit_frequency_baseline(train)
    base = {}
    for name in ("vg150", "psg", "haystack", "spatialsense"):
        base[name] = str(root / f"freq_{name}.parquet")
        pq.write_table(freq.predict(load_ground_truth(test) if name != "spatialsense" else
                                    load_ground_truth(_read(paths[name], "spatialsense")), pairs="all"), base[name])
    det = pq.read_table(paths["psg_det"] / "detections.parquet")
    det_corpus = det.append_column("relations", pa.array([[] for _ in range(det.num_rows)],
                                                         type=CORPUS_SCHEMA.field("relations").type))
    base["psg_det"] = str(root / "freq_psg_det.parquet")
    pq.write_table(freq.predict(load_ground_truth(det_corpus), pairs="all"), base["psg_det"])
    return root, paths, corpus, base


def _read(path, reader):
    from relate.data.readers import read_benchmark

    return read_benchmark(reader, str(path)).corpus


def _cfg(root, paths, base, **kw):
    benches = [BenchmarkSpec(name="vg150", axis="A1", reader="vg150", path=str(paths["vg150"])),
               BenchmarkSpec(name="psg", axis="A1", reader="psg", path=str(paths["psg"])),
               BenchmarkSpec(name="haystack", axis="A2", reader="haystack", path=str(paths["haystack"]), min_support=2),
               BenchmarkSpec(name="psg_det", axis="A4", reader="psg", path=str(paths["psg_det"]),
                             detections=str(paths["psg_det"] / "detections.parquet")),
               BenchmarkSpec(name="spatialsense", axis="A6", reader="spatialsense", path=str(paths["spatialsense"]))]
    return OVSGGConfig(out_dir=str(root / "out"), benchmarks=benches, num_cpus_per_task=1.0, prior_watch=["wearing"],
                       systems=[SystemSpec(name="ours", a5=0.6, train_corpus=str(root / "train.parquet")),
                                SystemSpec(name="freq", predictions=base, train_corpus=str(root / "train.parquet"))],
                       inference=InferenceSpec(system="ours", predict_fn="unused:placeholder"), **kw)


@pytest.mark.slow
def test_ovsgg_end_to_end_on_ray(ray_session, suite, capsys):
    root, paths, corpus, base = suite
    cfg = _cfg(root, paths, base)
    res = main(cfg, predict_fn=noisy_oracle(corpus))
    out = Path(cfg.out_dir)
    # Legible in the job log: one progress line per finished cell (Ray tasks gathered with ray.wait).
    n_cells = sum(len(r["cells"]) for r in res["systems"].values())
    done = [ln.split()[2] for ln in capsys.readouterr().out.splitlines() if ln.startswith("[ovsgg-out] cells ")]
    assert done == [f"{k}/{n_cells}" for k in range(1, n_cells + 1)]
    for f in ("results.json", "table.md", "radar.png", "config.yaml"):
        assert (out / f).is_file() and (out / f).stat().st_size > 0, f
    assert sorted(p.name for p in (out / "predictions").iterdir()) == sorted(f"{b}.parquet" for b in base)
    saved = json.loads((out / "results.json").read_text())
    assert saved["protocol"] == {"name": "paper", "mode": "graph_constrained", "matcher": "one_to_one",
                                 "headline_k": 50}
    ours, freq = res["systems"]["ours"], res["systems"]["freq"]
    assert ours["cells"]["psg"]["recall"]["mode"] == "graph_constrained"
    assert ours["cells"]["psg_det"]["recall"]["box_source"] == "detector"
    assert 0 < ours["cells"]["psg_det"]["pair_recall"]["ceiling"] <= 1
    assert 0 <= ours["cells"]["vg150"]["triplet_mass"]["triple"] <= 1
    assert set(ours["cells"]["psg"]["prior_violation"]) >= {"model_rate", "data_rate", "ratio"}
    assert ours["composite"]["axis_set"] == ["A1", "A2", "A4", "A5", "A6"]
    assert freq["composite"]["axis_set"] == ["A1", "A2", "A4", "A6"]  # no A5 cell for the baseline
    assert ours["axes"]["A1"]["norm"] > freq["axes"]["A1"]["norm"]
    assert ours["cells"]["psg"]["recall"]["metrics"]["mR@50"] > freq["cells"]["psg"]["recall"]["metrics"]["mR@50"]
    table = (out / "table.md").read_text()
    assert "| axis | measure | ours | freq | note |" in table and "OVS composite" in table
    assert "graph-constrained" in table and "Leave-one-axis-out" in table and "pair-recall ceiling" in table
    assert [r["withheld"] for r in res["leave_one_axis_out"]] == ["none", "A1", "A2", "A4", "A6"]
    ovs_row = next(ln for ln in table.splitlines() if ln.startswith("| OVS composite"))
    lo, hi = (saved["bootstrap"]["systems"]["ours"]["ovs"][x] for x in ("low", "high"))
    assert f"[{100 * lo:.1f}, {100 * hi:.1f}]" in ovs_row and "## Paired differences" in table
    # per-image rows of every A1/A4 recall cell, adding up to the reported R@50
    assert saved["per_image"] == "per_image.parquet"
    df = pq.read_table(out / saved["per_image"]).to_pandas()
    assert set(zip(df.system, df.benchmark)) == {(s, b) for s in ("ours", "freq") for b in ("vg150", "psg", "psg_det")}
    for s in ("ours", "freq"):
        for b in ("vg150", "psg", "psg_det"):
            at50 = df[(df.system == s) & (df.benchmark == b) & (df.k == 50)]
            assert at50.recall.mean() == pytest.approx(saved["systems"][s]["cells"][b]["recall"]["metrics"]["R@50"])


def test_every_cell_kit_reproduces_its_reported_headline(suite):
    """With every image drawn once, each cell's resampling kit gives back exactly the raw and
    chance-corrected values the report shows: the intervals are intervals around those values."""
    from eval_jobs.intervals import _cell_draws
    from eval_jobs.ovsgg_cells import cell_axis, load_benchmark, score_cell

    root, paths, corpus, base = suite
    cfg = _cfg(root, paths, base, use_ray=False)
    for spec in cfg.benchmarks:
        cell = score_cell(spec, load_benchmark(spec), base[spec.name], cfg)
        kit = cell["_kit"]
        raw, norm = _cell_draws(kit, np.ones((1, kit["n_images"])))
        assert (raw[0], norm[0]) == pytest.approx(cell_axis(cell, cfg.headline_k), abs=1e-12), spec.name


@pytest.mark.slow
def test_intervals_are_paired_across_systems(suite):
    """A system scored twice under two names differs from itself by exactly 0 in every draw; the
    draws file holds every quantity of every system."""
    root, paths, corpus, base = suite
    cfg = _cfg(root, paths, base, use_ray=False)
    cfg.inference = None
    cfg.out_dir = str(root / "twice")
    cfg.bootstrap.resamples = 200
    cfg.systems = [SystemSpec(name="freq", predictions=base), SystemSpec(name="again", predictions=base),
                   SystemSpec(name="freq_a5", predictions=base, a5=0.5)]
    res = main(cfg)
    boot = res["bootstrap"]
    assert boot["resamples"] == 200 and set(boot["images"]) == set(base)
    iv = boot["systems"]["freq"]
    assert set(iv["cells"]) == set(base) and set(iv["axes"]) == {"A1", "A2", "A4", "A6"}
    comp = res["systems"]["freq"]["composite"]
    assert iv["ovs"]["estimate"] == comp["ovs"] and iv["ovs"]["low"] <= iv["ovs"]["high"]
    assert set(iv["leave_one_axis_out"]) == set(comp["axis_set"])
    for b, c in iv["cells"].items():
        assert c["norm"]["low"] <= c["norm"]["high"], b
    same = [d for d in boot["differences"] if {d["a"], d["b"]} == {"freq", "again"}]
    assert {d["quantity"] for d in same} >= {"ovs", "axis:A1", "loao:A1", "cell:vg150:norm"}
    assert all(d["estimate"] == 0 and d["low"] == 0 == d["high"] and not d["significant"] for d in same)
    # A5 enters the third system's OVS as a constant: its OVS moves with the same draws
    assert boot["systems"]["freq_a5"]["ovs"]["estimate"] == res["systems"]["freq_a5"]["composite"]["ovs"]
    draws = pq.read_table(Path(cfg.out_dir) / boot["draws"]).to_pylist()
    assert {(r["system"], r["quantity"]) for r in draws} >= {(s, "ovs") for s in ("freq", "again", "freq_a5")}
    assert all(len(r["draws"]) == 200 for r in draws)
    # the leaderboard pairs runs draw for draw only where the draws are the same draws
    from eval_jobs.leaderboard import LeaderboardConfig, main as leaderboard

    again = cfg.model_copy(deep=True)
    again.out_dir, again.systems = str(root / "rerun"), [SystemSpec(name="freq", predictions=base)]
    main(again)
    other = again.model_copy(deep=True)
    other.out_dir, other.bootstrap.seed = str(root / "reseeded"), 7
    main(other)
    lb = leaderboard(LeaderboardConfig(runs=[cfg.out_dir, again.out_dir, other.out_dir], out_dir=str(root / "lb"),
                                       resamples=50))
    ovs = {(p["a"], p["b"]): p for p in lb.composite_pairs if p["quantity"] in ("ovs", "*")}
    same = ovs[("freq (twice)", "freq (rerun)")]
    assert same["comparable"] and same["d"] == 0 and same["d_low"] == 0 == same["d_high"]
    assert not ovs[("freq (rerun)", "freq (reseeded)")]["comparable"]
    assert "different seed or resamples" in ovs[("freq (rerun)", "freq (reseeded)")]["reason"]
    assert "## Composite and chance-corrected axes" in lb.markdown
    assert (root / "lb" / "leaderboard_composite_pairs.csv").is_file()


def test_ovsgg_bad_prediction_file_names_file_and_row(ray_session, suite, tmp_path):
    root, paths, corpus, base = suite
    bad = dict(base)
    rows = pq.read_table(base["psg"]).to_pylist()
    rows[2]["triplets"][0]["subject"] = 99
    bad["psg"] = str(tmp_path / "broken.parquet")
    pq.write_table(to_table(rows, PREDICTIONS_SCHEMA), bad["psg"])
    cfg = _cfg(tmp_path, paths, bad, use_ray=False)
    cfg.inference = None
    cfg.systems = [SystemSpec(name="freq", predictions=bad)]
    with pytest.raises(SchemaError, match=r"broken\.parquet row 2 \(image_id='.+'\): triplets\.subject\[0\] = 99"):
        main(cfg)
