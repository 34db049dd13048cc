"""Model-ready batches for the model analyses (representation probes, lesions, logit decomposition).

Every analysis scores ground-truth pairs: they are forced through the pair sampler (``force``),
so each one has a row in the model's output. A bank row counts as the right answer for an edge
when its string names the edge's concept (synonyms of one concept are one class).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from relate.data.lexicon import concept_of

__all__ = ["ModelBatch", "batches_from_scenes", "bank_classes"]


@dataclass
class ModelBatch:
    images: torch.Tensor  # (B, 3, side, side) in [0, 1]
    boxes: torch.Tensor  # (B, N, 4) pixels of the resized image
    box_valid: torch.Tensor  # (B, N) bool
    force: torch.Tensor  # (B, N * N) bool: the ground-truth ordered pairs (index s * N + o)
    bank: torch.Tensor  # (V, text_dim) unit rows
    bank_class: torch.Tensor  # (V,) class index of each bank row
    relations: list[list[tuple[int, int, int]]]  # per image (subject, object, class index)
    categories: list[list[str]]  # per image the category of each box
    image_ids: list[str]
    related: list[set[tuple[int, int]]] | None = None  # per image every ordered pair some relation holds for

    def unrelated(self, b: int, i: int, j: int) -> bool:
        """No relation holds between boxes i and j of image b in either direction (stated edges when
        the full truth is unknown)."""
        rel = self.related[b] if self.related is not None else {(s, o) for s, o, _ in self.relations[b]}
        return (i, j) not in rel and (j, i) not in rel

    @property
    def size(self) -> int:
        return len(self.relations)


def bank_classes(strings: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """The concepts the bank's strings name (sorted) and each string's index among them."""
    concepts = [concept_of(s).name for s in strings]
    classes = sorted(set(concepts))
    return classes, np.array([classes.index(c) for c in concepts])


def batches_from_scenes(scenes: Sequence, bank: torch.Tensor, bank_strings: Sequence[str], side: int,
                        batch_size: int = 8) -> list[ModelBatch]:
    """Synthetic scenes (``relate.data.synthetic.make_scene``) resized to ``side`` x ``side`` and
    grouped; each stated relation is an edge. An edge whose concept no bank string names is an error."""
    if len(bank_strings) != bank.shape[0]:
        raise ValueError(f"{len(bank_strings)} bank strings for a bank of {bank.shape[0]} rows")
    if batch_size < 1 or side < 8:
        raise ValueError(f"batch_size must be >= 1 and side >= 8, got {batch_size} and {side}")
    classes, cls = bank_classes(bank_strings)
    out = []
    for start in range(0, len(scenes), batch_size):
        group = scenes[start:start + batch_size]
        n = max(len(s.boxes) for s in group)
        images = torch.zeros(len(group), 3, side, side)
        boxes = torch.zeros(len(group), n, 4)
        valid = torch.zeros(len(group), n, dtype=torch.bool)
        force = torch.zeros(len(group), n * n, dtype=torch.bool)
        rels, cats = [], []
        for b, s in enumerate(group):
            img = torch.from_numpy(np.array(s.image)).float().permute(2, 0, 1)[None] / 255.0
            images[b] = F.interpolate(img, size=(side, side), mode="bilinear", align_corners=False)[0]
            scale = torch.tensor([side / s.width, side / s.height, side / s.width, side / s.height])
            for k, box in enumerate(s.boxes):
                boxes[b, k] = torch.tensor([box["x1"], box["y1"], box["x2"], box["y2"]]) * scale
            valid[b, :len(s.boxes)] = True
            edges = []
            for r in s.relations:
                if r["concept"] not in classes:
                    raise ValueError(f"scene {s.image_id!r}: concept {r['concept']!r} is named by no bank string")
                edges.append((int(r["subject"]), int(r["object"]), classes.index(r["concept"])))
                force[b, r["subject"] * n + r["object"]] = True
            rels.append(edges)
            cats.append([str(box.get("category")) for box in s.boxes])
        related = [set(s.true_concepts()) | {(a, b) for a, b, _ in r} for s, r in zip(group, rels)]
        out.append(ModelBatch(images, boxes, valid, force, bank, torch.from_numpy(cls), rels, cats,
                              [s.image_id for s in group], related))
    return out
