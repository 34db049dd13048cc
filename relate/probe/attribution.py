"""Where the relation logit comes from (seed 001, § 7.4, Table 10): a lesion ladder and an exact
decomposition of the semantic logit.

**Lesion ladder.** Each rung removes one input channel, re-runs inference on the ground-truth pairs
(forced through the sampler) and reports top-1 accuracy over edges (micro) and averaged over
predicate classes (macro), as a relative change from the intact model:

* ``object_features``: the subject and object region features v_s, v_o are zeroed where the pair
  encoder reads them. The paper's rung removes a separate path by which object features address the
  vocabulary directly; this architecture has no such path, so the nearest channel is lesioned.
* ``geometry``: the 19 box-geometry features g_ij are zeroed wherever the geometry MLP reads them
  (pair encoder and spatial branch).
* ``pixels``: every image is scored on the pixels of the next image in its batch (boxes unchanged).
* ``all_inputs``: the three above together, with the pixels a constant grey.

**Decomposition.** The semantic logit of pair (i, j) and predicate p is
l_sem = tau (1 - alpha_p) cos(z_sem, e_p) with z_sem = W2 GELU(W1 x + b1) + b2 (normalised) and
x the pair vector the head reads. That map is not additive in its inputs, so we use the exact
decomposition at the given input with every normaliser and activation gate frozen at its value:
GELU(a) = a Phi(a) with Phi(a) held, ||z|| held, and the pair encoder's LayerNorm scale held. Then
l_sem is linear in x, x = LN(W [v_s; v_o; v_u; v_c; MLP(g)] + b) + cues + context, and the parts

    subject, object, union, contact, geometry   (each through its block of W)
    encoder_bias                                 (b and the LayerNorm shift)
    cues                                         (occlusion / region-pixel features, when built)
    context                                      (what the pair transformer and the deformable read add)
    head_bias                                    (b1 and b2)

sum to l_sem up to rounding (``max_residual``). Each part's variance share is Cov(part, l_sem) /
Var(l_sem) over all (pair, predicate) cells; the shares sum to 1 exactly. ``pair_context`` is the
sum of every share but subject, object and the two bias terms.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from relate.probe.model_inputs import ModelBatch
from relate.probe.representation import capture, forced_rows

__all__ = ["LESIONS", "LesionResult", "Accuracy", "edge_accuracy", "edge_predictions", "lesion_ladder", "Decomposition",
           "decompose_semantic_logit", "variance_shares", "PARTS"]

LESIONS = ("object_features", "geometry", "pixels", "all_inputs")
PARTS = ("subject", "object", "union", "contact", "geometry", "encoder_bias", "cues", "context", "head_bias")


@dataclass(frozen=True)
class Accuracy:
    micro: float
    macro: float
    edges: int
    classes: int


@dataclass(frozen=True)
class LesionResult:
    """Accuracy of the intact model and of each lesion, with relative changes (fractions)."""

    full: Accuracy
    lesions: dict[str, Accuracy]

    def rows(self) -> list[dict]:
        out = [dict(channel_removed="none (full model)", micro_acc=self.full.micro, macro_acc=self.full.macro,
                    micro_change=0.0, macro_change=0.0, edges=self.full.edges)]
        for name, a in self.lesions.items():
            out.append(dict(channel_removed=name, micro_acc=a.micro, macro_acc=a.macro,
                            micro_change=_rel(a.micro, self.full.micro), macro_change=_rel(a.macro, self.full.macro),
                            edges=a.edges))
        return out


def _rel(x: float, ref: float) -> float:
    return (x - ref) / ref if ref > 0 else float("nan")


@contextmanager
def _zero_args(module: nn.Module, positions: Sequence[int]) -> Iterator[None]:
    def pre(_m, args):
        return tuple(torch.zeros_like(a) if i in positions else a for i, a in enumerate(args))
    h = module.register_forward_pre_hook(pre)
    try:
        yield
    finally:
        h.remove()


def _inputs(batch: ModelBatch, lesion: str | None) -> torch.Tensor:
    if lesion == "pixels":
        if batch.size < 2:
            raise ValueError("the pixel lesion borrows another image of the batch: batches need at least 2 images")
        return batch.images.roll(1, dims=0)
    if lesion == "all_inputs":
        return torch.full_like(batch.images, 0.5)
    return batch.images


@contextmanager
def _lesioned(model: nn.Module, lesion: str | None) -> Iterator[None]:
    if lesion is not None and lesion not in LESIONS:
        raise ValueError(f"unknown lesion {lesion!r}; valid: {list(LESIONS)}")
    with ExitStack() as stack:
        if lesion in ("object_features", "all_inputs"):
            stack.enter_context(_zero_args(model.pair_enc, (0, 1)))  # PairEncoder(v_s, v_o, v_u, v_c, g)
        if lesion in ("geometry", "all_inputs"):
            stack.enter_context(_zero_args(model.pair_enc.geometry, (0,)))
        yield


@torch.no_grad()
def edge_predictions(model: nn.Module, batches: Sequence[ModelBatch], lesion: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(predicted class, true class) of every ground-truth edge."""
    model.eval()
    pred, true = [], []
    with _lesioned(model, lesion):
        for batch in batches:
            out = model(_inputs(batch, lesion), batch.boxes, batch.box_valid, batch.bank, force=batch.force)
            bi, ki = forced_rows(out.pairs, out.sampled.valid, batch.relations)
            top = out.l_pred[bi, ki].argmax(-1)
            pred.append(batch.bank_class[top].numpy())
            true.append(np.array([p for rels in batch.relations for _s, _o, p in rels], dtype=np.int64))
    return np.concatenate(pred), np.concatenate(true)


def edge_accuracy(pred: np.ndarray, true: np.ndarray) -> Accuracy:
    """Top-1 accuracy over edges (micro) and the mean of per-class accuracies (macro)."""
    if len(true) == 0:
        raise ValueError("accuracy over ground-truth pairs needs at least one edge, got none")
    hit = pred == true
    classes = np.unique(true)
    return Accuracy(float(hit.mean()), float(np.mean([hit[true == c].mean() for c in classes])), len(true), len(classes))


def lesion_ladder(model: nn.Module, batches: Sequence[ModelBatch], lesions: Sequence[str] = LESIONS) -> LesionResult:
    """Table 10's upper block for ``model`` on the ground-truth pairs of ``batches``."""
    full = edge_accuracy(*edge_predictions(model, batches, None))
    return LesionResult(full, {name: edge_accuracy(*edge_predictions(model, batches, name)) for name in lesions})


@dataclass(frozen=True)
class Decomposition:
    """Parts of the semantic logit over every (kept ground-truth pair, predicate) cell."""

    logit: np.ndarray  # (cells,) l_sem as the model computes it
    parts: dict[str, np.ndarray]  # name -> (cells,)
    max_residual: float  # max |sum(parts) - logit|

    def shares(self) -> dict[str, float]:
        return variance_shares(self.parts, self.logit)


def variance_shares(parts: dict[str, np.ndarray], logit: np.ndarray) -> dict[str, float]:
    """Cov(part, logit) / Var(logit) per part: they sum to 1 when the parts sum to the logit."""
    lc = logit - logit.mean()
    var = float(lc @ lc)
    if var == 0:
        raise ValueError("the logit has zero variance over the cells: nothing to decompose")
    return {k: float((v - v.mean()) @ lc) / var for k, v in parts.items()}


def _gelu_gate(a: torch.Tensor, gelu: nn.Module) -> torch.Tensor:
    """Phi(a) such that gelu(a) = a * Phi(a), whatever GELU approximation the module uses."""
    g = gelu(a)
    safe = torch.where(a == 0, torch.ones_like(a), a)
    return torch.where(a == 0, torch.full_like(a, 0.5), g / safe)


@torch.no_grad()
def decompose_semantic_logit(model: nn.Module, batches: Sequence[ModelBatch]) -> Decomposition:
    """The exact frozen-normaliser decomposition of l_sem on the ground-truth pairs of ``batches``
    (model in eval mode, so dropout is the identity)."""
    model.eval()
    head, enc = model.head, model.pair_enc
    lin1, gelu, _drop, lin2 = head.semantic
    proj, ln = enc.proj[0], enc.proj[2]
    if not isinstance(gelu, nn.GELU) or not isinstance(ln, nn.LayerNorm):
        raise TypeError("decompose_semantic_logit expects semantic = Linear, GELU, Dropout, Linear and a "
                        f"pair encoder ending in LayerNorm; got {type(gelu).__name__} and {type(ln).__name__}")
    logits, parts = [], {k: [] for k in PARTS}
    for batch in batches:
        with capture({"enc_out": enc}, {"tf_in": model.pair_tf}) as store, \
                _record_args(enc) as enc_args, _record_args(head) as head_args:
            out = model(batch.images, batch.boxes, batch.box_valid, batch.bank, force=batch.force)
        bi, ki = forced_rows(out.pairs, out.sampled.valid, batch.relations)
        v_s, v_o, v_u, v_c, g = (a[bi, ki] for a in enc_args[0])
        x_head = head_args[0][0][bi, ki]
        enc_out, tf_in = store["enc_out"][0][bi, ki], store["tf_in"][0][bi, ki]
        # pair encoder: LN(y), y = sum_k W_k part_k + b; with sigma frozen LN is affine in y
        d = v_s.shape[-1]
        inputs = {"subject": v_s, "object": v_o, "union": v_u, "contact": v_c, "geometry": enc.geometry(g)}
        y = proj(torch.cat(list(inputs.values()), dim=-1))
        sigma = (y.var(-1, unbiased=False, keepdim=True) + ln.eps).sqrt()
        x_parts = {}
        for k, (name, part) in enumerate(inputs.items()):
            yk = part @ proj.weight[:, k * d:(k + 1) * d].T
            x_parts[name] = ln.weight * (yk - yk.mean(-1, keepdim=True)) / sigma
        b = proj.bias
        x_parts["encoder_bias"] = ln.weight * (b - b.mean()) / sigma + ln.bias
        x_parts["cues"] = tf_in - enc_out
        x_parts["context"] = x_head - tf_in
        # semantic MLP with the GELU gate and the output norm frozen
        a = lin1(x_head)
        gate = _gelu_gate(a, gelu)
        u = lin2(gelu(a))
        norm = u.norm(dim=-1, keepdim=True).clamp(min=1e-12)  # F.normalize's eps
        alpha = head.gate(batch.bank)
        scale = head.tau * (1 - alpha)  # (V,)
        to_logit = lambda vec: scale * (vec @ batch.bank.T) / norm  # noqa: E731
        for name, xp in x_parts.items():
            parts[name].append(to_logit((gate * (xp @ lin1.weight.T)) @ lin2.weight.T).flatten())
        parts["head_bias"].append(to_logit((gate * lin1.bias) @ lin2.weight.T + lin2.bias).flatten())
        z_sem = F.normalize(u, dim=-1)
        logits.append((scale * (z_sem @ batch.bank.T)).flatten())
        # the model's own z_sem must be what we rebuilt: otherwise the decomposition describes another map
        own = out.scores.z_sem[bi, ki]
        if not torch.allclose(own, z_sem, atol=1e-5):
            raise RuntimeError(f"rebuilt z_sem differs from the model's by {float((own - z_sem).abs().max()):.2e}")
    logit = torch.cat(logits).double().numpy()
    p = {k: torch.cat(v).double().numpy() for k, v in parts.items()}
    return Decomposition(logit, p, float(np.abs(sum(p.values()) - logit).max()))


@contextmanager
def _record_args(module: nn.Module) -> Iterator[list]:
    seen: list = []
    h = module.register_forward_pre_hook(lambda _m, args: seen.append(args))
    try:
        yield seen
    finally:
        h.remove()
