"""The OvR-SGG job end to end on a tiny synthetic world: checkpoints run on the test split, a
predictions file beside them, the Table 8 layout with the compliant / non-compliant gap, and each
checkpoint's compliance read from its own text bank (not from what the config claims)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import torch.nn.functional as F

from relate.checkpoint import save_checkpoint
from relate.data.lexicon import all_surface_forms
from relate.data.predicate_split import held_out, load_predicate_split
from relate.data.synthetic import SyntheticConfig
from relate.data.synthetic_corpus import write_corpus
from relate.model import RelationModelConfig, create_relation_model
from relate.model.config import BackboneConfig, DeformableConfig
from relate.schema import PREDICTIONS_SCHEMA, to_table
from relate.text.bank import TextBank

D = 384  # the packaged MiniLM's width: strings outside a bank are embedded by it


def _checkpoint(folder, strings):
    torch.manual_seed(0)
    cfg = RelationModelConfig(backbone=BackboneConfig(name="vit_tiny_patch16_224", img_size=32, depth=2, taps=[-2, -1],
                                                      patch_size=8),
                              dim=32, heads=4, text_dim=D, scene_grid=2, pair_layers=1, joint_layers=1,
                              deformable=DeformableConfig(heads=4, points=2))
    g = torch.Generator().manual_seed(1)
    bank = TextBank(strings=tuple(strings), matrix=F.normalize(torch.randn(len(strings), D, generator=g), dim=-1).numpy(),
                    encoder="minilm")
    return str(save_checkpoint(folder, create_relation_model(cfg).eval(), bank))


def test_table8_for_compliant_and_non_compliant_checkpoints_and_an_oracle(tmp_path):
    from eval_jobs.ovr_sgg import OvRSGGConfig, main

    world = write_corpus(tmp_path / "world", SyntheticConfig(seed=3, num_scenes=10, min_size=64, max_size=80),
                         split=lambda i: "test")
    test = pq.read_table(world / "corpus" / "test")
    rels = test.column("relations").to_pylist()
    assert all(len({(r["subject"], r["object"]) for r in rs}) == len(rs) for rs in rels)  # one predicate per pair
    oracle = tmp_path / "oracle.parquet"  # every stated relation, nothing else: recall 1 under both matchers
    pq.write_table(to_table([{"image_id": i, "triplets": [{"subject": r["subject"], "object": r["object"],
                                                           "predicate": r["predicate"], "score": 1.0,
                                                           "spatial_score": None, "semantic_score": None} for r in rs]}
                             for i, rs in zip(test.column("image_id").to_pylist(), rels)], PREDICTIONS_SCHEMA), oracle)
    split = load_predicate_split("synthetic_ovr")
    forms = all_surface_forms()
    clean = [f for f in forms if not held_out(split).removes(f)]
    pointer = tmp_path / "LATEST"  # a pointer file, as a training run's LATEST, stands for its checkpoint
    pointer.write_text(_checkpoint(tmp_path / "held", clean))
    cfg = OvRSGGConfig.model_validate({
        "split": "synthetic_ovr", "use_ray": False, "out_dir": str(tmp_path / "out"), "ks": [20, 50],
        "benchmark": {"reader": "corpus", "path": str(world), "fold": "lexicon"},
        "systems": [{"name": "seen", "checkpoint": _checkpoint(tmp_path / "seen", forms)},
                    {"name": "held", "checkpoint": str(pointer)},
                    {"name": "oracle", "predictions": str(oracle), "novel_seen": True}]})
    res = main(cfg)
    rows = {(r["system"], r["matcher"]): r for r in res["rows"]}
    assert len(rows) == 6
    assert rows[("seen", "sgb")]["novel_seen"] is True and rows[("held", "sgb")]["novel_seen"] is False
    assert "on top of" in rows[("seen", "sgb")]["novel_forms_in_bank"]
    assert rows[("held", "one_to_one")]["novel_forms_in_bank"] == []
    for m in ("sgb", "one_to_one"):
        o = rows[("oracle", m)]
        assert o["R@20"] == 1.0 and o["novel_R@20"] == 1.0 and o["n_novel_relations"] > 0
        assert o["n_predicates"] == 17 and o["n_novel"] == 5  # concepts, not surface strings
    table = (tmp_path / "out" / "table.md").read_text()
    for needle in ("| seen | yes | sgb |", "| held | no (compliant) | one_to_one |", "Novel R@50",
                   "Non-compliant minus compliant", "| sgb | seen | held |", "| sgb | oracle | held |"):
        assert needle in table, needle
    assert pq.read_table(tmp_path / "out" / "ovr_sgg.parquet").num_rows == 6
    assert (tmp_path / "out" / "ovr_sgg.png").stat().st_size > 1000


def test_shipped_configs_parse_and_name_their_splits():
    from relate.config import load_config

    from eval_jobs.ovr_sgg import OvRSGGConfig

    configs = Path(__file__).resolve().parents[2] / "eval_jobs" / "configs"
    syn = load_config(OvRSGGConfig, configs / "ovr_sgg_synthetic.yaml")
    vg = load_config(OvRSGGConfig, configs / "ovr_sgg_vg150.yaml")
    assert (syn.split, syn.benchmark.fold, vg.split, vg.benchmark.reader) == ("synthetic_ovr", "lexicon", "vg150_ovr", "vg150")
    assert vg.benchmark.detections and set(vg.matchers) == {"sgb", "one_to_one"}


def test_converse_scoring_of_a_compliant_checkpoint_leaves_the_novel_predicates_their_own(tmp_path):
    """Converse scoring on, the OvR job's inference path: the held-out "behind" and "inside" have the
    trained "in front of" and "contains" as converses, yet every novel string's scores are the ones
    converse scoring off gives, and stay so when the trained converses' scores are forced anywhere.
    The base predicates' scores do change (they average with each other), so the switch is live."""
    import numpy as np

    from relate.api import load_model

    world = write_corpus(tmp_path / "world", SyntheticConfig(seed=3, num_scenes=6, min_size=64, max_size=80),
                         split=lambda i: "test")
    test = pq.read_table(world / "corpus" / "test")
    split = load_predicate_split("synthetic_ovr")
    forms = all_surface_forms()
    ho = held_out(split)
    ck = _checkpoint(tmp_path / "held", [f for f in forms if not ho.removes(f)])
    uris, boxes = test.column("uri").to_pylist(), test.column("boxes").to_pylist()
    novel = np.array([ho.removes(f) for f in forms])
    base_converse = np.isin(forms, ["in front of", "occluding", "blocking the view of", "contains", "enclosing",
                                    "holding inside"])
    on = load_model(ck, converse=True).score_images(uris, boxes, forms)
    off = load_model(ck, converse=False).score_images(uris, boxes, forms)
    assert any(not np.allclose(a.l_pred[:, ~novel], b.l_pred[:, ~novel]) for a, b in zip(on, off))
    for a, b in zip(on, off):
        np.testing.assert_array_equal(a.l_pred[:, novel], b.l_pred[:, novel])
    from relate.converse import converse_logits

    pred = load_model(ck, converse=True)
    cmap = pred._converse_for(pred._bank_for(forms)[0])
    for a in off:
        forced = a.l_pred.copy()
        forced[:, base_converse] = 1e3
        np.testing.assert_array_equal(converse_logits(a.pairs, forced, cmap)[:, novel], a.l_pred[:, novel])


def test_relation_eval_scores_several_seeds_with_intervals_over_seeds_and_images(tmp_path, capsys):
    """``python -m train_jobs.relation_eval CKPT CKPT WORLD``: each checkpoint's figures on every test
    image are the ones it gets scored alone, their mean is the estimate, and the interval over
    checkpoints and images holds it, inside [0, 1]."""
    import numpy as np

    from relate.api import load_model
    from relate.config import dump_config
    from train_jobs.relation_eval import _cli, score_truth_split

    cfg = SyntheticConfig(seed=3, num_scenes=8, min_size=64, max_size=80)
    world = write_corpus(tmp_path / "world", cfg, split=lambda i: "test")
    dump_config(cfg, world / "synthetic_config.yaml")
    forms = all_surface_forms()
    cks = [_checkpoint(tmp_path / "a", forms), _checkpoint(tmp_path / "b", forms[:-3])]
    out = _cli([*cks, str(world), "--resamples", "300"])
    assert "interval over checkpoints and images" in capsys.readouterr().out
    ivs = out["intervals"]
    for k, ck in enumerate(cks):
        alone = score_truth_split(load_model(ck), str(world), "test")[1].figures()
        for name, v in alone.items():
            assert ivs[name]["per_seed"][k] == v or (np.isnan(v) and np.isnan(ivs[name]["per_seed"][k]))
    top = ivs["top10_precision"]
    assert 0 <= top["lo"] <= top["mean"] <= top["hi"] <= 1
    assert top["mean"] == np.mean(top["per_seed"])


# Every knowledge-file converse link among these strings crosses synthetic_ovr's line (novel "behind" and
# "inside", trained "in front of" and "contains"); "on", "part of", "wearing" and "holding" have no
# converse among them.
_CROSSING = ["behind", "in front of", "inside", "contains", "on", "part of", "wearing", "holding"]


def _crossing_world(tmp_path):
    """The tiny world's test split with its relations restated over _CROSSING in turn: a benchmark made
    by hand, whose figures mean nothing except whether two runs give the same."""
    world = write_corpus(tmp_path / "world", SyntheticConfig(seed=1, num_scenes=6, min_size=64, max_size=80),
                         split=lambda i: "test")
    n = itertools.count()
    for path in (world / "corpus" / "test").glob("*.parquet"):
        t = pq.read_table(path)
        col = t.schema.get_field_index("relations")
        rels = [[{**r, "predicate": _CROSSING[next(n) % len(_CROSSING)]} for r in rs]
                for rs in t.column("relations").to_pylist()]
        pq.write_table(t.set_column(col, t.schema.field(col), pa.array(rels, type=t.schema.field(col).type)), path)
    return world


def _crossing_job(tmp_path, systems):
    from eval_jobs.ovr_sgg import OvRSGGConfig

    split = load_predicate_split("synthetic_ovr")
    ck = _checkpoint(tmp_path / "held", [f for f in all_surface_forms() if not held_out(split).removes(f)])
    return OvRSGGConfig.model_validate({
        "split": "synthetic_ovr", "use_ray": False, "out_dir": str(tmp_path / "out"), "ks": [20, 50],
        "benchmark": {"reader": "corpus", "path": str(_crossing_world(tmp_path))},
        "systems": [{"name": name, "checkpoint": ck, "converse": on} for name, on in systems]})


def test_converse_scoring_leaves_a_compliant_checkpoints_novel_recall_as_it_is(tmp_path):
    """One compliant checkpoint scored by the job with converse scoring off and on, over a vocabulary
    whose every converse link pairs a novel predicate with a trained one: kept apart, the trained
    converse lends the novel scores nothing (nor they the base ones), so every figure, Novel R@K and mR
    included, is the same and so is every predicted score. Averaged (the guard removed and the job's
    check with it), Novel R@20 on this world falls from 0.11 to 0.05."""
    from eval_jobs.ovr_sgg import main

    res = main(_crossing_job(tmp_path, [("off", False), ("on", True)]))
    out = tmp_path / "out"
    rows = {(r["system"], r["matcher"]): r for r in res["rows"]}
    for m in ("sgb", "one_to_one"):
        off, on = rows[("off", m)], rows[("on", m)]
        assert off["n_novel_relations"] > 0 and off["novel_R@20"] > 0 and off["novel_seen"] is False
        figures = [k for k in off if k.split("@")[0] in ("R", "novel_R", "mR", "novel_mR") or k.startswith("predicted")]
        np.testing.assert_equal({k: on[k] for k in figures}, {k: off[k] for k in figures})
        assert (off["converse_scoring"], off["converse_withheld"]) == (False, [])
        assert (on["converse_scoring"], on["converse_withheld"]) == (True, ["behind", "inside"])
    assert pq.read_table(out / "predictions" / "on.parquet").equals(pq.read_table(out / "predictions" / "off.parquet"))
    assert "on scores with converse scoring; 2 novel string(s) without their trained converse: behind, inside" in \
        (out / "table.md").read_text()


def test_a_converse_table_that_lends_a_novel_predicate_its_trained_converse_is_refused(tmp_path, monkeypatch):
    """The predictor's converse table built without the bank's line (the guard of relate.converse
    removed): the job refuses the compliant checkpoint before it scores an image, naming each novel
    string and the trained forms it would be averaged with."""
    import relate.api
    from eval_jobs.ovr_sgg import main
    from relate.converse import converse_map
    from relate.data.predicate_split import LeakError

    monkeypatch.setattr(relate.api, "converse_map", lambda strings, knowledge=None, trained=None: converse_map(strings))
    cfg = _crossing_job(tmp_path, [("on", True)])
    with pytest.raises(LeakError, match=r"would average 2 novel string\(s\) with a trained converse .*: 'behind' with "
                                        r"'in front of'; 'inside' with 'contains'\. Score it with converse: false"):
        main(cfg)
    assert not (tmp_path / "out" / "predictions").exists()
