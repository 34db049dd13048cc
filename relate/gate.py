"""The geometric gate of seed 001, Algorithm 1 (App. C.2), vectorised over many relations.

A rule fires only where box geometry logically constrains the predicate; everything else passes
unchecked and is counted (``GateResult.checked``). Verification rejects, or (for left/right and
above/below that contradict the box centres) repairs by swapping roles while keeping the
annotator's string. After verification, left/right, above/below and front/behind relations are
restated from the other endpoint with probability 1/2 (§4.1), then exact duplicate triples are
dropped. Images left below a spatial-density floor get a salience-ranked geometric top-up
(:func:`topup_candidates`), whose relations then pass the same gate and balancing.

Inputs are columnar (one entry per candidate relation) over a flattened box table, so one call
gates a whole Ray Data batch; there is no per-relation Python loop.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa
from pydantic import Field

from relate import geometry as G
from relate.config import StrictConfig
from relate.gate_canonical import CanonicalMap, KINDS, default_map, normalise_predicate
from relate.schema import GATE_OUTCOMES, PASSES

__all__ = ["GateConfig", "BoxTable", "Candidates", "GateResult", "RULES", "gate_relations", "CONDITIONS",
           "condition_columns", "pair_conditions",
           "image_keys", "SPATIAL_PASSES", "TopUpConfig", "topup_candidates", "balance_relations"]

RULES = ("bad_index", "self_loop", "person_duplicate", "body_part_spatial", "not_layout",
         "contact_disjoint", "containment_no_overlap", "proximity_far", "direction_unrepairable",
         "body_part_subject", "body_part_object", "semantic_disjoint", "duplicate")
_R = {r: i + 1 for i, r in enumerate(RULES)}  # 0 = no rule fired
SPATIAL_PASSES = ("spatial", "topup")
_PASS = {p: i for i, p in enumerate(PASSES)}
KEPT, SWAPPED, RESTATED, REJECTED = 0, 1, 2, 3
_KIND = {k: i for i, k in enumerate(KINDS)}


class GateConfig(StrictConfig):
    """Thresholds of Algorithm 1 and the balancing step."""

    person_iou: float = Field(0.7, gt=0, le=1, description="Two person boxes at this IoU or more are one person (line 1).")
    containment_min: float = Field(0.5, gt=0, le=1, description="Least share of the subject inside the object for containment (line 8).")
    proximity_gap: float = Field(0.5, gt=0, description="Largest gap for 'near', as a multiple of the larger box diagonal (line 10).")
    body_part_inside: float = Field(0.6, gt=0, le=1, description="Share of a body-part object inside the subject that rejects it (line 17).")
    touch_tol_px: float = Field(0.0, ge=0, description="Gap in pixels still counted as touching (0: boxes must meet).")
    balance: bool = Field(True, description="Restate directional layout relations from the other endpoint with p=1/2 (§4.1).")
    seed: int = Field(0, description="Seed of the balancing coin (hashed with image id and pair; batch-independent).")
    dedup: bool = Field(True, description="Drop exact duplicate (subject, predicate, object) triples per image.")


@dataclass
class BoxTable:
    """Boxes of a batch of images, flattened: image ``i`` owns rows ``offsets[i]:offsets[i+1]``."""

    boxes: np.ndarray        # (B, 4) float
    is_person: np.ndarray    # (B,) bool
    is_body_part: np.ndarray  # (B,) bool
    offsets: np.ndarray      # (I + 1,) int64
    keys: np.ndarray         # (I,) uint64, a stable hash of each image id (balancing coin)

    @classmethod
    def from_images(cls, image_ids: Sequence[str], boxes: Sequence[Sequence[dict]]) -> "BoxTable":
        """From per-image lists of box dicts (the ``boxes`` column of the corpus schema)."""
        counts = np.array([len(b) for b in boxes], dtype=np.int64)
        flat = [bx for b in boxes for bx in b]
        arr = np.array([[b["x1"], b["y1"], b["x2"], b["y2"]] for b in flat], dtype=np.float64).reshape(-1, 4)
        person = np.array([bool(b.get("is_person")) for b in flat], dtype=bool)
        part = np.array([bool(b.get("is_body_part")) for b in flat], dtype=bool)
        return cls(arr, person, part, np.concatenate([[0], np.cumsum(counts)]), image_keys(image_ids))

    @property
    def n_boxes(self) -> np.ndarray:
        return np.diff(self.offsets)


def image_keys(image_ids: Sequence[str]) -> np.ndarray:
    """64-bit keys from image ids (two CRC32s), so the balancing coin ignores batch composition."""
    return np.array([(zlib.crc32(i.encode()) << 32) | zlib.crc32(i.encode()[::-1]) for i in image_ids],
                    dtype=np.uint64)


@dataclass
class Candidates:
    """Proposed relations, one entry each. ``subject``/``object`` are 0-based box indices."""

    image: np.ndarray      # (R,) int64 index into the BoxTable's images
    subject: np.ndarray    # (R,) int64
    object: np.ndarray     # (R,) int64
    predicate: np.ndarray  # (R,) object (str)
    pass_: np.ndarray      # (R,) int8 index into relate.schema.PASSES
    tag: np.ndarray | None = None  # (R,) object: injected-error label (scripted annotator only)

    def __len__(self) -> int:
        return int(self.subject.shape[0])

    @classmethod
    def from_lists(cls, image, subject, obj, predicate, passes, tag=None) -> "Candidates":
        p = np.array([_PASS[x] if isinstance(x, str) else x for x in passes], dtype=np.int8)
        t = None if tag is None else np.asarray(tag, dtype=object)
        pred = np.empty(len(predicate), dtype=object)
        pred[:] = list(predicate)
        return cls(np.asarray(image, np.int64), np.asarray(subject, np.int64), np.asarray(obj, np.int64),
                   pred, p, t)

    @staticmethod
    def concat(parts: Sequence["Candidates"]) -> "Candidates":
        tags = None
        if any(p.tag is not None for p in parts):
            tags = np.concatenate([p.tag if p.tag is not None else np.full(len(p), None, object) for p in parts])
        return Candidates(*(np.concatenate([getattr(p, f) for p in parts]) for f in
                            ("image", "subject", "object", "predicate", "pass_")), tags)


@dataclass
class GateResult:
    """Per candidate: final roles and string, outcome code, the rule that fired, whether checked."""

    subject: np.ndarray
    object: np.ndarray
    predicate: np.ndarray
    outcome: np.ndarray    # KEPT / SWAPPED / RESTATED / REJECTED
    rule: np.ndarray       # 0 or 1 + index into RULES
    checked: np.ndarray    # bool: some geometric rule could decide this relation
    canonical: np.ndarray  # canonical form id, -1 when unconstrained
    repaired: np.ndarray   # bool: roles swapped by direction repair (even if later restated)

    @property
    def accepted(self) -> np.ndarray:
        return self.outcome != REJECTED

    def outcome_names(self) -> np.ndarray:
        names = np.array(list(GATE_OUTCOMES) + ["rejected"], dtype=object)
        return names[self.outcome]

    def rule_names(self) -> np.ndarray:
        return np.array([None] + list(RULES), dtype=object)[self.rule]


def _encode(predicates: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Dictionary-encode (hash based, no sort) and normalise each distinct string once."""
    enc = pa.array(predicates, type=pa.string()).dictionary_encode()
    idx = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    return idx, enc.dictionary.to_pylist()


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: a cheap, well-mixed integer hash (vectorised)."""
    x = (x + np.uint64(0x9E3779B97F4A7C15)).astype(np.uint64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _fire(rule: np.ndarray, mask: np.ndarray, name: str) -> None:
    """Record ``name`` where ``mask`` holds and no earlier rule fired (Algorithm 1 order)."""
    rule[mask & (rule == 0)] = _R[name]


def _algorithm1(bt: BoxTable, c: Candidates, cid: np.ndarray, rev: np.ndarray, cm: CanonicalMap,
                cfg: GateConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lines 1-20 of Algorithm 1 on every candidate at once: (rule, swap, checked)."""
    n = len(c)
    rule = np.zeros(n, np.int8)
    nb = bt.n_boxes[c.image]
    bad = (c.subject < 0) | (c.subject >= nb) | (c.object < 0) | (c.object >= nb)
    _fire(rule, bad, "bad_index")
    _fire(rule, c.subject == c.object, "self_loop")
    base = bt.offsets[c.image]
    si = np.where(bad, 0, base + c.subject) if n else base
    oi = np.where(bad, 0, base + c.object) if n else base
    bs, bo = bt.boxes[si], bt.boxes[oi]
    ps, po = bt.is_person[si], bt.is_person[oi]
    ks, ko = bt.is_body_part[si], bt.is_body_part[oi]
    known = cid >= 0
    k = np.where(known, cid, 0)
    kind = np.where(known, cm.kind[k], 0)
    contact = known & cm.contact[k]
    inter = G.intersection_area(bs, bo)
    a_s, a_o = G.area(bs), G.area(bo)
    # every ratio test is cross-multiplied, so a pair exactly at a threshold gets Algorithm 1's
    # verdict (an epsilon in a denominator used to flip IoU = 0.7, 50% and 60% the wrong way)
    union = a_s + a_o - inter
    touching = _meet(bs, bo, cfg)
    _fire(rule, ps & po & (union > 0) & (inter >= cfg.person_iou * union), "person_duplicate")  # line 1
    # the pairs pass asks for every relation of chosen pairs: its layout forms get the spatial pass's
    # rules, the rest the semantic passes'
    spatial = np.isin(c.pass_, [_PASS[p] for p in SPATIAL_PASSES]) | ((c.pass_ == _PASS["pairs"]) & known & cm.layout[k])
    # lines 2-13: spatial pass
    _fire(rule, spatial & (ks | ko), "body_part_spatial")
    _fire(rule, spatial & ~(known & cm.layout[k]), "not_layout")
    _fire(rule, spatial & contact & ~touching, "contact_disjoint")
    # containment: |b_s ∩ b_o| >= 0.5 |b_s|, reading "contains" with the roles reversed
    inner = np.where(rev, a_o, a_s)
    is_cont = kind == _KIND["containment"]
    _fire(rule, spatial & is_cont & ~_within(inter, inner, cfg), "containment_no_overlap")
    is_prox = kind == _KIND["proximity"]
    _fire(rule, spatial & is_prox & ~_close(bs, bo, cfg), "proximity_far")
    axis = np.where(known, cm.axis[k], 0)
    sign = np.where(known, cm.sign[k], 0).astype(np.float64)
    d = _centre_offset(bs, bo, axis)
    contradicts = spatial & (axis > 0) & (d * sign < 0)
    repairable = contradicts & known & cm.has_inverse[k]
    _fire(rule, contradicts & ~repairable, "direction_unrepairable")
    # lines 14-19: semantic passes
    sem = ~spatial
    exempt = known & cm.part_like[k]
    _fire(rule, sem & ~exempt & ks, "body_part_subject")
    _fire(rule, sem & ~exempt & ko & (a_o > 0) & (inter >= cfg.body_part_inside * a_o), "body_part_object")
    needs_overlap = contact | is_cont
    _fire(rule, sem & needs_overlap & ~touching, "semantic_disjoint")  # closed boxes share no point
    swap = repairable & (rule == 0)
    # "checked": some rule could have fired on this relation; depth and free-text predicates
    # pass unconstrained and are counted as residual risk (§4.1)
    geo = contact | is_cont | is_prox | (axis > 0)
    checked = (ps & po) | (spatial & (ks | ko | ~(known & cm.layout[k]) | geo)) | (sem & (ks | ko | needs_overlap))
    return rule, swap, checked


# -- the geometry Algorithm 1 checks, one home for the gate and for the labels it implies -----------
def _meet(bs: np.ndarray, bo: np.ndarray, cfg: GateConfig) -> np.ndarray:
    """Boxes touch or overlap (a gap of at most touch_tol_px): what a contact relation needs (lines 5, 18)."""
    gx, gy = G._axis_gaps(bs, bo)
    return np.clip(gx, 0, None) ** 2 + np.clip(gy, 0, None) ** 2 <= cfg.touch_tol_px ** 2


def _within(inter: np.ndarray, inner: np.ndarray, cfg: GateConfig) -> np.ndarray:
    """At least containment_min of the inner box lies in the other (line 8)."""
    return (inner > 0) & (inter >= cfg.containment_min * inner)


def _close(bs: np.ndarray, bo: np.ndarray, cfg: GateConfig) -> np.ndarray:
    """Touching, or a gap of at most proximity_gap times the larger diagonal (line 10, squared: no
    square-root rounding at the threshold)."""
    gx, gy = G._axis_gaps(bs, bo)
    gap2 = np.clip(gx, 0, None) ** 2 + np.clip(gy, 0, None) ** 2
    diag2 = np.maximum(G.widths(bs) ** 2 + G.heights(bs) ** 2, G.widths(bo) ** 2 + G.heights(bo) ** 2)
    return (gap2 <= cfg.touch_tol_px ** 2) | (gap2 <= cfg.proximity_gap ** 2 * diag2)


def _centre_offset(bs: np.ndarray, bo: np.ndarray, axis: np.ndarray | int) -> np.ndarray:
    """Subject centre minus object centre along ``axis`` (1: x, 2: y; line 11)."""
    cs, co = G.centres(bs), G.centres(bo)
    return np.where(np.asarray(axis) == 1, cs[..., 0] - co[..., 0], cs[..., 1] - co[..., 1])


# What the boxes alone rule out, for every ordered pair: the conditions a gated relation needs. A
# relation whose condition fails on a pair is rejected by Algorithm 1 whoever states it, so "A rejection
# is then a true negative up to box-annotation error" (seed 001, App. C.2) holds of every pair, stated or
# not: these are labels the boxes give, the only negatives an unstated cell can be sure of.
CONDITIONS = ("meet", "subject_within", "object_within", "close", "subject_left", "subject_right",
              "subject_above", "subject_below")


def condition_columns(predicates: Sequence[str], cmap: CanonicalMap | None = None) -> np.ndarray:
    """(V, len(CONDITIONS)) bool: which conditions each string's relation needs, from its canonical
    form (contact: the boxes meet; containment: they meet and the inner one lies within; proximity:
    close; left/right/above/below and "on top of": the centres in that order). An ungated string
    needs none."""
    cm = cmap or default_map()
    col = {c: i for i, c in enumerate(CONDITIONS)}
    out = np.zeros((len(predicates), len(CONDITIONS)), bool)
    for v, p in enumerate(predicates):
        cid, rev = cm.lookup(p)
        if cid < 0:
            continue
        kind = KINDS[cm.kind[cid]]
        if cm.contact[cid] or kind == "containment":
            out[v, col["meet"]] = True
        if kind == "containment":
            out[v, col["object_within" if rev else "subject_within"]] = True
        if kind == "proximity":
            out[v, col["close"]] = True
        if cm.axis[cid]:
            side = {(1, -1): "subject_left", (1, 1): "subject_right", (2, -1): "subject_above", (2, 1): "subject_below"}
            out[v, col[side[(int(cm.axis[cid]), int(cm.sign[cid]))]]] = True
    return out


def pair_conditions(boxes: np.ndarray, cfg: GateConfig | None = None) -> np.ndarray:
    """(n, n, len(CONDITIONS)) bool: which conditions hold for each ordered pair (subject row, object
    column) of ``boxes`` (n, 4), by the same tests Algorithm 1 runs."""
    cfg = cfg or GateConfig()
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    bs, bo = np.broadcast_arrays(b[:, None], b[None])
    inter = G.intersection_area(bs, bo)
    dx, dy = _centre_offset(bs, bo, 1), _centre_offset(bs, bo, 2)
    return np.stack([_meet(bs, bo, cfg), _within(inter, G.area(bs), cfg), _within(inter, G.area(bo), cfg),
                     _close(bs, bo, cfg), dx <= 0, dx >= 0, dy <= 0, dy >= 0], axis=-1)


def _balance(bt: BoxTable, c: Candidates, s: np.ndarray, o: np.ndarray, cid: np.ndarray,
             inv_ok: np.ndarray, live: np.ndarray, cm: CanonicalMap, cfg: GateConfig,
             strata: np.ndarray | None = None) -> np.ndarray:
    """Which live relations to restate (§4.1): probability 1/2 each, stratified per axis.

    The coin is a hash of (seed, image id, unordered pair); within a stratum (the image, or the
    group ``strata`` gives, e.g. an output shard) and axis the relations are ranked by that hash
    and every other one is restated, from a hashed starting parity. Each relation is restated
    with probability 1/2, yet the left/right, above/below and front/behind counts of a stratum
    end within one of each other instead of drifting like a binomial random walk.
    """
    k = np.where(cid >= 0, cid, 0)
    kind = np.where(cid >= 0, cm.kind[k], 0)
    axis_group = np.select([kind == _KIND["horizontal"], kind == _KIND["vertical"], kind == _KIND["depth"]],
                           [1, 2, 3], 0)
    eligible = live & (axis_group > 0) & inv_ok & (cid >= 0) & cm.has_inverse[k]
    idx = np.flatnonzero(eligible)
    out = np.zeros(len(c), bool)
    if idx.size == 0:
        return out
    img_key = bt.keys[c.image[idx]] ^ _mix(np.full(idx.size, cfg.seed, np.uint64))
    lo, hi = np.minimum(s[idx], o[idx]).astype(np.uint64), np.maximum(s[idx], o[idx]).astype(np.uint64)
    grp = (cid[idx] + 1).astype(np.uint64)  # per side: each side of an axis splits in half
    h = _mix(img_key ^ _mix(lo * np.uint64(1_000_003) + hi) ^ _mix(grp + np.uint64(7)))
    base = img_key if strata is None else (np.asarray(strata, np.uint64)[idx] ^ _mix(np.full(idx.size, cfg.seed, np.uint64)))
    stratum = _mix(base ^ _mix(grp))
    order = np.lexsort((h, stratum))
    st_sorted = stratum[order]
    start = np.r_[True, st_sorted[1:] != st_sorted[:-1]]
    first = np.maximum.accumulate(np.where(start, np.arange(idx.size), 0))
    rank = np.arange(idx.size) - first
    parity = (st_sorted >> np.uint64(17)) & np.uint64(1)
    flip = ((rank.astype(np.uint64) + parity) & np.uint64(1)) == 1
    out[idx[order]] = flip
    return out


def _dedup(c: Candidates, s: np.ndarray, o: np.ndarray, norm_id: np.ndarray, live: np.ndarray) -> np.ndarray:
    """Mask of live relations that repeat an earlier live (image, subject, predicate, object)."""
    idx = np.flatnonzero(live)
    dup = np.zeros(len(c), bool)
    if idx.size < 2:
        return dup
    cols = [c.image[idx], s[idx], o[idx], norm_id[idx]]
    spans = [int(x.max()) + 1 for x in cols]
    if np.prod([float(v) for v in spans]) < 2.0 ** 62:  # one packed int64 key: a single stable sort
        key = np.zeros(idx.size, np.int64)
        for x, span in zip(cols, spans):
            key = key * span + x
        order = np.argsort(key, kind="stable")  # ties keep input order: the first copy survives
        ks = key[order]
        same = ks[1:] == ks[:-1]
    else:
        order = np.lexsort([idx] + cols[::-1])
        same = np.ones(idx.size - 1, bool)
        for x in cols:
            xs = x[order]
            same &= xs[1:] == xs[:-1]
    dup[idx[order[1:][same]]] = True
    return dup


def _norm_ids(idx: np.ndarray, dictionary: list[str]) -> np.ndarray:
    """Per relation, an id of its normalised predicate ("On " and "on" are one triple)."""
    norm: dict[str, int] = {}
    return np.array([norm.setdefault(normalise_predicate(p), len(norm)) for p in dictionary] + [-1], np.int64)[idx]


def gate_relations(bt: BoxTable, c: Candidates, cfg: GateConfig | None = None,
                   cmap: CanonicalMap | None = None) -> GateResult:
    """Algorithm 1, direction repair, balancing and dedup for every candidate of a batch."""
    cfg = cfg or GateConfig()
    cm = cmap or default_map()
    n = len(c)
    pidx, pdict = _encode(c.predicate) if n else (np.zeros(0, np.int64), [])
    looks = [cm.lookup(p) for p in pdict]
    d_cid = np.array([x[0] for x in looks] + [-1], np.int64)
    d_rev = np.array([x[1] for x in looks] + [False], bool)
    cid, rev = d_cid[pidx], d_rev[pidx]
    rule, swap, checked = _algorithm1(bt, c, cid, rev, cm, cfg)
    s = np.where(swap, c.object, c.subject)
    o = np.where(swap, c.subject, c.object)
    pred = c.predicate.copy() if n else np.zeros(0, object)
    norm_of: dict[str, int] = {}
    if cfg.dedup and n:  # before balancing, so that two copies of a relation cannot split apart
        norm = np.array([norm_of.setdefault(normalise_predicate(p), len(norm_of)) for p in pdict] + [-1], np.int64)
        _fire(rule, _dedup(c, s, o, norm[pidx], rule == 0), "duplicate")
    live = rule == 0
    restate = np.zeros(n, bool)
    if cfg.balance and n:
        inverses = [cm.inverse_surface(p) for p in pdict]
        inv_ok = np.array([x is not None for x in inverses] + [False], bool)[pidx]
        restate = _balance(bt, c, s, o, cid, inv_ok, live, cm, cfg)
        inv_arr = np.array(inverses + [None], dtype=object)
        pred[restate] = inv_arr[pidx[restate]]
        s, o = np.where(restate, o, s), np.where(restate, s, o)
    if cfg.dedup and restate.any():  # and after: a restated relation may now repeat another one
        inv_norm = np.array([norm_of.setdefault(normalise_predicate(x), len(norm_of)) if x else -1 for x in inverses] + [-1],
                            np.int64)
        norm = np.where(restate, inv_norm[pidx], norm[pidx])
        _fire(rule, _dedup(c, s, o, norm, rule == 0), "duplicate")
    rejected = rule != 0
    # a rejection keeps the relation exactly as proposed
    s, o = np.where(rejected, c.subject, s), np.where(rejected, c.object, o)
    pred[rejected] = c.predicate[rejected]
    outcome = np.full(n, KEPT, np.int8)
    outcome[swap] = SWAPPED
    outcome[restate] = RESTATED
    outcome[rejected] = REJECTED
    return GateResult(s, o, pred, outcome, rule, checked, cid, swap & ~rejected)


def balance_relations(bt: BoxTable, c: Candidates, cfg: GateConfig | None = None, strata: np.ndarray | None = None,
                      cmap: CanonicalMap | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Restate already verified relations with p=1/2 (strata as in :func:`_balance`), then dedup.

    For a corpus writer that balances whole shards at once. Returns (subject, object, predicate,
    restated mask, duplicate mask); duplicates are relations a restatement made repeat another.
    """
    cfg = cfg or GateConfig()
    cm = cmap or default_map()
    n = len(c)
    if n == 0:
        z = np.zeros(0, bool)
        return c.subject, c.object, c.predicate, z, z
    pidx, pdict = _encode(c.predicate)
    cid = np.array([cm.lookup(p)[0] for p in pdict] + [-1], np.int64)[pidx]
    inverses = [cm.inverse_surface(p) for p in pdict]
    inv_ok = np.array([x is not None for x in inverses] + [False], bool)[pidx]
    live = np.ones(n, bool)
    restate = _balance(bt, c, c.subject, c.object, cid, inv_ok, live, cm, cfg, strata)
    pred = c.predicate.copy()
    pred[restate] = np.array(inverses + [None], dtype=object)[pidx[restate]]
    s, o = np.where(restate, c.object, c.subject), np.where(restate, c.subject, c.object)
    dup = _dedup(c, s, o, _norm_ids(*_encode(pred)), live) if cfg.dedup else np.zeros(n, bool)
    return s, o, pred, restate, dup


class TopUpConfig(StrictConfig):
    """The geometric top-up for images below the spatial-density floor (App. C.1, Fig. 13)."""

    enabled: bool = Field(True, description="Add geometric left/right or above/below relations to sparse images.")
    floor_per_object: float = Field(0.5, ge=0, description="Floor: kept layout relations per whole (non-part) object.")
    max_per_image: int = Field(4, ge=0, description="Most top-up relations added to one image.")


def topup_candidates(bt: BoxTable, kept_image: np.ndarray, kept_s: np.ndarray, kept_o: np.ndarray,
                     kept_layout: np.ndarray, cfg: TopUpConfig) -> Candidates:
    """Geometric relations for images whose kept layout relations fall below the floor.

    Candidate pairs are whole objects with no kept relation in either direction that are
    separated along some axis, so the direction is decided by the boxes; they are ranked by
    salience (geometric-mean area, discounted by the gap) and stated from the left or upper
    object, as an annotator would; balancing then restates half of them.
    """
    out = {k: [] for k in ("image", "subject", "object", "predicate")}
    n_img = bt.offsets.size - 1
    if not cfg.enabled or n_img == 0:
        return Candidates.from_lists([], [], [], [], [])
    density = np.bincount(kept_image[kept_layout], minlength=n_img)
    related = set(zip(kept_image.tolist(), np.minimum(kept_s, kept_o).tolist(), np.maximum(kept_s, kept_o).tolist()))
    for i in range(n_img):
        lo, hi = bt.offsets[i], bt.offsets[i + 1]
        whole = np.flatnonzero(~bt.is_body_part[lo:hi])
        need = min(int(np.ceil(cfg.floor_per_object * whole.size)) - int(density[i]), cfg.max_per_image)
        if need <= 0 or whole.size < 2:
            continue
        a, b = np.triu_indices(whole.size, 1)
        a, b = whole[a], whole[b]
        free = np.array([(i, x, y) not in related for x, y in zip(a.tolist(), b.tolist())], bool)
        a, b = a[free], b[free]
        ba, bb = bt.boxes[lo + a], bt.boxes[lo + b]
        gx, gy = G._axis_gaps(ba, bb)
        d = G.centres(bb) - G.centres(ba)
        horiz = (gx > 0) & ((np.abs(d[:, 0]) >= np.abs(d[:, 1])) | (gy <= 0))
        vert = ~horiz & (gy > 0)
        ok = horiz | vert
        sal = np.sqrt(G.area(ba) * G.area(bb)) / (1.0 + G.gap(ba, bb) / (0.5 * (G.diag(ba) + G.diag(bb)) + 1e-9))
        for j in np.flatnonzero(ok)[np.argsort(-sal[ok], kind="stable")][:need]:
            first = d[j, 0] > 0 if horiz[j] else d[j, 1] > 0  # is ``a`` the left / upper one?
            s, o = (a[j], b[j]) if first else (b[j], a[j])
            out["image"].append(i); out["subject"].append(int(s)); out["object"].append(int(o))
            out["predicate"].append("to the left of" if horiz[j] else "above")
    return Candidates.from_lists(out["image"], out["subject"], out["object"], out["predicate"],
                                 ["topup"] * len(out["image"]))
