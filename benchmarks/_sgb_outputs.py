"""SGB-style sgdet outputs at the field's real size, written shard by shard as SGB's own files are.

Per image: 80 detections (the first 20 within a few pixels of the GT boxes, labels right 85% of
the time, the rest anywhere), every one of their 6,320 ordered pairs, and 51 relation scores per
pair (column 0 the background, then 50 predicates; softmax-like rows, the true predicate of an
annotated pair boosted 60% of the time). Each shard is ``torch.save({"predictions": [BoxList, ...]})``
with BoxList objects pickled under maskrcnn_benchmark's module path, exactly what
``eval_jobs.convert --from sgb`` reads from a folder of shards; the ground truth is a corpus
Parquet (20 GT boxes and 8 relations per image over 150 categories and 50 predicates).
"""

from __future__ import annotations

import contextlib
import json
import sys
import types
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow.parquet as pq

from relate.schema import CORPUS_SCHEMA, to_table

__all__ = ["N_DET", "N_PAIRS", "N_COLS", "N_PRED", "write_sgb_outputs", "load_sgb_shard"]

N_DET, N_GT, N_REL, N_PRED, N_CAT = 80, 20, 8, 50, 150
N_PAIRS, N_COLS = N_DET * (N_DET - 1), N_PRED + 1
_MODULE = "maskrcnn_benchmark.structures.bounding_box"


@contextlib.contextmanager
def _boxlist_class() -> Iterator[type]:
    """A BoxList whose pickles name SGB's class, registered only while the shards are saved."""
    import torch

    mod = types.ModuleType(_MODULE)

    class BoxList:
        def __init__(self, bbox, size) -> None:
            self.bbox, self.size, self.mode = torch.as_tensor(bbox), size, "xyxy"
            self.extra_fields: dict = {}
            self.triplet_extra_fields: list = []

    BoxList.__module__, BoxList.__qualname__ = _MODULE, "BoxList"
    mod.BoxList = BoxList
    names = ("maskrcnn_benchmark", "maskrcnn_benchmark.structures", _MODULE)
    saved = {n: sys.modules.get(n) for n in names}
    for n in names:
        sys.modules[n] = mod if n == _MODULE else types.ModuleType(n)
    try:
        yield BoxList
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m


def write_sgb_outputs(folder: str | Path, n_images: int, shard: int = 50, seed: int = 0) -> dict[str, str]:
    """Write ``n_images`` of outputs as ``folder/shards/part_<k>.pytorch`` plus the dicts JSON and
    the ground-truth corpus; never more than one shard in memory. Returns the three paths."""
    import torch

    root = Path(folder)
    (root / "shards").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    cats = [f"cat_{i:03d}" for i in range(N_CAT)]
    preds = [f"pred_{i:02d}" for i in range(N_PRED)]
    dicts = root / "dicts.json"
    dicts.write_text(json.dumps({"idx_to_label": {str(i + 1): c for i, c in enumerate(cats)},
                                 "idx_to_predicate": {str(i + 1): p for i, p in enumerate(preds)}}))
    pairs = np.array([(a, b) for a in range(N_DET) for b in range(N_DET) if a != b])
    pair_of = {(int(a), int(b)): j for j, (a, b) in enumerate(pairs)}
    corpus_rows = []
    with _boxlist_class() as BoxList:
        for k, lo in enumerate(range(0, n_images, shard)):
            out = []
            for i in range(lo, min(lo + shard, n_images)):
                xy = rng.uniform(0, 500, (N_GT, 2))
                gt = np.concatenate([xy, xy + 20 + rng.uniform(0, 100, (N_GT, 2))], 1)
                gt_cat = rng.integers(0, N_CAT, N_GT)
                sub = rng.choice(N_GT, N_REL)
                obj = (sub + 1 + rng.integers(0, N_GT - 1, N_REL)) % N_GT
                rel_pred = rng.integers(0, N_PRED, N_REL)
                corpus_rows.append(_corpus_row(f"img{i:06d}", gt, [cats[c] for c in gt_cat], sub, obj,
                                               [preds[p] for p in rel_pred]))
                xy = rng.uniform(0, 500, (N_DET, 2))
                det = np.concatenate([xy, xy + 20 + rng.uniform(0, 100, (N_DET, 2))], 1)
                det[:N_GT] = gt + rng.normal(0, 3, (N_GT, 4))
                det[:, 2:] = np.maximum(det[:, 2:], det[:, :2] + 1)
                label = rng.integers(0, N_CAT, N_DET)
                label[:N_GT] = np.where(rng.random(N_GT) < .85, gt_cat, label[:N_GT])
                scores = rng.random((N_PAIRS, N_COLS), dtype=np.float32) ** 3
                boost = rng.random(N_REL) < .6
                rows = [pair_of[(int(s), int(o))] for s, o in zip(sub, obj)]
                scores[rows, rel_pred + 1] += np.where(boost, 8.0, 0.0).astype(np.float32)
                scores /= scores.sum(1, keepdims=True)
                b = BoxList(det.astype(np.float32), (640, 480))
                b.extra_fields = {"pred_labels": torch.from_numpy(label + 1),
                                  "pred_scores": torch.from_numpy(rng.uniform(.3, 1, N_DET).astype(np.float32)),
                                  "rel_pair_idxs": torch.from_numpy(pairs), "pred_rel_scores": torch.from_numpy(scores)}
                out.append(b)
            torch.save({"predictions": out}, root / "shards" / f"part_{k}.pytorch")
    corpus = root / "corpus.parquet"
    pq.write_table(to_table(corpus_rows, CORPUS_SCHEMA), corpus)
    return {"shards": str(root / "shards"), "dicts": str(dicts), "corpus": str(corpus)}


def _corpus_row(iid: str, boxes: np.ndarray, cats: list[str], sub, obj, preds: list[str]) -> dict:
    return {"image_id": iid, "uri": f"mem://{iid}", "width": 640, "height": 480, "source": "bench", "split": "test",
            "boxes": [{"x1": float(a), "y1": float(b), "x2": float(c), "y2": float(d), "category": cat,
                       "is_person": False, "is_body_part": False} for (a, b, c, d), cat in zip(boxes.tolist(), cats)],
            "relations": [{"subject": int(s), "object": int(o), "predicate": p, "pass": "human", "gate": "kept",
                           "score": None} for s, o, p in zip(sub, obj, preds)]}


def load_sgb_shard(path: str | Path) -> list:
    """One shard's BoxLists as SGB itself loads its output (plain ``torch.load`` with its BoxList
    class importable); for the reference timing only, on files this module wrote."""
    import torch

    with _boxlist_class():
        return torch.load(path, map_location="cpu", weights_only=False)["predictions"]
