"""``relation_objective`` assembled on a tiny batch and checked against values worked by hand.

Each expected value below is written out with ``math`` from the paper's definitions (§ 3.3,
Eq. 3, Eq. 5, App. B.1), not with the loss code: a dropped P(q|p) discount, a discounted
inverse, negatives from the whole bank instead of the batch, an ignored source mask or a
swapped hinge changes a number here.

The batch: one image, three boxes, four annotations on four ordered pairs, seven predicate
strings in the bank (``atop`` a synonym of ``on``; ``under`` the inverse of ``on``; ``beside``
never annotated in the batch).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from relate.losses import LossConfig, PredicateSpace, relation_objective
from relate.model.sampler import SampledPairs

ON, ATOP, UNDER, NEAR, TOUCHING, HOLDING, BESIDE = range(7)
N = 3
PAIRS = [(0, 1), (1, 0), (0, 2), (2, 0), (1, 2), (2, 1)]  # kept pairs, reverses of the annotated ones included
LOGITS = [[2.0, 1.0, 0.5, 1.5, 0.0, -1.0, 3.0],   # (0, 1): annotated "on"
          [0.2, 0.1, 0.0, 0.3, 0.0, 0.0, 0.0],    # (1, 0)
          [0.5, 0.0, -0.5, 1.0, 0.2, 2.5, 1.0],   # (0, 2): annotated "holding"
          [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],    # (2, 0)
          [1.0, 0.5, 0.0, 0.8, -0.2, 1.2, 0.0],   # (1, 2): annotated "near"
          [1.5, 0.0, 0.7, -0.3, 0.0, 0.4, 2.0]]   # (2, 1): annotated "under"
MIXED = [[0.30, 0.20, 0.0, 0.0, 0.0, 0.0, 0.0],  # mixed cosine, read by the swap hinge only
         [0.20, 0.40, 0.0, 0.0, 0.0, 0.0, 0.0],
         [0.0, 0.0, 0.0, 0.0, 0.0, 0.10, 0.0],
         [0.0, 0.0, 0.0, 0.0, 0.0, 0.30, 0.0],
         [0.0, 0.0, 0.50, 0.50, 0.0, 0.0, 0.0],
         [0.0, 0.0, 0.60, 0.0, 0.0, 0.0, 0.0]]
RELS = [(0, 1, ON), (0, 2, HOLDING), (1, 2, NEAR), (2, 1, UNDER)]
P_NEAR_GIVEN_ON, P_UNDER_GIVEN_ON, P_ON_GIVEN_NEAR, P_HOLDING_GIVEN_NEAR = 0.4, 0.3, 0.2, 0.5
SYN_ON_ATOP = 0.5
P_DIR = [1.0, 1.0, 1.0, 0.0, 0.0, 0.5, 0.0]
M = 0.05


def _space(scope=None) -> PredicateSpace:
    v = 7
    inverse = torch.zeros(v, v, dtype=torch.bool)
    for a, b in ((ON, UNDER), (ATOP, UNDER)):
        inverse[a, b] = inverse[b, a] = True
    p_cond = torch.zeros(v, v)
    p_cond[ON, NEAR], p_cond[ON, UNDER] = P_NEAR_GIVEN_ON, P_UNDER_GIVEN_ON
    p_cond[NEAR, ON], p_cond[NEAR, HOLDING] = P_ON_GIVEN_NEAR, P_HOLDING_GIVEN_NEAR
    syn = torch.eye(v)
    syn[ON, ATOP] = syn[ATOP, ON] = SYN_ON_ATOP
    return PredicateSpace(group=torch.tensor([0, 0, 1, 2, 3, 4, 5]), inverse=inverse,
                          p_directional=torch.tensor(P_DIR), p_cond=p_cond, syn_weight=syn,
                          bank_cols=torch.arange(v), category_bank=torch.eye(2, 4), pair_rate=torch.zeros(2, 2),
                          scope=scope)


def _batch():
    flat = torch.tensor([[i * N + j for i, j in PAIRS]])
    sampled = SampledPairs(pairs=torch.tensor([PAIRS]), valid=torch.ones(1, len(PAIRS), dtype=torch.bool), flat=flat,
                           l_pair=torch.zeros(1, len(PAIRS)), geo_logits=torch.zeros(1, N * N),
                           geo_valid=torch.zeros(1, N * N, dtype=torch.bool), rel_flat=flat,
                           rel_logits=torch.zeros(1, len(PAIRS)), rel_valid=torch.zeros(1, len(PAIRS), dtype=torch.bool))
    scores = SimpleNamespace(logits=torch.tensor([LOGITS]), mixed=torch.tensor([MIXED]))
    out = SimpleNamespace(sampled=sampled, scores=scores, grounding=torch.zeros(1, N, 4))
    rels = torch.tensor([RELS])
    return out, rels, torch.full((1, N), -1), torch.ones(1, N, dtype=torch.bool)


def _only(term: str, **kw) -> LossConfig:
    weights = dict.fromkeys(("infonce", "sigmoid", "swap", "background", "grounding", "geometry", "relatedness"), 0.0)
    return LossConfig(**{**weights, term: 1.0, **kw})


def _row(pos: list[tuple[float, float]], neg: list[tuple[float, float]]) -> float:
    """One InfoNCE row by the definition: positives (logit, weight), negatives (logit, discount)."""
    z = sum(d * math.exp(x) for x, d in neg)
    per = [(w, -math.log(math.exp(x) / (math.exp(x) + z))) for x, w in pos]
    return sum(w * l for w, l in per) / sum(w for w, _ in per)


def _infonce_by_hand(discount: bool = True, near_allowed: bool = True) -> float:
    L = LOGITS
    near = [] if not near_allowed else None
    # row "on" at (0,1): positives on (1) and its synonym atop (0.5); negatives are the batch's other
    # predicates: holding, near (discounted by 1 - P(near|on)) and under (inverse of on: never discounted)
    r1 = _row([(L[0][ON], 1.0), (L[0][ATOP], SYN_ON_ATOP)],
              [(L[0][HOLDING], 1.0), (L[0][UNDER], 1.0)]
              + (near if near is not None else [(L[0][NEAR], 1 - P_NEAR_GIVEN_ON if discount else 1.0)]))
    # row "holding" at (0,2): nothing is known to co-occur with holding
    r2 = _row([(L[2][HOLDING], 1.0)],
              [(L[2][ON], 1.0), (L[2][UNDER], 1.0)] + (near if near is not None else [(L[2][NEAR], 1.0)]))
    # row "near" at (1,2): on and holding discounted by P(.|near); "near" is this row's own
    # annotation, so a scope cannot remove it
    r3 = _row([(L[4][NEAR], 1.0)],
              [(L[4][ON], 1 - P_ON_GIVEN_NEAR if discount else 1.0),
               (L[4][HOLDING], 1 - P_HOLDING_GIVEN_NEAR if discount else 1.0), (L[4][UNDER], 1.0)])
    # row "under" at (2,1): on is its inverse (full weight)
    r4 = _row([(L[5][UNDER], 1.0)],
              [(L[5][ON], 1.0), (L[5][HOLDING], 1.0)] + (near if near is not None else [(L[5][NEAR], 1.0)]))
    return (r1 + r2 + r3 + r4) / 4


def test_infonce_with_batch_negatives_discount_and_inverse_exemption():
    out, rels, cats, valid = _batch()
    got = relation_objective(out, rels, cats, valid, _space(), _only("infonce"))
    assert got["infonce"].item() == pytest.approx(_infonce_by_hand(), abs=1e-5)
    assert got["total"].item() == pytest.approx(got["infonce"].item(), abs=1e-6)


def test_infonce_discount_switch():
    out, rels, cats, valid = _batch()
    got = relation_objective(out, rels, cats, valid, _space(), _only("infonce", pu_discount=False))
    assert got["infonce"].item() == pytest.approx(_infonce_by_hand(discount=False), abs=1e-5)
    assert abs(_infonce_by_hand(discount=False) - _infonce_by_hand()) > 0.02  # the case tells the two apart


def test_infonce_bank_negatives_add_the_unannotated_columns():
    """'bank': beside and touching (never annotated in the batch) become negatives of every row."""
    out, rels, cats, valid = _batch()
    got = relation_objective(out, rels, cats, valid, _space(), _only("infonce", negatives="bank"))
    L = LOGITS
    extra = {0: [(L[0][TOUCHING], 1.0), (L[0][BESIDE], 1.0)], 2: [(L[2][TOUCHING], 1.0), (L[2][BESIDE], 1.0), ],
             4: [(L[4][TOUCHING], 1.0), (L[4][BESIDE], 1.0), (L[4][ATOP], 1.0)],
             5: [(L[5][TOUCHING], 1.0), (L[5][BESIDE], 1.0), (L[5][ATOP], 1.0)]}
    # atop is a negative of rows whose group is not on's; for "under" it is an inverse (full weight)
    r1 = _row([(L[0][ON], 1.0), (L[0][ATOP], SYN_ON_ATOP)],
              [(L[0][HOLDING], 1.0), (L[0][UNDER], 1.0), (L[0][NEAR], 1 - P_NEAR_GIVEN_ON)] + extra[0])
    r2 = _row([(L[2][HOLDING], 1.0)], [(L[2][ON], 1.0), (L[2][UNDER], 1.0), (L[2][NEAR], 1.0),
                                        (L[2][ATOP], 1.0)] + extra[2])
    r3 = _row([(L[4][NEAR], 1.0)], [(L[4][ON], 1 - P_ON_GIVEN_NEAR), (L[4][HOLDING], 1 - P_HOLDING_GIVEN_NEAR),
                                     (L[4][UNDER], 1.0)] + extra[4])
    r4 = _row([(L[5][UNDER], 1.0)], [(L[5][ON], 1.0), (L[5][HOLDING], 1.0), (L[5][NEAR], 1.0)] + extra[5])
    assert got["infonce"].item() == pytest.approx((r1 + r2 + r3 + r4) / 4, abs=1e-5)


def test_infonce_cap_on_negatives_keeps_every_candidate_when_it_is_large_enough():
    out, rels, cats, valid = _batch()
    capped = relation_objective(out, rels, cats, valid, _space(), _only("infonce", negatives_per_anchor=4))
    assert capped["infonce"].item() == pytest.approx(_infonce_by_hand(), abs=1e-5)
    one = relation_objective(out, rels, cats, valid, _space(), _only("infonce", negatives_per_anchor=1),
                             generator=torch.Generator().manual_seed(0))
    assert one["infonce"].item() < _infonce_by_hand()  # one negative per row: a smaller denominator


def _scope_without_near() -> torch.Tensor:
    scope = torch.ones(2, 7, dtype=torch.bool)
    scope[1, NEAR] = False  # source 1 never annotates "near"
    return scope


def test_source_mask_removes_what_the_source_could_not_annotate():
    out, rels, cats, valid = _batch()
    space = _space(_scope_without_near())
    masked = relation_objective(out, rels, cats, valid, space, _only("infonce"), sources=torch.tensor([1]))
    assert masked["infonce"].item() == pytest.approx(_infonce_by_hand(near_allowed=False), abs=1e-5)
    # the unscoped row 0, the switch off, or no sources given: the mask does nothing
    for kw, cfg in (({"sources": torch.tensor([0])}, _only("infonce")),
                    ({"sources": torch.tensor([1])}, _only("infonce", source_negatives=False)), ({}, _only("infonce"))):
        got = relation_objective(out, rels, cats, valid, space, cfg, **kw)
        assert got["infonce"].item() == pytest.approx(_infonce_by_hand(), abs=1e-5)


def _bce(x: float, y: int) -> float:
    return -math.log(1 / (1 + math.exp(-x))) if y else -math.log(1 - 1 / (1 + math.exp(-x)))


def _sigmoid_by_hand(near_allowed: bool = True) -> float:
    """Per annotated pair: positives = its annotated groups' columns, negatives share a total weight
    equal to the positive count; normalised by twice the positives over the batch."""
    num, den = 0.0, 0.0
    for pos_row, positives in ((0, {ON, ATOP}), (2, {HOLDING}), (4, {NEAR}), (5, {UNDER})):
        negs = [c for c in range(7) if c not in positives and (near_allowed or c != NEAR)]
        num += sum(_bce(LOGITS[pos_row][c], 1) for c in positives)
        num += len(positives) / len(negs) * sum(_bce(LOGITS[pos_row][c], 0) for c in negs)
        den += 2 * len(positives)
    return num / den


def test_sigmoid_aux_on_annotated_pairs_and_its_source_mask():
    out, rels, cats, valid = _batch()
    got = relation_objective(out, rels, cats, valid, _space(), _only("sigmoid"))
    assert got["sigmoid"].item() == pytest.approx(_sigmoid_by_hand(), abs=1e-5)
    masked = relation_objective(out, rels, cats, valid, _space(_scope_without_near()), _only("sigmoid"),
                                sources=torch.tensor([1]))
    assert masked["sigmoid"].item() == pytest.approx(_sigmoid_by_hand(near_allowed=False), abs=1e-5)


def test_swap_hinge_eq5_over_each_annotation_group_member():
    """w_p * max(0, m - c(i,j,p) + c(j,i,p)) averaged over (annotation, group member) cells."""
    out, rels, cats, valid = _batch()
    got = relation_objective(out, rels, cats, valid, _space(), _only("swap", swap_margin=M))
    cells = [(0, 1, ON), (0, 1, ATOP), (2, 3, HOLDING), (4, 5, NEAR), (5, 4, UNDER)]  # (fwd row, rev row, column)
    want = sum(P_DIR[c] * max(0.0, M - MIXED[f][c] + MIXED[r][c]) for f, r, c in cells) / len(cells)
    assert want > 0.02  # atop and holding violate the margin, on and under satisfy it
    assert got["swap"].item() == pytest.approx(want, abs=1e-6)


def test_a_synonym_with_zero_weight_is_never_a_negative_of_its_group():
    """Isotonic synonym weights can reach 0; such a member then drops out of the row entirely."""
    out, rels, cats, valid = _batch()
    space = _space()
    space.syn_weight[ON, ATOP] = space.syn_weight[ATOP, ON] = 0.0
    got = relation_objective(out, rels, cats, valid, space, _only("infonce", negatives="bank"))
    L = LOGITS
    others = [TOUCHING, BESIDE]
    r1 = _row([(L[0][ON], 1.0)], [(L[0][HOLDING], 1.0), (L[0][UNDER], 1.0), (L[0][NEAR], 1 - P_NEAR_GIVEN_ON)]
              + [(L[0][c], 1.0) for c in others])
    r2 = _row([(L[2][HOLDING], 1.0)], [(L[2][c], 1.0) for c in (ON, ATOP, UNDER, NEAR, *others)])
    r3 = _row([(L[4][NEAR], 1.0)], [(L[4][ON], 1 - P_ON_GIVEN_NEAR), (L[4][HOLDING], 1 - P_HOLDING_GIVEN_NEAR)]
              + [(L[4][c], 1.0) for c in (ATOP, UNDER, *others)])
    r4 = _row([(L[5][UNDER], 1.0)], [(L[5][c], 1.0) for c in (ON, ATOP, HOLDING, NEAR, *others)])
    assert got["infonce"].item() == pytest.approx((r1 + r2 + r3 + r4) / 4, abs=1e-5)


FAMILY = torch.tensor([0, 0, 0, 1, 0, 2, 1])  # on, atop, under, touching: one family; near, beside; holding


def test_family_scope_leaves_other_families_unlabelled():
    """``negatives_scope='family'``: an annotated pair's negatives are only the unstated predicates of
    its annotations' own families. "on" at (0, 1) is contrasted with "under" (same family), no longer
    with "near" or "holding"; "holding" and "near" have no other predicate of their family in the
    batch, so their rows have no negative and cost nothing; the per-cell sigmoid's negatives shrink
    the same way (touching and under for "on"; beside for "near"; none for "holding")."""
    out, rels, cats, valid = _batch()
    space = _space()
    space.family = FAMILY
    got = relation_objective(out, rels, cats, valid, space, _only("infonce", negatives_scope="family"))
    L = LOGITS
    r1 = _row([(L[0][ON], 1.0), (L[0][ATOP], SYN_ON_ATOP)], [(L[0][UNDER], 1.0)])
    r4 = _row([(L[5][UNDER], 1.0)], [(L[5][ON], 1.0)])
    assert got["infonce"].item() == pytest.approx((r1 + 0.0 + 0.0 + r4) / 4, abs=1e-5)
    sig = relation_objective(out, rels, cats, valid, space, _only("sigmoid", negatives_scope="family"))
    num = den = 0.0
    for row, positives, negs in ((0, {ON, ATOP}, [UNDER, TOUCHING]), (2, {HOLDING}, []), (4, {NEAR}, [BESIDE]),
                                 (5, {UNDER}, [ON, ATOP, TOUCHING])):
        num += sum(_bce(L[row][c], 1) for c in positives)
        num += len(positives) / max(1, len(negs)) * sum(_bce(L[row][c], 0) for c in negs)
        den += 2 * len(positives)
    assert sig["sigmoid"].item() == pytest.approx(num / den, abs=1e-5)
    with pytest.raises(ValueError, match="family ids"):
        relation_objective(out, rels, cats, valid, _space(), _only("sigmoid", negatives_scope="family"))


def test_gate_negatives_push_down_only_what_the_boxes_rule_out():
    """Conditions (meet, close) per pair and needs per column: "on" and "touching" need the boxes
    to meet, "near" needs them close, the rest nothing. On (0, 1) the boxes meet; on (0, 2), (2, 0)
    they do not and are far; on (1, 2), (2, 1) they are apart but close. Ruled out: on, atop and
    touching (and under, which also needs contact) on the far pairs and the close pairs, near on
    the far pairs; "near" stated at (1, 2) is never among them, nor is anything on (0, 1)."""
    import torch.nn.functional as F

    out, rels, cats, valid = _batch()
    space = _space()
    needs = torch.zeros(7, 2, dtype=torch.bool)
    needs[[ON, ATOP, UNDER, TOUCHING], 0] = True
    needs[NEAR, 1] = True
    space.conditions = needs
    cond = torch.zeros(1, N * N, 2, dtype=torch.bool)
    for (i, j), (meet, close) in {(0, 1): (1, 1), (1, 0): (1, 1), (0, 2): (0, 0), (2, 0): (0, 0),
                                  (1, 2): (0, 1), (2, 1): (0, 1)}.items():
        cond[0, i * N + j] = torch.tensor([bool(meet), bool(close)])
    got = relation_objective(out, rels, cats, valid, space, _only("gate_negatives", gate_negatives=1.0),
                             conditions=cond)
    L = LOGITS
    ruled = [L[r][c] for r in (2, 3) for c in (ON, ATOP, UNDER, TOUCHING, NEAR)]
    ruled += [L[r][c] for r in (4, 5) for c in (ON, ATOP, UNDER, TOUCHING) if not (r == 5 and c == UNDER)]
    want = sum(float(F.softplus(torch.tensor(x))) for x in ruled) / len(ruled)
    assert got["gate_negatives"].item() == pytest.approx(want, abs=1e-5)
    assert got["total"].item() == pytest.approx(want, abs=1e-5)


def _sampled_by_hand(weight) -> float:
    positives = {0: {ON, ATOP}, 2: {HOLDING}, 4: {NEAR}, 5: {UNDER}}
    pos = [(r, c) for r, cs in positives.items() for c in cs]
    neg = [(r, c) for r in range(6) for c in range(7) if c not in positives.get(r, set())]
    assert len(pos) == 5 and len(neg) == 37
    total = sum(weight(r, c) for r, c in neg)
    return (sum(_bce(LOGITS[r][c], 1) for r, c in pos)
            + 5 / total * sum(weight(r, c) * _bce(LOGITS[r][c], 0) for r, c in neg)) / 10


def test_sampled_sigmoid_rows_weigh_unstated_cells_by_eq3():
    """``sigmoid_rows='sampled'``: the two unannotated kept pairs (1, 0) and (2, 0) join as rows of
    negatives only, and the 37 negative cells share the 5 positives' weight in proportion to how surely
    each is false: on an annotated pair prod(1 - P(q|p)) (Eq. 3: "near" on the "on" pair 0.6; "on" and
    "holding" on the "near" pair 0.8 and 0.5; the inverse "under" of "on" keeps 1), on an unannotated
    pair 1 - P(q | nothing stated) ("touching": 0.5), on a pair a pass was asked every relation of 1."""
    out, rels, cats, valid = _batch()
    space = _space()
    space.p_unstated = torch.zeros(7)
    space.p_unstated[TOUCHING] = 0.5
    disc = {(0, NEAR): 1 - P_NEAR_GIVEN_ON, (4, ON): 1 - P_ON_GIVEN_NEAR, (4, HOLDING): 1 - P_HOLDING_GIVEN_NEAR}

    def weight(complete_rows):
        def w(r, c):
            if r in complete_rows:
                return 1.0
            if r in (1, 3):  # unannotated
                return 0.5 if c == TOUCHING else 1.0
            return disc.get((r, c), 1.0)
        return w

    got = relation_objective(out, rels, cats, valid, space, _only("sigmoid", sigmoid_rows="sampled"))
    assert got["sigmoid"].item() == pytest.approx(_sampled_by_hand(weight(())), abs=1e-5)
    complete = torch.zeros(1, N * N, dtype=torch.bool)
    complete[0, [0 * N + 1, 1 * N + 0]] = True  # the pair {0, 1} was asked about, both ways
    got = relation_objective(out, rels, cats, valid, space, _only("sigmoid", sigmoid_rows="sampled"), complete=complete)
    assert got["sigmoid"].item() == pytest.approx(_sampled_by_hand(weight((0, 1))), abs=1e-5)
    plain = relation_objective(out, rels, cats, valid, space, _only("sigmoid", sigmoid_rows="sampled", pu_discount=False))
    assert plain["sigmoid"].item() == pytest.approx(_sampled_by_hand(lambda r, c: 1.0), abs=1e-5)


def test_an_asked_pair_has_no_eq3_discount_in_the_infonce():
    """The "on" pair (0, 1) asked about: its row's "near" negative is no longer discounted."""
    out, rels, cats, valid = _batch()
    complete = torch.zeros(1, N * N, dtype=torch.bool)
    complete[0, [1, 3]] = True
    got = relation_objective(out, rels, cats, valid, _space(), _only("infonce"), complete=complete)
    L = LOGITS
    r1 = _row([(L[0][ON], 1.0), (L[0][ATOP], SYN_ON_ATOP)], [(L[0][HOLDING], 1.0), (L[0][UNDER], 1.0), (L[0][NEAR], 1.0)])
    r2 = _row([(L[2][HOLDING], 1.0)], [(L[2][ON], 1.0), (L[2][UNDER], 1.0), (L[2][NEAR], 1.0)])
    r3 = _row([(L[4][NEAR], 1.0)], [(L[4][ON], 1 - P_ON_GIVEN_NEAR), (L[4][HOLDING], 1 - P_HOLDING_GIVEN_NEAR),
                                     (L[4][UNDER], 1.0)])
    r4 = _row([(L[5][UNDER], 1.0)], [(L[5][ON], 1.0), (L[5][HOLDING], 1.0), (L[5][NEAR], 1.0)])
    assert got["infonce"].item() == pytest.approx((r1 + r2 + r3 + r4) / 4, abs=1e-5)


def _grads(term: str, space: PredicateSpace, complete=None, **kw) -> torch.Tensor:
    out, rels, cats, valid = _batch()
    out.scores.logits.requires_grad_(True)
    got = relation_objective(out, rels, cats, valid, space, _only(term, **kw), complete=complete)
    got[term].backward()
    return out.scores.logits.grad[0]


@pytest.mark.parametrize("term,kw", [("sigmoid", {"sigmoid_rows": "sampled"}), ("sigmoid", {}), ("infonce", {}),
                                     ("background", {})])
def test_unlabelled_family_has_no_negatives_off_asked_pairs(term, kw):
    """data.unlabelled_families: "near" unstated on a pair nobody asked every relation of is no negative
    (no gradient from the term), stated it is still a positive, and on an asked pair unstated it is a
    negative again. Rows 0 and 1 are the pair {0, 1} ("on"), row 1 unannotated; row 4 states "near"."""
    plain, unl = _space(), _space()
    unl.unlabelled = torch.zeros(7, dtype=torch.bool)
    unl.unlabelled[NEAR] = True
    before, after = _grads(term, plain, **kw), _grads(term, unl, **kw)
    rows = {"sigmoid": [0, 1] if kw else [0], "infonce": [0], "background": [1]}[term]
    for r in rows:
        assert before[r, NEAR].abs() > 1e-4, (term, r)  # pushed down as a negative without the setting
        assert after[r, NEAR] == 0.0, (term, r)
    if term == "sigmoid":
        assert after[4, NEAR] < 0  # the stated "near" is still pulled up
    complete = torch.zeros(1, N * N, dtype=torch.bool)
    complete[0, [0 * N + 1, 1 * N + 0]] = True  # the pair {0, 1} asked about, both ways
    asked = _grads(term, unl, complete=complete, **kw)
    for r in rows:
        assert asked[r, NEAR] > 1e-4, (term, r)  # a negative again: gradient pushes the logit down
