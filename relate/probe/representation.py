"""Representation probes of the relation model (seed 001, § 7.3 and App. F).

* ``linear_cka``: linear centred kernel alignment (Kornblith et al., 2019) between two feature
  sets over the same rows, in its feature-space form ||Y_c^T X_c||_F^2 / (||X_c^T X_c||_F ||Y_c^T Y_c||_F).
  1 for identical representations; invariant to orthogonal transforms and isotropic scaling.
* ``model_features``: the features of one model by depth, read by forward hooks (every backbone
  block that reaches the output, then the pair encoder, each pair-transformer layer and the pair
  vector the head scores), on ground-truth pairs forced through the sampler so that two checkpoints
  fed the same batch give row-aligned features.
* ``cka_by_depth``: CKA of two checkpoints' features at every shared depth.
* ``nn1_retrieval``: cross-image nearest-neighbour retrieval of a label (object class, predicate)
  from a feature (the interaction-region feature v_contact), with two chance levels.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from relate.probe.model_inputs import ModelBatch

__all__ = ["linear_cka", "model_features", "cka_by_depth", "nn1_retrieval", "Retrieval", "PairFeatures", "capture",
           "PatchSelectivity", "patch_selectivity", "model_patch_selectivity",
           "forced_rows"]


def linear_cka(x: np.ndarray, y: np.ndarray) -> float:
    """Linear CKA between (n, p) and (n, q) features of the same n rows (float64 inside)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2:
        raise ValueError(f"linear_cka needs two 2-D feature matrices, got shapes {x.shape} and {y.shape}")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"linear_cka needs the same rows in both sets, got {x.shape[0]} and {y.shape[0]}")
    if x.shape[0] < 2:
        raise ValueError(f"linear_cka needs at least 2 rows, got {x.shape[0]}")
    x = x - x.mean(0)
    y = y - y.mean(0)
    den = np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y)
    if den == 0:
        raise ValueError("linear_cka is undefined for a constant feature set (zero variance after centring)")
    return float(np.linalg.norm(y.T @ x) ** 2 / den)


@dataclass(frozen=True)
class PairFeatures:
    """Features of one model on one batch set: depth name -> (rows, dim), plus what the rows are."""

    depths: dict[str, np.ndarray]
    contact: np.ndarray  # (pairs, d) interaction-region feature v_contact of each ground-truth pair
    pair_image: np.ndarray  # (pairs,) image index of each ground-truth pair
    pair_predicate: np.ndarray  # (pairs,) ground-truth predicate index
    pair_object_class: np.ndarray  # (pairs,) object-end category (str)


@contextmanager
def capture(outputs: Mapping[str, nn.Module],
            inputs: Mapping[str, nn.Module] | None = None) -> Iterator[dict[str, list]]:
    """Record each named module's output (``outputs``) or first positional input (``inputs``) on
    every call, into the yielded dict of lists; the hooks are removed on exit."""
    store: dict[str, list] = {}
    handles = []
    for name, m in outputs.items():
        handles.append(m.register_forward_hook(lambda _m, _a, out, name=name: store.setdefault(name, []).append(out)))
    for name, m in (inputs or {}).items():
        handles.append(m.register_forward_pre_hook(lambda _m, args, name=name: store.setdefault(name, []).append(args[0])))
    try:
        yield store
    finally:
        for h in handles:
            h.remove()


def _depth_modules(model: nn.Module) -> dict[str, nn.Module]:
    mods: dict[str, nn.Module] = {f"backbone.block{i}": b for i, b in enumerate(model.backbone.vit.blocks)}
    mods["pair.encoder"] = model.pair_enc
    for i, layer in enumerate(model.pair_tf.layers):
        mods[f"pair.layer{i}"] = layer
    return mods


def forced_rows(pairs: torch.Tensor, valid: torch.Tensor,
                gt: Sequence[Sequence[tuple[int, int, int]]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(batch index, kept-pair index) of each ground-truth pair among the model's kept pairs, in batch order."""
    bi, ki = [], []
    for b, rels in enumerate(gt):
        where = {(s, o): k for k, (s, o) in enumerate(pairs[b].tolist()) if valid[b, k]}
        for s, o, _p in rels:
            if (s, o) not in where:
                raise RuntimeError(f"ground-truth pair ({s}, {o}) of batch image {b} was not kept by the sampler")
            bi.append(b); ki.append(where[(s, o)])
    return torch.tensor(bi, dtype=torch.long), torch.tensor(ki, dtype=torch.long)


@torch.no_grad()
def model_features(model: nn.Module, batches: Sequence[ModelBatch], max_rows: int = 4096, seed: int = 0) -> PairFeatures:
    """Features by depth of ``model`` (put in eval mode) on ``batches``. Backbone depths are all
    tokens of every image (rows subsampled to ``max_rows`` with ``seed``: the same rows for every
    model given the same batches); pair depths and the head input are the ground-truth pairs' rows."""
    model.eval()
    depth: dict[str, list[np.ndarray]] = {}
    contact, img, pred, ocls = [], [], [], []
    offset = 0
    for batch in batches:
        with capture({**_depth_modules(model), "contact": model.pair_pool}, {"head.input": model.head}) as store:
            out = model(batch.images, batch.boxes, batch.box_valid, batch.bank, force=batch.force)
        bi, ki = forced_rows(out.pairs, out.sampled.valid, batch.relations)
        for name, (t, *_) in store.items():
            if name.startswith("backbone."):
                depth.setdefault(name, []).append(t.flatten(0, -2).float().numpy())
            elif name == "contact":
                contact.append(t[1][bi, ki].float().numpy())  # pair_pool returns (v_union, v_contact)
            else:
                depth.setdefault(name, []).append(t[bi, ki].float().numpy())
        for b, rels in enumerate(batch.relations):
            for _s, o, p in rels:
                img.append(offset + b); pred.append(p); ocls.append(batch.categories[b][o])
        offset += len(batch.relations)
    feats = {k: np.concatenate(v) for k, v in depth.items()}
    n_tok = {v.shape[0] for k, v in feats.items() if k.startswith("backbone.")}
    if n_tok and max(n_tok) > max_rows:
        keep = np.sort(np.random.default_rng(seed).permutation(max(n_tok))[:max_rows])
        feats.update({k: v[keep] for k, v in feats.items() if k.startswith("backbone.")})
    return PairFeatures(feats, np.concatenate(contact), np.array(img), np.array(pred), np.array(ocls, dtype=object))


def cka_by_depth(a: PairFeatures, b: PairFeatures) -> dict[str, float]:
    """Linear CKA at every depth both feature sets have (row-aligned: same batches, same order)."""
    shared = [k for k in a.depths if k in b.depths]
    if not shared:
        raise ValueError(f"no shared depth between {sorted(a.depths)} and {sorted(b.depths)}")
    return {k: linear_cka(a.depths[k], b.depths[k]) for k in shared}


@dataclass(frozen=True)
class Retrieval:
    """Cross-image 1-NN accuracy and its chance levels (majority-class share; the agreement of two
    independent draws from the label distribution, sum_c p_c^2)."""

    accuracy: float
    chance_majority: float
    chance_random: float
    n: int
    classes: int


def nn1_retrieval(features: np.ndarray, labels: Sequence, groups: Sequence) -> Retrieval:
    """Each row's label predicted by its nearest row (cosine similarity) among the rows of the other
    groups (images): cross-image retrieval, so a row never finds its own image's features."""
    f = np.asarray(features, dtype=np.float64)
    labels, groups = np.asarray(labels), np.asarray(groups)
    if f.ndim != 2 or len(f) != len(labels) or len(f) != len(groups):
        raise ValueError(f"nn1_retrieval needs (n, d) features with n labels and n groups, got {f.shape}, "
                         f"{len(labels)} labels, {len(groups)} groups")
    if len(np.unique(groups)) < 2:
        raise ValueError("cross-image retrieval needs rows from at least two images")
    f = f / np.maximum(np.linalg.norm(f, axis=1, keepdims=True), 1e-12)
    sim = f @ f.T
    sim[groups[:, None] == groups[None, :]] = -np.inf
    hits = labels[sim.argmax(1)] == labels
    _, counts = np.unique(labels, return_counts=True)
    p = counts / counts.sum()
    return Retrieval(float(hits.mean()), float(p.max()), float((p ** 2).sum()), len(f), len(counts))


@dataclass(frozen=True)
class PatchSelectivity:
    """Patch-similarity probe (App. F, Table 28, left block). Cosines between the patches of a query
    (subject) box and those of another region, after subtracting each image's mean token:
    ``class_selectivity`` = mean sim(object of the subject's class) - mean sim(unrelated object of
    another class); ``relation_selectivity`` = mean sim(relation partner) - the same unrelated mean;
    ``partner_win_rate`` = share of queries whose partner is more similar than the mean of the
    unrelated objects of the partner's own class (chance 0.5). Each margin averages over the queries
    that have both of its regions (``*_queries``)."""

    class_selectivity: float
    relation_selectivity: float
    partner_win_rate: float
    class_queries: int
    relation_queries: int
    win_queries: int


def _cells_in(box: np.ndarray, h: int, w: int, side: float) -> np.ndarray:
    """Flat indices of the (h, w) grid cells whose centres fall in a pixel box (the nearest cell if none)."""
    ys, xs = (np.arange(h) + 0.5) * side / h, (np.arange(w) + 0.5) * side / w
    iy = np.flatnonzero((ys >= box[1]) & (ys <= box[3]))
    ix = np.flatnonzero((xs >= box[0]) & (xs <= box[2]))
    if len(iy) == 0:
        iy = [int(np.clip((box[1] + box[3]) / 2 * h / side, 0, h - 1))]
    if len(ix) == 0:
        ix = [int(np.clip((box[0] + box[2]) / 2 * w / side, 0, w - 1))]
    return (np.asarray(iy)[:, None] * w + np.asarray(ix)[None, :]).ravel()


def _region_sim(tok: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    return float((tok[a] @ tok[b].T).mean())


def patch_selectivity(maps: Sequence[np.ndarray], batches_meta: Sequence[tuple[np.ndarray, list[str], list, object]],
                      side: float) -> PatchSelectivity:
    """``maps``: per image a (C, h, w) dense feature map; ``batches_meta``: per image (pixel boxes (N, 4),
    categories, stated edges (s, o, class), unrelated(i, j) -> bool)."""
    cls_m, rel_m, wins = [], [], []
    for fmap, (boxes, cats, edges, unrelated) in zip(maps, batches_meta):
        c, h, w = fmap.shape
        tok = fmap.reshape(c, h * w).T.astype(np.float64)
        tok = tok - tok.mean(0)  # per-image mean-token subtraction
        tok = tok / np.maximum(np.linalg.norm(tok, axis=1, keepdims=True), 1e-12)
        cells = [_cells_in(b, h, w, side) for b in boxes]
        n = len(boxes)
        for s, o, _p in edges:
            q = cells[s]
            others = [j for j in range(n) if j not in (s, o)]
            unrel = [j for j in others if unrelated(s, j) and cats[j] != cats[s]]
            if not unrel:
                continue
            base = np.mean([_region_sim(tok, q, cells[j]) for j in unrel])
            same = [j for j in others if cats[j] == cats[s]]
            if same:
                cls_m.append(np.mean([_region_sim(tok, q, cells[j]) for j in same]) - base)
            partner = _region_sim(tok, q, cells[o])
            rel_m.append(partner - base)
            rivals = [j for j in others if cats[j] == cats[o] and unrelated(s, j)]
            if rivals:
                wins.append(float(partner > np.mean([_region_sim(tok, q, cells[j]) for j in rivals])))
    mean = lambda v: float(np.mean(v)) if v else float("nan")  # noqa: E731
    return PatchSelectivity(mean(cls_m), mean(rel_m), mean(wins), len(cls_m), len(rel_m), len(wins))


@torch.no_grad()
def model_patch_selectivity(model: nn.Module, batches: Sequence[ModelBatch]) -> PatchSelectivity:
    """``patch_selectivity`` on the dense map the relation model reads (the backbone's fused taps)."""
    model.eval()
    maps, meta = [], []
    for batch in batches:
        fmap = model.backbone(model.preprocessing.normalise(batch.images)).float().numpy()
        for b in range(batch.size):
            n = int(batch.box_valid[b].sum())
            maps.append(fmap[b])
            meta.append((batch.boxes[b, :n].numpy(), batch.categories[b], batch.relations[b],
                         lambda i, j, b=b, batch=batch: batch.unrelated(b, i, j)))
    return patch_selectivity(maps, meta, float(batches[0].images.shape[-1]))
