"""The full truth of a synthetic corpus's images, regenerated from the world that drew them.

``pipelines.synthetic`` writes ``synthetic_config.yaml`` beside its corpus, and a scene depends only
on ``(seed, index)``, so every relation that holds in an image (``Scene.true_relations``) can be
rebuilt from its id, ``synth-<seed>-<index>``, without storing it. Any corpus made from those
images (the world's own, or one annotated from it by ``pipelines.annotate``) is scored against that
truth by naming the world's folder. The rebuilt scene is checked against the corpus row (size and
boxes), so a corpus from another world is refused, never scored against the wrong truth. Boxes a
pipeline appended after the world's own (``pipelines.annotate``'s jittered duplicate people) have no
truth: the count of the world's boxes comes back with each image's truth, and scoring keeps to them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

import numpy as np
import yaml

__all__ = ["WORLD_CONFIG", "load_world", "scene_index", "world_truth"]

WORLD_CONFIG = "synthetic_config.yaml"
_ID = re.compile(r"^synth-(-?\d+)-(\d+)$")


def load_world(root: str | Path):
    """The ``SyntheticConfig`` recorded in ``root/synthetic_config.yaml`` (job-only fields dropped)."""
    from relate.data.synthetic import SyntheticConfig

    path = Path(root) / WORLD_CONFIG
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the truth root must be a folder written by pipelines.synthetic")
    tree = yaml.safe_load(path.read_text()) or {}
    return SyntheticConfig(**{k: v for k, v in tree.items() if k in SyntheticConfig.model_fields})


def scene_index(image_id: str, seed: int) -> int:
    """The scene index of a synthetic image id; an id of another world or format is an error."""
    m = _ID.match(image_id)
    if m is None:
        raise ValueError(f"image id {image_id!r} is not a synthetic scene id (synth-<seed>-<index>)")
    if int(m.group(1)) != seed:
        raise ValueError(f"image id {image_id!r} was drawn with seed {m.group(1)}, the truth root's world has seed {seed}")
    return int(m.group(2))


def world_truth(root: str | Path, image_ids: Sequence[str], boxes: Sequence[Sequence[dict]] | None = None
                ) -> list[tuple[frozenset[tuple[int, int, str]], int]]:
    """Per image, the (subject, object, concept) triples true in it and the world's box count;
    ``boxes`` (the corpus rows' boxes) must begin with the regenerated scene's, to 1e-3 px."""
    from relate.data.synthetic import make_scene

    world = load_world(root)
    out = []
    for k, image_id in enumerate(image_ids):
        scene = make_scene(scene_index(image_id, world.seed), world)
        if scene.image_id != image_id:
            raise ValueError(f"regenerated {scene.image_id!r} for {image_id!r}")
        if boxes is not None:
            want = np.array([[b["x1"], b["y1"], b["x2"], b["y2"]] for b in scene.boxes]).reshape(-1, 4)
            got = np.array([[b["x1"], b["y1"], b["x2"], b["y2"]] for b in boxes[k]]).reshape(-1, 4)
            if len(got) < len(want) or not np.allclose(want, got[: len(want)], atol=1e-3):
                raise ValueError(f"{image_id}: the corpus row's {len(got)} boxes differ from the world's {len(want)} "
                                 f"(truth root {root} is not the world this corpus was drawn from)")
        out.append((frozenset((r["subject"], r["object"], r["concept"]) for r in scene.true_relations),
                    len(scene.boxes)))
    return out
