"""A CPU recipe's input must not contradict the synthetic world's truth: its photometric jitter
the appearance labels, its resize the geometry labels.

The world states ``brighter than`` where two palette colours' luminances differ by more than
``BRIGHTNESS_GAP`` (80 of 255). Brightness and contrast jitter scale every gap: at the paper's
0.3 (Table 14) a gap of 85 can be seen as 42 and one of 72 as 122, so about 12% of the brightness
labels a training step sees contradict its pixels, and the model learns colour names instead of
the comparison (appearance AP stayed near 0.7 in every run with it). The recipes that train on the
synthetic world run the train job's own jitter (``DecodeStage``) here, on every pair of palette
colours, and the label must survive every draw.

The world decides ``near`` and left/right against above/below in the picture's own pixels, and its
pictures are not square. The recipes' decode stage runs on a world scene here, and the world's own
rules applied to the boxes it hands the model must give the scene's truth.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch

from relate.config import load_config
from relate.data.synthetic import SyntheticConfig, make_scene
from relate.data.synthetic_render import PALETTE
from relate.data.synthetic_truth import BRIGHTNESS_GAP, PairRules
from train_jobs.relation_config import TrainRelationConfig
from train_jobs.relation_data import DecodeStage

CONFIGS = Path(__file__).resolve().parents[2] / "train_jobs" / "configs"
_WEIGHTS = torch.tensor([0.299, 0.587, 0.114])


def _flipped_labels(recipe: TrainRelationConfig, draws: int = 60) -> float:
    """Share of (palette pair, jitter draw) whose jittered luminance gap falls on the other side of
    the threshold from the world's label."""
    stage = DecodeStage(8, recipe.data, [], [], seed=0)
    flips = total = 0
    for a, b in itertools.combinations(PALETTE, 2):
        img = torch.zeros(3, 1, 2)
        img[:, 0, 0] = torch.tensor(PALETTE[a]) / 255.0
        img[:, 0, 1] = torch.tensor(PALETTE[b]) / 255.0
        label = abs(float(_WEIGHTS @ (img[:, 0, 0] - img[:, 0, 1]))) * 255 > BRIGHTNESS_GAP
        for _ in range(draws):
            out = stage._jitter(img)
            seen = abs(float(_WEIGHTS @ (out[:, 0, 0] - out[:, 0, 1]))) * 255 > BRIGHTNESS_GAP
            flips += seen != label
            total += 1
    return flips / total


@pytest.mark.parametrize("name", ["cpu_long.yaml"])
def test_world_recipe_jitter_keeps_every_brightness_label(name):
    recipe = load_config(TrainRelationConfig, CONFIGS / name)
    assert _flipped_labels(recipe) == 0.0


def test_the_paper_jitter_would_contradict_the_labels():
    """The check can fail: at Table 14's 0.3 a tenth of the labels flip."""
    recipe = load_config(TrainRelationConfig, CONFIGS / "cpu_long.yaml", ["data.photometric=0.3"])
    assert 0.05 < _flipped_labels(recipe) < 0.3
    assert np.isclose(load_config(TrainRelationConfig, CONFIGS / "released.yaml").data.photometric, 0.3)


def _geometry_changed(recipe: TrainRelationConfig, tmp_path: Path, scenes: int = 40) -> int:
    """Near and spatial decisions over whole-object pairs that differ between the picture's boxes
    and the boxes the recipe's decode stage hands the model."""
    import pyarrow as pa
    from PIL import Image

    def decide(b):
        r = PairRules(b, [np.zeros((1, 1), bool)] * len(b))
        return [(r.near(i, j), r.spatial(i, j)) for i in range(len(b)) for j in range(len(b)) if i != j]

    stage = DecodeStage(recipe.model.backbone.img_size, recipe.data, [], [], seed=0,
                        keep_aspect=recipe.model.backbone.keep_aspect)
    world, changed = SyntheticConfig(coverage="full"), 0
    for i in range(scenes):
        sc = make_scene(i, world)
        Image.fromarray(sc.image).save(tmp_path / "s.png")
        rec = sc.to_record(str(tmp_path / "s.png"), "train")
        out = stage(pa.Table.from_pylist([{**rec, "relations": []}]))
        whole = [k for k, x in enumerate(rec["boxes"][: recipe.data.max_boxes]) if not x["is_body_part"]]
        seen = out["boxes"][0, whole].astype(np.float64)
        drawn = np.array([[rec["boxes"][k][c] for c in ("x1", "y1", "x2", "y2")] for k in whole], np.float64)
        changed += sum(a != b for a, b in zip(decide(drawn), decide(seen)))
    return changed


def test_world_recipe_keeps_the_pictures_proportions(tmp_path):
    recipe = load_config(TrainRelationConfig, CONFIGS / "cpu_long.yaml")
    assert _geometry_changed(recipe, tmp_path) == 0
    # the check can fail: stretched to the square, the same scenes change decisions
    stretched = load_config(TrainRelationConfig, CONFIGS / "cpu_long.yaml", ["model.backbone.keep_aspect=false"])
    assert _geometry_changed(stretched, tmp_path) > 10
