"""The training objective of § 3.3 and App. B.1 (weights in Table 14).

Every term is a pure function of tensors so it can be checked on hand-computed cases:
InfoNCE over predicate slots with synonym-group positives (weighted mean) and PU-discounted
negatives (Eq. 3), the per-cell sigmoid auxiliary with mass-balanced negatives (over the annotated
pairs, or over every sampled pair with Eq. 3 weights per cell), the swap hinge (Eq. 5), background
suppression, object-text grounding, the two sampler losses, and the gate's negatives (what a pair's
boxes rule out, App. C.2).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from typing import Literal

from pydantic import Field

from relate.config import StrictConfig

__all__ = ["LossConfig", "infonce_loss", "pu_negative_logweights", "sigmoid_aux_loss", "sigmoid_pooled_loss",
           "swap_hinge_loss",
           "background_loss", "grounding_loss", "geometry_bce_loss", "focal_loss", "relatedness_weights",
           "fit_synonym_weighting", "PredicateSpace", "force_mask", "gate_negative_loss",
           "relation_objective"]

_EPS = 1e-6


class LossConfig(StrictConfig):
    """Loss weights and constants (Table 14, App. B.1)."""

    infonce: float = Field(0.5, ge=0, description="weight of the InfoNCE term")
    sigmoid: float = Field(0.25, ge=0, description="weight of the per-cell sigmoid auxiliary")
    swap: float = Field(0.5, ge=0, description="weight of the swap hinge (Eq. 5)")
    background: float = Field(0.05, ge=0, description="weight of background suppression")
    grounding: float = Field(0.1, ge=0, description="weight of object-text grounding")
    geometry: float = Field(1.0, ge=0, description="weight of the geometry pre-scorer BCE")
    relatedness: float = Field(1.0, ge=0, description="weight of the relatedness focal loss")
    swap_margin: float = Field(0.05, ge=0, description="m of Eq. 5")
    background_topk: int = Field(3, gt=0, description="top-k cells of an unannotated pair that are suppressed")
    focal_gamma: float = Field(2.0, ge=0, description="focusing exponent of the relatedness focal loss")
    relatedness_floor: float = Field(0.3, ge=0, le=1, description="floor on an unannotated pair's weight (§ 3.3)")
    grounding_scale: float = Field(10.0, gt=0, description="logit scale of the grounding softmax")
    negatives_per_anchor: int = Field(512, gt=0, description="most InfoNCE negatives per anchor (Table 14: 512)")
    negatives: Literal["batch", "bank"] = Field(
        "batch", description="InfoNCE negatives: 'batch' = the other predicates annotated in the batch (§ 3.3), "
                             "'bank' = every training-bank column; either capped at negatives_per_anchor")
    pu_discount: bool = Field(True, description="Eq. 3: discount each negative q of an anchor p by log(1 - P(q|p)) "
                                                "(P from data.cooccurrence; all zero when it is off)")
    source_negatives: bool = Field(True, description="App. B.1: a negative must be a predicate the row's source could "
                                                     "have annotated (scopes from data.source_scopes; no scopes: no-op)")
    sigmoid_rows: Literal["annotated", "sampled"] = Field(
        "annotated", description="rows of the per-cell sigmoid: the 'annotated' pairs, each row's negatives sharing its "
                                 "positives' weight (App. B.1), or every 'sampled' pair, all unstated cells sharing one "
                                 "weight: an unstated cell weighs the same whether or not its pair carries a statement, "
                                 "so the score does not learn which pairs an annotator chose to speak of")
    gate_negatives: float = Field(0.0, ge=0, description="weight of the gate's negatives: on every sampled pair, "
                                  "the predicates its boxes rule out (a contact relation on boxes that do not meet, "
                                  "'near' far apart, 'left of' from the right; relate.gate.pair_conditions), pushed "
                                  "down by a sigmoid loss whether or not the pair is annotated. Seed 001, App. C.2: a "
                                  "rejection is a true negative up to box-annotation error")
    negatives_scope: Literal["all", "family"] = Field(
        "all", description="which unstated predicates of an annotated pair are its negatives: 'all' of them (§ 3.3), "
                           "or only those of the families its annotations come from ('family'): an annotator asked for "
                           "one relation per pair says nothing about the other families of that pair, so their cells "
                           "stay unlabelled (in the InfoNCE and the per-cell sigmoid alike). A corpus that states all "
                           "that holds (a synthetic world with coverage: full) has no unlabelled cell: there every "
                           "string is put in one family (train_jobs.relation_data.build_space)")


def infonce_loss(logits: torch.Tensor, pos_weight: torch.Tensor, neg_logw: torch.Tensor) -> torch.Tensor:
    """Multi-positive InfoNCE over predicate slots, rows = annotated pairs.

    ``pos_weight`` (M, V) >= 0 marks the synonym group of the row's annotation with its synonymy
    weights; each positive k is contrasted against the row's negatives (cells with weight 0 and a
    finite ``neg_logw``, whose logits are shifted by it: Eq. 3) and the per-positive losses are
    averaged with those weights (positive aggregation: weighted mean). Rows without a positive
    are skipped.
    """
    is_pos = pos_weight > 0
    neg = (~is_pos) & torch.isfinite(neg_logw)
    neg_logits = torch.where(neg, logits + torch.where(neg, neg_logw, torch.zeros_like(neg_logw)),
                             torch.full_like(logits, float("-inf")))
    neg_lse = torch.logsumexp(neg_logits, dim=1, keepdim=True)  # (M, 1), -inf when no negative
    per_pos = torch.logaddexp(logits, neg_lse) - logits  # -log softmax of positive k vs negatives
    w = pos_weight * is_pos
    row_w = w.sum(1)
    keep = row_w > 0
    if not keep.any():
        return logits.sum() * 0
    rows = (w * torch.where(is_pos, per_pos, torch.zeros_like(per_pos))).sum(1)[keep] / row_w[keep]
    return rows.mean()


def pu_negative_logweights(annotated: torch.Tensor, p_cond: torch.Tensor, inverse: torch.Tensor,
                           allowed: torch.Tensor | None = None) -> torch.Tensor:
    """Eq. 3 discounts: (M, V) log weight added to each negative logit.

    ``annotated`` (M, V) bool; ``p_cond`` (V, V) with p_cond[p, q] = P(q | p); ``inverse`` (V, V)
    bool directional inverses. Several annotations combine as independent (sum of logs).
    Annotated predicates and inverses of any annotation keep full weight (0). ``allowed``
    (source-aware mask, B.1) sets -inf where a source could not have annotated q.
    """
    log1m = torch.log((1 - p_cond).clamp(min=_EPS))
    logw = annotated.to(log1m.dtype) @ log1m
    exempt = annotated | ((annotated.to(log1m.dtype) @ inverse.to(log1m.dtype)) > 0)
    logw = torch.where(exempt, torch.zeros_like(logw), logw)
    if allowed is not None:
        logw = torch.where(allowed | annotated, logw, torch.full_like(logw, float("-inf")))
    return logw


def sigmoid_aux_loss(logits: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """Per-cell BCE; each row's negative cells share a total weight equal to its positive count."""
    bce = F.binary_cross_entropy_with_logits(logits, pos.to(logits.dtype), reduction="none")
    n_pos = pos.sum(1, keepdim=True).to(logits.dtype)
    n_neg = neg.sum(1, keepdim=True).to(logits.dtype)
    w = pos.to(logits.dtype) + neg.to(logits.dtype) * n_pos / n_neg.clamp(min=1)
    total = (2 * n_pos).sum()
    if total <= 0:
        return logits.sum() * 0
    return (w * bce).sum() / total


def sigmoid_pooled_loss(logits: torch.Tensor, pos: torch.Tensor, neg: torch.Tensor,
                        neg_weight: torch.Tensor | None = None) -> torch.Tensor:
    """Per-cell BCE over rows of any pairs; all negative cells share one total weight, the positive count
    (where ``sigmoid_aux_loss`` balances row by row, so a row without a positive weighs nothing), in
    proportion to ``neg_weight`` (default 1: each alike)."""
    bce = F.binary_cross_entropy_with_logits(logits, pos.to(logits.dtype), reduction="none")
    n_pos = pos.sum().to(logits.dtype)
    if n_pos <= 0:
        return logits.sum() * 0
    wn = neg.to(logits.dtype) if neg_weight is None else neg.to(logits.dtype) * neg_weight.to(logits.dtype)
    w = pos.to(logits.dtype) + wn * n_pos / wn.sum().clamp(min=1e-6)
    return (w * bce).sum() / (2 * n_pos)


def swap_hinge_loss(c_fwd: torch.Tensor, c_rev: torch.Tensor, p_directional: torch.Tensor,
                    margin: float = 0.05) -> torch.Tensor:
    """Eq. 5 weighted by P(directional): mean of w * max(0, m - c(i,j,p) + c(j,i,p))."""
    if c_fwd.numel() == 0:
        return c_fwd.sum() * 0
    return (p_directional * F.relu(margin - c_fwd + c_rev)).mean()


def background_loss(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Mean over unannotated pairs of their top-k sigmoid scores (pushes them down, lightly)."""
    if logits.numel() == 0:
        return logits.sum() * 0
    top = torch.sigmoid(logits).topk(min(k, logits.shape[1]), dim=1).values
    return top.mean()


def grounding_loss(region_emb: torch.Tensor, category_bank: torch.Tensor, target: torch.Tensor,
                   scale: float = 10.0) -> torch.Tensor:
    """Cross-entropy of unit region embeddings against category text embeddings (B.1)."""
    if region_emb.numel() == 0:
        return region_emb.sum() * 0
    return F.cross_entropy(scale * region_emb @ category_bank.to(region_emb.dtype).T, target)


def geometry_bce_loss(logits: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Plain BCE of the geometry pre-scorer over every valid candidate pair."""
    if not valid.any():
        return logits.sum() * 0
    return F.binary_cross_entropy_with_logits(logits[valid], labels[valid].to(logits.dtype))


def focal_loss(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor, gamma: float = 2.0) -> torch.Tensor:
    """Weighted mean of the focal loss -(1 - p_t)^gamma log p_t (relatedness stage)."""
    if weights.numel() == 0 or weights.sum() <= 0:
        return logits.sum() * 0
    y = labels.to(logits.dtype)
    ce = F.binary_cross_entropy_with_logits(logits, y, reduction="none")
    p_t = torch.exp(-ce)
    return (weights * (1 - p_t) ** gamma * ce).sum() / weights.sum()


def relatedness_weights(labels: torch.Tensor, pair_rate: torch.Tensor, floor: float = 0.3) -> torch.Tensor:
    """Annotated pairs weigh 1; an unannotated one 1 - (annotation rate of its category pair), >= floor."""
    return torch.where(labels.bool(), torch.ones_like(pair_rate), (1 - pair_rate).clamp(min=floor))


def fit_synonym_weighting(cosines: np.ndarray, is_synonym: np.ndarray):
    """Isotonic P(synonym | text cosine), increasing; returns a fitted sklearn IsotonicRegression."""
    from sklearn.isotonic import IsotonicRegression

    x, y = np.asarray(cosines, dtype=float).ravel(), np.asarray(is_synonym, dtype=float).ravel()
    if x.shape != y.shape or x.size == 0:
        raise ValueError(f"fit_synonym_weighting: need equal non-empty inputs, got {x.shape} and {y.shape}")
    return IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip").fit(x, y)


# --------------------------------------------------------------------------------------------
# Assembling the objective for one batch (targets from annotations; § 3.3, App. B.1, Table 14)
# --------------------------------------------------------------------------------------------
from dataclasses import dataclass  # noqa: E402


@dataclass
class PredicateSpace:
    """Everything the objective knows about the predicate strings, over the full string list.

    ``bank_cols`` selects the strings in the training bank (the model's columns); annotations may
    name strings outside it (e.g. held-out synonyms) and still have their group as positives.
    """

    group: torch.Tensor  # (Va,) long synonym-group id
    inverse: torch.Tensor  # (Va, Va) bool directional inverses
    p_directional: torch.Tensor  # (Va,) float
    p_cond: torch.Tensor  # (Va, Va) float, P(q | p) of Eq. 3
    syn_weight: torch.Tensor  # (Va, Va) float, isotonic P(synonym | cosine), 1 on the diagonal
    bank_cols: torch.Tensor  # (Vb,) long indices of the bank strings
    category_bank: torch.Tensor  # (C, D) unit text embeddings of object categories
    pair_rate: torch.Tensor  # (C, C) annotation rate of each ordered category pair
    scope: torch.Tensor | None = None  # (S, Va) bool: what source s can annotate; row 0 = unscoped (all)
    family: torch.Tensor | None = None  # (Va,) long family id of each string (loss.negatives_scope: family)
    conditions: torch.Tensor | None = None  # (Va, C) bool: the gate's conditions each string needs (relate.gate)
    p_unstated: torch.Tensor | None = None  # (Va,) P(q holds | nothing stated of the pair), for the sampled sigmoid
    unlabelled: torch.Tensor | None = None  # (Va,) bool: unstated is unlabelled, not negative, off asked pairs

    def to(self, device) -> "PredicateSpace":
        return PredicateSpace(*(None if getattr(self, f) is None else getattr(self, f).to(device)
                                for f in self.__dataclass_fields__))


def _posmap(flat: torch.Tensor, valid: torch.Tensor, nn_: int) -> torch.Tensor:
    """(B, N*N) position of each candidate among the kept pairs, -1 where not kept."""
    pm = torch.full((flat.shape[0], nn_), -1, dtype=torch.long, device=flat.device)
    pos = torch.arange(flat.shape[1], device=flat.device).expand_as(flat)
    b_idx = torch.arange(flat.shape[0], device=flat.device)[:, None].expand_as(flat)
    pm[b_idx[valid], flat[valid]] = pos[valid]
    return pm


def force_mask(rels: torch.Tensor, n: int) -> torch.Tensor:
    """(B, R, 3) relations (s, o, predicate; -1 padding) -> (B, N*N) annotated pairs and reverses."""
    ok = rels[..., 0] >= 0
    out = torch.zeros(rels.shape[0], n * n, dtype=torch.bool, device=rels.device)
    b = torch.arange(rels.shape[0], device=rels.device)[:, None].expand(-1, rels.shape[1])
    s, o = rels[..., 0], rels[..., 1]
    out[b[ok], (s * n + o)[ok]] = True
    out[b[ok], (o * n + s)[ok]] = True
    return out


def gate_negative_loss(logits: torch.Tensor, holds: torch.Tensor, needs: torch.Tensor,
                       known: torch.Tensor | None = None) -> torch.Tensor:
    """Mean sigmoid loss, label 0, over the cells whose relation needs a condition that fails on its pair.

    ``logits`` (B, P, V); ``holds`` (B, P, C) bool: which conditions hold on each pair; ``needs``
    (V, C) bool: which each column's relation needs; ``known`` (B, P, V) bool: cells stated true,
    never pushed down. Zero when no cell is ruled out."""
    gated = torch.nonzero(needs.any(1)).squeeze(1)
    if gated.numel() == 0:
        return logits.sum() * 0
    fails = (~holds).to(logits.dtype) @ needs[gated].to(logits.dtype).T > 0  # (B, P, G)
    if known is not None:
        fails = fails & ~known[..., gated]
    if not fails.any():
        return logits.sum() * 0
    return F.softplus(logits[..., gated][fails]).mean()


def relation_objective(out, rels: torch.Tensor, categories: torch.Tensor, box_valid: torch.Tensor,
                       space: PredicateSpace, cfg: LossConfig, generator: torch.Generator | None = None,
                       sources: torch.Tensor | None = None, conditions: torch.Tensor | None = None,
                       complete: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """All terms for one batch. ``out`` is a RelationOutput computed with ``force=force_mask(...)``.

    Returns each weighted term and ``total``. Rows of the InfoNCE are annotations; other
    annotated groups of the same pair are known true and so are not negatives of that row, and
    neither is any member of the row's own synonym group. A row's negatives are the other
    predicates annotated in the batch (``cfg.negatives == "batch"``) or every bank column, at most
    ``negatives_per_anchor`` of them (one random subset per batch), shifted by the Eq. 3 discount.
    ``sources`` (B,) indexes ``space.scope``: with ``cfg.source_negatives``, a predicate the
    image's source could not have annotated is no negative of its rows (App. B.1), neither in the
    InfoNCE nor among the per-cell sigmoid's negatives. ``complete`` (B, N*N) marks the pairs a pass
    was asked every relation of (the pairs pass): their unstated cells are negatives without the
    Eq. 3 discount. ``conditions`` (B, N*N, C) says which of the gate's conditions each ordered pair
    meets (``relate.gate.pair_conditions``), for ``cfg.gate_negatives``.
    """
    n = box_valid.shape[1]
    sp = out.sampled
    pm = _posmap(sp.flat, sp.valid, n * n)
    ok = rels[..., 0] >= 0
    b = torch.arange(rels.shape[0], device=rels.device)[:, None].expand(-1, rels.shape[1])[ok]
    s, o, a = rels[..., 0][ok], rels[..., 1][ok], rels[..., 2][ok]
    key = b * n * n + s * n + o
    upair, row_pair = torch.unique(key, return_inverse=True)
    va = space.group.shape[0]
    annotated = torch.zeros(upair.shape[0], va, dtype=torch.bool, device=rels.device)
    annotated[row_pair, a] = True
    group_hit = torch.zeros(upair.shape[0], int(space.group.max()) + 1, dtype=torch.bool, device=rels.device)
    group_hit[row_pair, space.group[a]] = True
    b_p, flat_p = upair // (n * n), upair % (n * n)
    allowed = None  # (U, Va): what each annotated pair's source could have annotated
    if cfg.source_negatives and space.scope is not None and sources is not None:
        allowed = space.scope[sources.to(rels.device).long()[b_p]]
    if cfg.negatives_scope == "family":  # and what its annotations speak for: their own families
        if space.family is None:
            raise ValueError("loss.negatives_scope='family' needs the predicate space's family ids (space.family)")
        fam_hit = torch.zeros(upair.shape[0], int(space.family.max()) + 1, dtype=torch.bool, device=rels.device)
        fam_hit[row_pair, space.family[a]] = True
        in_family = fam_hit[:, space.family]
        allowed = in_family if allowed is None else allowed & in_family
    cols = space.bank_cols
    gcols = space.group[cols]
    pos_fwd, pos_rev = pm[b, s * n + o], pm[b, o * n + s]
    logits = out.scores.logits[b, pos_fwd]  # (M, Vb)
    same = gcols[None, :] == space.group[a][:, None]
    pos_weight = torch.where(same, space.syn_weight[a][:, cols], torch.zeros_like(logits))
    p_cond = space.p_cond if cfg.pu_discount else torch.zeros_like(space.p_cond)
    pair_logw = pu_negative_logweights(annotated, p_cond, space.inverse, allowed)  # (U, Va)
    comp_u = None
    if complete is not None:  # a pair a pass was asked every relation of: what it left unstated does not hold
        comp = complete.to(rels.device).bool()
        comp_u = comp[b_p, flat_p]
        full = pu_negative_logweights(annotated, torch.zeros_like(p_cond), space.inverse, allowed)
        pair_logw = torch.where(comp_u[:, None], full, pair_logw)
    neg_logw = pair_logw[row_pair][:, cols]
    unl = None  # (Vb,) the columns of data.unlabelled_families: no negatives off the asked pairs
    if space.unlabelled is not None and bool(space.unlabelled.any()):
        unl = space.unlabelled.to(rels.device)[cols]
        asked_u = comp_u if comp_u is not None else torch.zeros(upair.shape[0], dtype=torch.bool, device=rels.device)
        # (B, P) whether each sampled pair was asked about
        asked_cells = torch.gather(comp, 1, sp.flat.clamp(min=0)) if complete is not None else torch.zeros_like(sp.valid)
        neg_logw = neg_logw.masked_fill(unl[None, :] & ~asked_u[row_pair][:, None], float("-inf"))
    known_true = group_hit[row_pair][:, gcols] & ~same
    neg_logw = neg_logw.masked_fill(known_true | same, float("-inf"))
    candidate = torch.ones(cols.shape[0], dtype=torch.bool, device=cols.device)
    if cfg.negatives == "batch":  # the other predicates of the batch (§ 3.3)
        candidate = torch.isin(cols, a)
    idx = torch.nonzero(candidate).squeeze(1)
    if idx.shape[0] > cfg.negatives_per_anchor:  # a random subset, the same for every row of the batch
        pick = torch.randperm(idx.shape[0], generator=generator)[: cfg.negatives_per_anchor].to(cols.device)
        candidate = torch.zeros_like(candidate)
        candidate[idx[pick]] = True
    neg_logw = neg_logw.masked_fill(~candidate[None, :], float("-inf"))
    terms = {"infonce": infonce_loss(logits, pos_weight, neg_logw)}
    # per-cell sigmoid over annotated pairs: positives are every annotated group, negatives the
    # other cells the source could have annotated
    pair_logits = out.scores.logits[b_p, pm[b_p, flat_p]]
    pos_cells = group_hit[:, gcols]
    neg_cells = ~pos_cells if allowed is None else ~pos_cells & allowed[:, cols]
    if unl is not None:
        neg_cells = neg_cells & ~(unl[None, :] & ~asked_u[:, None])
    if cfg.sigmoid_rows == "annotated":
        terms["sigmoid"] = sigmoid_aux_loss(pair_logits, pos_cells, neg_cells)
    else:  # every sampled pair a row, its unstated cells negatives weighted by how surely they are false
        all_pos = torch.zeros_like(out.scores.logits, dtype=torch.bool)
        all_pos[b_p, pm[b_p, flat_p]] = pos_cells
        all_neg = ~all_pos & sp.valid[..., None]
        all_neg[b_p, pm[b_p, flat_p]] = neg_cells
        # Eq. 3 per cell: an annotated pair's unstated q weighs prod(1 - P(q|p)); a pair nothing was
        # stated of, 1 - P(q | nothing stated); an asked pair's, 1
        neg_w = torch.ones_like(out.scores.logits)
        if space.p_unstated is not None and cfg.pu_discount:
            neg_w = neg_w * (1 - space.p_unstated[cols].to(neg_w.dtype))
        if complete is not None:
            neg_w = torch.where(torch.gather(comp, 1, sp.flat.clamp(min=0))[..., None], torch.ones_like(neg_w), neg_w)
        neg_w[b_p, pm[b_p, flat_p]] = pair_logw[:, cols].exp().to(neg_w.dtype)
        if unl is not None:
            all_neg = all_neg & ~(unl[None, None, :] & ~asked_cells[..., None])
        terms["sigmoid"] = sigmoid_pooled_loss(out.scores.logits[sp.valid], all_pos[sp.valid], all_neg[sp.valid],
                                               neg_w[sp.valid])
    # Eq. 5 on every directional group member of each annotation
    mixed = out.scores.mixed
    r_idx, c_idx = torch.nonzero(same, as_tuple=True)
    terms["swap"] = swap_hinge_loss(mixed[b[r_idx], pos_fwd[r_idx], c_idx], mixed[b[r_idx], pos_rev[r_idx], c_idx],
                                    space.p_directional[cols[c_idx]], cfg.swap_margin)
    labels = torch.zeros(box_valid.shape[0], n * n, dtype=torch.bool, device=rels.device)
    labels[b, s * n + o] = True
    kept_label = torch.gather(labels, 1, sp.flat)
    bg = out.scores.logits[sp.valid & ~kept_label]
    if unl is not None:  # an unlabelled cell is not suppressed either, unless its pair was asked
        bg = bg.masked_fill(unl[None, :] & ~asked_cells[sp.valid & ~kept_label][:, None], float("-inf"))
    terms["background"] = background_loss(bg, cfg.background_topk)
    cat_ok = box_valid & (categories >= 0)
    terms["grounding"] = grounding_loss(out.grounding[cat_ok], space.category_bank, categories[cat_ok],
                                        cfg.grounding_scale)
    terms["geometry"] = geometry_bce_loss(sp.geo_logits, labels, sp.geo_valid)
    rel_lab = torch.gather(labels, 1, sp.rel_flat)
    cs = torch.gather(categories, 1, sp.rel_flat // n).clamp(min=0)
    co = torch.gather(categories, 1, sp.rel_flat % n).clamp(min=0)
    w = relatedness_weights(rel_lab, space.pair_rate[cs, co], cfg.relatedness_floor) * sp.rel_valid
    terms["relatedness"] = focal_loss(sp.rel_logits, rel_lab, w, cfg.focal_gamma)
    if cfg.gate_negatives > 0:  # the gate's geometry as labels on every sampled pair (App. C.2)
        if conditions is None or space.conditions is None:
            raise ValueError("loss.gate_negatives needs the batch's pair conditions and the space's (relate.gate)")
        holds = torch.gather(conditions.to(rels.device).bool(), 1,
                             sp.flat.clamp(min=0)[..., None].expand(-1, -1, conditions.shape[-1]))
        known = torch.zeros_like(out.scores.logits, dtype=torch.bool)
        known[b_p, pm[b_p, flat_p]] = pos_cells
        logits_ok = out.scores.logits.masked_fill(~sp.valid[..., None], 0.0)
        holds = holds | ~sp.valid[..., None]  # padding pairs rule nothing out
        terms["gate_negatives"] = gate_negative_loss(logits_ok, holds, space.conditions[cols], known)
    weighted = {k: getattr(cfg, k) * v for k, v in terms.items()}
    weighted["total"] = sum(weighted.values())
    return weighted
