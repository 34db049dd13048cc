"""SGB's saved outputs for tests: BoxList objects pickled under maskrcnn_benchmark's module path.

The stand-in class is registered under that path only while a test saves (monkeypatch), so
loading sees exactly what SGB's files hold and must not need SGB's code.
"""

from __future__ import annotations

import sys
import types

import numpy as np

SGB_MODULES = ("maskrcnn_benchmark", "maskrcnn_benchmark.structures", "maskrcnn_benchmark.structures.bounding_box")


def boxlist_module(monkeypatch):
    """maskrcnn_benchmark.structures.bounding_box.BoxList, present only while the test saves."""
    import torch

    mod = types.ModuleType("maskrcnn_benchmark.structures.bounding_box")

    class BoxList:
        def __init__(self, bbox, size, mode="xyxy"):
            self.bbox, self.size, self.mode = torch.as_tensor(bbox, dtype=torch.float32), size, mode
            self.extra_fields, self.triplet_extra_fields = {}, []

        def add_field(self, k, v):
            self.extra_fields[k] = torch.as_tensor(v)

    BoxList.__module__, BoxList.__qualname__ = mod.__name__, "BoxList"
    mod.BoxList = BoxList
    for name in SGB_MODULES:
        monkeypatch.setitem(sys.modules, name, mod if name == mod.__name__ else types.ModuleType(name))
    return BoxList


def random_boxlists(BoxList, n, seed):
    """n sgdet-like BoxLists over man/horse (3-4 detections, the first two within a pixel of
    man (0, 0, 9, 9) and horse (20, 20, 29, 29), every ordered pair, 2 predicates +
    background), scores in quarters so the ranking has ties."""
    import torch

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        nd = int(rng.integers(3, 5))
        xy = rng.uniform(0, 40, (nd, 2))
        xyxy = np.concatenate([xy, xy + rng.uniform(8, 30, (nd, 2))], 1)
        xyxy[:2] = [[0, 0, 9, 9], [20, 20, 29, 29]] + rng.integers(-1, 2, (2, 4))  # near MAN_HORSE's GT boxes
        b = BoxList(xyxy.tolist(), (100, 100))
        b.add_field("pred_labels", torch.tensor([1, 2] + rng.integers(1, 3, nd - 2).tolist()))
        b.add_field("pred_scores", torch.tensor(rng.integers(1, 5, nd) / 4, dtype=torch.float32))
        b.add_field("rel_pair_idxs", torch.tensor([(i, j) for i in range(nd) for j in range(nd) if i != j]))
        b.add_field("pred_rel_scores", torch.tensor(rng.integers(0, 4, (nd * (nd - 1), 3)) / 4, dtype=torch.float32))
        out.append(b)
    return out
