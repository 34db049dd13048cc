"""The mechanisms that let a model trained on annotation learn what holds beyond it are on in the CPU
recipes (the demo's and cpu_long) and the released one (issue 47): a user training on real
VLM annotation gets them without knowing they exist.

Each mechanism's own effect is tested where it lives (``test_relation_objective.py``: the gradient of
every term with and without it; ``test_entailment.py``; ``test_relation_space.py``). Here: the recipes
as committed switch each one on, and the unlabelled families resolve to real columns of the annotated
vocabulary, so a typo or a family renamed in ``relate/predicate_knowledge.yaml`` cannot leave the
mask empty while the recipe still reads as if it were on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from relate.config import load_config
from train_jobs.relation_config import TrainRelationConfig
from train_jobs.relation_data import DataConfig, _unlabelled

CONFIGS = Path(__file__).resolve().parents[2] / "train_jobs" / "configs"


@pytest.mark.parametrize("name", ["cpu_small.yaml", "cpu_long.yaml", "released.yaml"])
def test_recipe_switches_on_every_annotation_gap_mechanism(name):
    cfg = load_config(TrainRelationConfig, CONFIGS / name)
    assert cfg.data.implied_relations, f"{name}: stated facts' converses and entailments"
    assert cfg.loss.gate_negatives > 0, f"{name}: the gate's geometry as negatives"
    assert cfg.loss.sigmoid_rows == "sampled", f"{name}: every sampled pair a row of the per-cell sigmoid"
    assert "appearance" in cfg.data.unlabelled_families, f"{name}: unstated appearance is unlabelled"


def test_recipe_unlabelled_families_mark_real_columns(tmp_path):
    """The recipe's families pick out the knowledge file's appearance predicates (read off
    ``relate/predicate_knowledge.yaml`` by hand) on a corpus that is not a full-truth world; with no
    family named there is no mask at all."""
    cfg = load_config(TrainRelationConfig, CONFIGS / "cpu_long.yaml")
    keys = ["brighter_than", "behind", "darker_than", "on", "same_colour_as", "not a predicate"]
    data = DataConfig(**{**cfg.data.model_dump(), "corpus_root": str(tmp_path)})
    mask = _unlabelled(data, keys)
    assert mask is not None and mask.tolist() == [True, False, True, False, True, False]
    assert _unlabelled(DataConfig(**{**data.model_dump(), "unlabelled_families": []}), keys) is None
