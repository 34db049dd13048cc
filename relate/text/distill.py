"""Targets and objectives for the text-student distillation (seed 001, B.2.1).

Six terms over a minibatch of strings: relational distillation of pairwise cosines, a small
absolute anchor to a PCA projection of the de-hubbed teacher, a neighbourhood-preservation KL,
an antonym-repulsion hinge on known inverse pairs, a synonym-cohesion hinge, and a softer hinge
that keeps modified spatial forms ("far above") near their base without merging them. A
seventh, ours and off by default, keeps the batch's participation ratio (effective dimension) at
the teacher's on the same rows, which the hinges otherwise fold onto a few directions.
Pure numpy/torch; the Ray Train job in ``train_jobs.distill_text`` drives it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["dehub", "pca_anchor_targets", "split_inverse_pairs", "DistillWeights", "distill_losses",
           "pad_token_outputs"]


def dehub(embeddings: np.ndarray, n_remove: int = 3) -> np.ndarray:
    """Remove the mean and the ``n_remove`` leading principal directions, then renormalise.

    Without this every off-diagonal teacher cosine sits in one high bulk and the relational
    term is dominated by it (B.2.1; all-but-the-top post-processing).
    """
    x = np.asarray(embeddings, dtype=np.float64)
    x = x - x.mean(0, keepdims=True)
    if n_remove > 0:
        _, _, vt = np.linalg.svd(x, full_matrices=False)
        top = vt[:n_remove]
        x = x - (x @ top.T) @ top
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    return x.astype(np.float32)


def pca_anchor_targets(dehubbed: np.ndarray, dim: int) -> np.ndarray:
    """The de-hubbed teacher in its own principal frame, cut or zero-padded to ``dim``, unit rows."""
    x = np.asarray(dehubbed, dtype=np.float64)
    _, _, vt = np.linalg.svd(x - x.mean(0, keepdims=True), full_matrices=False)
    proj = x @ vt[: min(dim, vt.shape[0])].T
    out = np.zeros((x.shape[0], dim), dtype=np.float64)
    out[:, : proj.shape[1]] = proj
    out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
    return out.astype(np.float32)


def split_inverse_pairs(pairs: Sequence[tuple[str, str]], heldout_fraction: float,
                        seed: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Deterministic (trained, held-out) split of inverse pairs; held-out pairs never enter a loss."""
    if not 0.0 <= heldout_fraction < 1.0:
        raise ValueError(f"heldout_fraction must be in [0, 1), got {heldout_fraction}")
    order = np.random.default_rng(seed).permutation(len(pairs))
    n_held = int(round(heldout_fraction * len(pairs)))
    held = sorted(int(i) for i in order[:n_held])
    held_set = set(held)
    return [p for i, p in enumerate(pairs) if i not in held_set], [pairs[i] for i in held]


def pad_token_outputs(chunks: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> tuple[np.ndarray, np.ndarray]:
    """Stack per-batch teacher token outputs into one ``[N, Lmax, D]`` float16 array + bool mask."""
    lmax = max(h.shape[1] for h, _ in chunks)
    hs, ms = [], []
    for h, m in chunks:
        pad = lmax - h.shape[1]
        hs.append(F.pad(h, (0, 0, 0, pad)).to(torch.float16).numpy())
        ms.append(F.pad(m, (0, pad)).to(torch.bool).numpy())
    return np.concatenate(hs), np.concatenate(ms)


@dataclass(frozen=True)
class DistillWeights:
    relational: float = 1.0
    anchor: float = 0.1
    neighbourhood: float = 1.0
    antonym: float = 1.0
    synonym: float = 1.0
    modified: float = 0.5
    kl_temperature: float = 0.1
    antonym_margin: float = 0.0
    synonym_margin: float = 0.75
    modified_margin: float = 0.5
    modified_ceiling: float = 0.95
    spread: float = 0.0


def _pair_cos(emb: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    if pairs.numel() == 0:
        return emb.new_zeros(0)
    return (emb[pairs[:, 0]] * emb[pairs[:, 1]]).sum(-1)


def _mean(x: torch.Tensor) -> torch.Tensor:
    return x.mean() if x.numel() else x.new_zeros(())


def batch_participation_ratio(x: torch.Tensor) -> torch.Tensor:
    """Participation ratio (tr C)^2 / tr(C^2) of the rows' covariance, from the centred Gram
    matrix (same non-zero spectrum), differentiable and without an eigendecomposition."""
    xc = x - x.mean(0, keepdim=True)
    g = xc @ xc.T
    return g.diagonal().sum().pow(2) / g.pow(2).sum().clamp_min(1e-30)


def distill_losses(student: torch.Tensor, teacher: torch.Tensor, anchor: torch.Tensor,
                   inverse: torch.Tensor, synonym: torch.Tensor, modified: torch.Tensor,
                   w: DistillWeights, distrust: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """All seven terms and their weighted sum ``total`` for one batch.

    ``student`` [B, d] and ``teacher`` [B, Dt] are unit rows for the same strings; ``anchor``
    [B, d] the PCA targets; ``inverse``/``synonym``/``modified`` are ``[P, 2]`` row-index pairs
    into the batch (modified pairs are (modified form, base form)). ``distrust`` [B, B] marks
    teacher similarities left out of the relational and neighbourhood terms (e.g. strings of
    two groups declared inverses, whose teacher cosine is the defect being corrected).
    """
    b = student.shape[0]
    off = ~torch.eye(b, dtype=torch.bool, device=student.device)
    if distrust is not None:
        off = off & ~distrust
    s_sim, t_sim = student @ student.T, teacher @ teacher.T
    # Relational distillation: cosines only, so teacher and student dimensions may differ.
    relational = F.mse_loss(s_sim[off], t_sim[off])
    anchor_l = (student - anchor).pow(2).sum(-1).mean()
    # Neighbourhood preservation: row-wise KL(teacher || student) over batch similarities.
    t_logits = (t_sim / w.kl_temperature).masked_fill(~off, float("-inf"))
    s_logits = (s_sim / w.kl_temperature).masked_fill(~off, float("-inf"))
    t_logp, s_logp = F.log_softmax(t_logits, -1), F.log_softmax(s_logits, -1)
    kl = (t_logp.exp() * (t_logp - s_logp)).masked_fill(~off, 0.0).sum(-1).mean()
    antonym = _mean(F.relu(_pair_cos(student, inverse) - w.antonym_margin))
    synonym_l = _mean(F.relu(w.synonym_margin - _pair_cos(student, synonym)))
    mod_cos = _pair_cos(student, modified)
    # Softer hinge: near the base (lower margin) but not merged with it (ceiling).
    modified_l = _mean(F.relu(w.modified_margin - mod_cos) + F.relu(mod_cos - w.modified_ceiling))
    # Spread: the batch's participation ratio kept at the teacher's on the same rows (log ratio
    # squared), so the hinges cannot fold the space onto a few directions (effective dimension).
    spread = (batch_participation_ratio(student).log() - batch_participation_ratio(teacher).log()).pow(2)
    total = (w.relational * relational + w.anchor * anchor_l + w.neighbourhood * kl
             + w.antonym * antonym + w.synonym * synonym_l + w.modified * modified_l + w.spread * spread)
    return {"total": total, "relational": relational, "anchor": anchor_l, "neighbourhood": kl,
            "antonym": antonym, "synonym": synonym_l, "modified": modified_l, "spread": spread}
