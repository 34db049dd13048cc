"""Intervals of the truth figures (``relate.metrics.truth``) over training seeds and test images together.

A learning figure varies with the run's seed and with the images it is scored on. Three seeds
scored on one fixed image set, with a Student-t interval over the seeds, leave the second out
(and a t interval runs past 1.0 when the seeds agree near the top). Here each of ``B`` bootstrap
replicates draws the test images with replacement, once for all seeds (the seeds share one test
set, so an image that is hard for one is hard for all), and the seeds with replacement; the
replicate's figure is the mean over the drawn seeds of each seed's figure on the drawn images.
The interval is the percentile interval of the replicates, so it stays inside the figure's range
([0, 1] for AP and precision). The estimate is the plain mean over seeds on all images.

A seed's cells are kept as a :class:`TruthKit`, so scoring and resampling are separate steps and
a report can be redone from saved kits. AP under image weights is scikit-learn's
``average_precision_score`` with ``sample_weight`` (``relate.metrics.resample.ap_draws``, checked
against it draw by draw there); top-k precision is a weighted mean of the images' own values.
A paired difference (two arms on the same images, seed i of one against seed i of the other)
uses the same draws for both arms, so image difficulty cancels in it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from relate.metrics.bootstrap import resample_weights
from relate.metrics.resample import LabelledKit, ap_draws, percentile_interval
from relate.metrics.truth import ImageCells, _dense, _topk

__all__ = ["TruthKit", "truth_kit", "SeedImageInterval", "seed_image_intervals", "paired_gap_intervals",
           "save_kit", "load_kit", "TOPK"]

TOPK = "top{k}_precision"
_CHUNK_CELLS = 20_000_000  # draws x cells held at once by one AP computation (float64: 160 MB)


@dataclass(frozen=True)
class TruthKit:
    """One seed's scores on one image set: per family its cells (image index, score, label), and per
    image its top-k precision (NaN for an image with no truth)."""

    n_images: int
    families: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
    topk: np.ndarray
    k: int

    def figures(self) -> dict[str, float]:
        """The figures on all images (what ``score_against_truth`` reports), keyed as the intervals are."""
        w = np.ones((1, self.n_images))
        return {name: float(v[0]) for name, v in _draws(self, w).items()}


def truth_kit(images: Iterable[ImageCells], concepts: Sequence[str], family_of: Mapping[str, str],
              k: int = 10) -> TruthKit:
    """Collect one seed's cells the way ``score_against_truth`` pools them (every ordered pair and
    concept of each image; a pair the sampler dropped scores below every scored one)."""
    concepts = list(concepts)
    fams = list(dict.fromkeys(family_of[c] for c in concepts))
    cols = {f: [j for j, c in enumerate(concepts) if family_of[c] == f] for f in fams}
    parts: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {f: [] for f in fams}
    topk = []
    for i, cells in enumerate(images):
        s, lab, _ = _dense(cells, concepts)
        for f in fams:
            fs, fl = s[:, cols[f]].reshape(-1), lab[:, cols[f]].reshape(-1)
            parts[f].append((np.full(fs.size, i, np.int32), fs.astype(np.float32), fl))
        t = _topk(s, lab, k)
        topk.append(np.nan if t is None else t)
    n = len(topk)
    if n == 0:
        raise ValueError("no images to collect")
    families = {}
    for f, p in parts.items():
        img, sc, lab = (np.concatenate([x[j] for x in p]) for j in range(3))
        finite = np.isfinite(sc)
        floor = (sc[finite].min() - 1.0) if finite.any() else 0.0  # as relate.metrics.truth._ap
        families[f] = (img, np.where(finite, sc, floor).astype(np.float32), lab)
    return TruthKit(n, families, np.asarray(topk, np.float64), k)


def _draws(kit: TruthKit, W: np.ndarray) -> dict[str, np.ndarray]:
    """Every figure of ``kit`` under each row of image weights ``W`` (B, n): family APs and top-k."""
    out: dict[str, np.ndarray] = {}
    for f, (img, sc, lab) in kit.families.items():
        if not lab.any():
            out[f"family/{f}_ap"] = np.full(W.shape[0], np.nan)
            continue
        lk = LabelledKit(img.astype(np.int64), np.zeros(img.size, np.int64), lab, sc.astype(np.float64), (f,))
        step = max(1, _CHUNK_CELLS // max(1, img.size))
        out[f"family/{f}_ap"] = np.concatenate([ap_draws(lk, W[i:i + step], [0])[:, 0]
                                                for i in range(0, W.shape[0], step)])
    has = np.isfinite(kit.topk)
    v = np.where(has, kit.topk, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        out[TOPK.format(k=kit.k)] = (W @ v) / (W @ has.astype(np.float64))
    return out


@dataclass(frozen=True)
class SeedImageInterval:
    """A figure's mean over seeds on all images and its percentile interval over seeds and images."""

    mean: float
    low: float
    high: float
    per_seed: tuple[float, ...]

    def as_dict(self) -> dict:
        return {"mean": self.mean, "lo": self.low, "hi": self.high, "per_seed": list(self.per_seed)}


def _check(kits: Sequence[TruthKit]) -> int:
    if not kits:
        raise ValueError("no seeds to summarise")
    n = {k.n_images for k in kits}
    if len(n) != 1:
        raise ValueError(f"every seed must be scored on the same images; image counts differ: {sorted(n)}")
    return n.pop()


def _replicates(kits_by_arm: Sequence[Sequence[TruthKit]], resamples: int, seed: int):
    """Per arm, per figure: the (B,) replicate values (mean over drawn seeds on drawn images) and the
    per-seed figures on all images. One image draw and one seed draw per replicate, shared by the arms."""
    n = _check([k for kits in kits_by_arm for k in kits])
    seeds = {len(kits) for kits in kits_by_arm}
    if len(seeds) != 1:
        raise ValueError(f"paired arms need the same number of seeds, got {sorted(seeds)}")
    S = seeds.pop()
    W = resample_weights(n, resamples, seed)
    pick = np.random.default_rng([seed, 1]).integers(0, S, size=(resamples, S))
    out = []
    for kits in kits_by_arm:
        per_seed = [_draws(k, W) for k in kits]
        full = [k.figures() for k in kits]
        arm = {}
        for name in per_seed[0]:
            D = np.stack([d[name] for d in per_seed], axis=1)  # (B, S)
            rep = np.take_along_axis(D, pick, axis=1)
            with warnings.catch_warnings():  # a draw without a positive of the family is NaN, left out
                warnings.simplefilter("ignore", RuntimeWarning)
                arm[name] = (np.nanmean(rep, axis=1), tuple(f[name] for f in full))
        out.append(arm)
    return out


def seed_image_intervals(kits: Sequence[TruthKit], resamples: int = 1000, seed: int = 0,
                         confidence: float = 0.95) -> dict[str, SeedImageInterval]:
    """Figure -> mean over seeds (all images) and its ``confidence`` interval over seeds and images."""
    (arm,) = _replicates([kits], resamples, seed)
    out = {}
    for name, (rep, per_seed) in arm.items():
        lo, hi = percentile_interval(rep, confidence)
        out[name] = SeedImageInterval(float(np.nanmean(per_seed)) if np.isfinite(per_seed).any() else float("nan"),
                                      lo, hi, per_seed)
    return out


def paired_gap_intervals(kits_a: Sequence[TruthKit], kits_b: Sequence[TruthKit], resamples: int = 1000,
                         seed: int = 0, confidence: float = 0.95) -> dict[str, SeedImageInterval]:
    """Figure -> mean of (b - a) over paired seeds (seed i of each arm), on the same images, and its
    interval under draws shared by both arms."""
    a, b = _replicates([kits_a, kits_b], resamples, seed)
    out = {}
    for name in a:
        diff = b[name][0] - a[name][0]
        lo, hi = percentile_interval(diff, confidence)
        per = tuple(y - x for x, y in zip(a[name][1], b[name][1]))
        out[name] = SeedImageInterval(float(np.nanmean(per)) if np.isfinite(per).any() else float("nan"), lo, hi, per)
    return out


def save_kit(kit: TruthKit, path: str | Path) -> None:
    """Write a kit as one compressed .npz (atomically: a reader never sees half a file)."""
    path = Path(path)
    arrays = {"n_images": np.array(kit.n_images), "k": np.array(kit.k), "topk": kit.topk,
              "families": np.array(list(kit.families), dtype=str)}
    for i, (img, sc, lab) in enumerate(kit.families.values()):
        arrays.update({f"img{i}": img, f"score{i}": sc, f"label{i}": lab})
    tmp = path.with_name(f".{path.name}.tmp.npz")
    np.savez_compressed(tmp, **arrays)
    tmp.replace(path)


def load_kit(path: str | Path) -> TruthKit:
    with np.load(path) as z:
        fams = [str(f) for f in z["families"]]
        families = {f: (z[f"img{i}"], z[f"score{i}"], z[f"label{i}"]) for i, f in enumerate(fams)}
        return TruthKit(int(z["n_images"]), families, z["topk"], int(z["k"]))
