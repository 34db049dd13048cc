"""Converse scoring (relate.converse): each statement averaged with the same fact stated from the other
end, by the predicate knowledge file's inverse and symmetric groups, worked by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from relate.api import RelationPredictor
from relate.converse import converse_logits, converse_map, converse_partners
from relate.model import create_relation_model

# rows: the ordered pairs (0, 1), (1, 0), (0, 2); (2, 0) is not scored
PAIRS = np.array([[0, 1], [1, 0], [0, 2]])


def test_each_statement_is_averaged_with_its_converse_on_the_reversed_pair():
    vocab = ["in front of", "behind", "near", "holding", "zorbing"]
    l = np.array([[4.0, -2.0, 1.0, 3.0, 5.0],     # (0, 1)
                  [0.0, 2.0, -1.0, -3.0, 7.0],    # (1, 0)
                  [1.0, 1.0, 1.0, 1.0, 1.0]], np.float32)  # (0, 2)
    got = converse_logits(PAIRS, l, converse_map(vocab))
    want = np.array([[(4 + 2) / 2, (-2 + 0) / 2, (1 - 1) / 2, 3.0, 5.0],
                     # "holding" has no converse group, "zorbing" is in no group: both left alone
                     [(0 - 2) / 2, (2 + 4) / 2, (-1 + 1) / 2, -3.0, 7.0],
                     [1.0, 1.0, 1.0, 1.0, 1.0]], np.float32)  # (2, 0) not scored: left alone
    np.testing.assert_allclose(got, want)
    np.testing.assert_array_equal(l[0], [4.0, -2.0, 1.0, 3.0, 5.0])  # the input is not written


def test_the_converse_group_speaks_through_its_best_form_and_an_absent_one_changes_nothing():
    l = np.array([[1.0, 0.0, 0.0],
                  [0.0, -4.0, 3.0],
                  [9.0, 9.0, 9.0]], np.float32)
    # "behind" and "hidden behind" are one group, the inverse of "in front of"'s
    got = converse_logits(PAIRS, l, converse_map(["in front of", "behind", "hidden behind"]))
    assert got[0, 0] == pytest.approx((1.0 + 3.0) / 2)  # the better of the group's two forms on (1, 0)
    assert got[1, 1] == pytest.approx((-4.0 + 1.0) / 2) and got[1, 2] == pytest.approx((3.0 + 1.0) / 2)
    # without the inverse group in the vocabulary a directional statement has nothing to agree with
    alone = converse_logits(PAIRS, l[:, :1], converse_map(["in front of"]))
    np.testing.assert_array_equal(alone, l[:, :1])
    assert not converse_map(["in front of", "holding"]).active


def test_the_predictor_applies_it_only_when_the_model_asks(monkeypatch):
    from test_model_forward_api import random_bank, tiny_cfg

    vocab = ["left of", "right of", "near", "holding"]
    torch.manual_seed(0)
    model = create_relation_model(tiny_cfg()).eval()
    image = (np.random.default_rng(0).random((40, 48, 3)) * 255).astype(np.uint8)
    boxes = [[2, 2, 20, 20], [18, 10, 40, 30], [5, 25, 30, 38]]
    raw = RelationPredictor(model, random_bank(vocab)).score_images([image], [boxes])[0]
    model.cfg = model.cfg.model_copy(update={"converse_scoring": True})
    both = RelationPredictor(model, random_bank(vocab)).score_images([image], [boxes])[0]
    np.testing.assert_array_equal(both.pairs, raw.pairs)
    np.testing.assert_array_equal(both.l_pair, raw.l_pair)  # the pair's relatedness stays its own
    row = {tuple(p): i for i, p in enumerate(raw.pairs.tolist())}
    checked = 0
    for (s, o), i in row.items():
        j = row.get((o, s))
        if j is None:
            continue
        checked += 1
        assert both.l_pred[i, 0] == pytest.approx((raw.l_pred[i, 0] + raw.l_pred[j, 1]) / 2, abs=1e-5)
        assert both.l_pred[i, 2] == pytest.approx((raw.l_pred[i, 2] + raw.l_pred[j, 2]) / 2, abs=1e-5)
        assert both.l_pred[i, 3] == pytest.approx(raw.l_pred[i, 3])
    assert checked >= 2
    # the argument overrides the checkpoint's setting either way
    off = RelationPredictor(model, random_bank(vocab), converse=False).score_images([image], [boxes])[0]
    np.testing.assert_array_equal(off.l_pred, raw.l_pred)


def test_a_novel_predicate_never_borrows_its_trained_converse():
    """A compliant model was trained on "in front of" and not on "behind" (held out): "behind" keeps
    its own logit, whatever "in front of" scores on the reversed pair, and "in front of" does not
    read the untrained "behind" either; a trained pair ("left of" / "right of") still averages."""
    vocab = ["in front of", "behind", "left of", "right of"]
    trained = ["in front of", "left of", "right of"]
    l = np.array([[4.0, -2.0, 1.0, 0.0],
                  [0.0, 2.0, 3.0, 5.0],
                  [1.0, 1.0, 1.0, 1.0]], np.float32)
    cmap = converse_map(vocab, trained=trained)
    got = converse_logits(PAIRS, l, cmap)
    np.testing.assert_array_equal(got[:, :2], l[:, :2])
    assert got[0, 2] == pytest.approx((1.0 + 5.0) / 2) and got[1, 3] == pytest.approx((5.0 + 1.0) / 2)
    for base in (-50.0, 50.0):  # the novel column is blind to the trained converse's scores
        moved = l.copy()
        moved[:, 0] = base
        np.testing.assert_array_equal(converse_logits(PAIRS, moved, cmap)[:, 1], l[:, 1])
    # two untrained converse groups still average with each other
    both_novel = converse_logits(PAIRS, l, converse_map(vocab, trained=["left of", "right of"]))
    assert both_novel[0, 1] == pytest.approx((-2.0 + 0.0) / 2)


def test_the_split_names_each_novel_string_a_converse_table_would_lend_its_trained_converse():
    """relate.data.predicate_split.converse_leaks, by hand: under synthetic_ovr "behind" (and its synonym
    "hidden behind") are novel and "in front of" is base. A table that ignores what the model was
    trained on ties each novel form to the trained converse; the guarded table ties none, and a
    converse the model was not trained on lends nothing, so it is no leak."""
    from relate.data.predicate_split import converse_leaks, load_predicate_split

    split = load_predicate_split("synthetic_ovr")
    vocab = ["in front of", "behind", "hidden behind", "left of", "right of"]
    trained = ["in front of", "left of", "right of"]
    assert converse_partners(vocab, converse_map(vocab)) == {
        "in front of": ("behind", "hidden behind"), "behind": ("in front of",), "hidden behind": ("in front of",),
        "left of": ("right of",), "right of": ("left of",)}
    assert converse_leaks(split, vocab, converse_map(vocab), trained) == {"behind": ("in front of",),
                                                                          "hidden behind": ("in front of",)}
    assert converse_leaks(split, vocab, converse_map(vocab, trained=trained), trained) == {}
    assert converse_leaks(split, vocab, converse_map(vocab), ["left of", "right of"]) == {}


def test_the_predictor_pairs_groups_by_what_its_bank_was_trained_on():
    from test_model_forward_api import random_bank, tiny_cfg

    torch.manual_seed(0)
    cfg = tiny_cfg().model_copy(update={"converse_scoring": True})
    model = create_relation_model(cfg).eval()
    pred = RelationPredictor(model, random_bank(["in front of", "left of", "right of"]))
    cmap = pred._converse_for(pred._bank_for(["in front of", "behind", "left of", "right of"])[0])
    assert cmap.partner[0] == -1 and cmap.partner[1] == -1 and cmap.partner[2] >= 0 and cmap.partner[3] >= 0
