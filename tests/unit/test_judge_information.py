"""Eq. 4 surprisal and the KT description length on hand-computed values (seed 001, § 6.5, D.8.1)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from relate.judge.information import build_reference, judged_information, shared_vocabulary, surprisal
from relate.judge.kt import POOLED, kt_bits_per_image, kt_code_length, kt_code_length_sequential, pool_rare


def test_worked_surprisal_values():
    assert surprisal(0.2) == pytest.approx(2.32, abs=0.005)
    assert surprisal(0.5) == pytest.approx(1.0)
    assert surprisal(1.0) == 0.0
    # § 6.5 prices "on" at 2.31 bits and "riding" at 7.04: p = 2^-bits
    assert surprisal(2 ** -7.04) == pytest.approx(7.04)
    with pytest.raises(ValueError, match="probability"):
        surprisal(0.0)


def test_reference_restricted_to_shared_predicates_and_renormalised():
    counts = {"on": 20, "holding": 30, "Riding": 50, "zebra-only": 900}
    vocab = shared_vocabulary({"a": ["on", "holding", "riding", "zebra-only"], "b": ["ON ", "holding", "riding", "near"]})
    assert vocab == {"on", "holding", "riding"}
    ref = build_reference(counts, vocab)
    assert ref.probs == pytest.approx({"holding": 0.3, "on": 0.2, "riding": 0.5})
    assert ref.bits("on") == pytest.approx(2.3219, abs=1e-4)
    assert ref.excluded_mass == pytest.approx(0.9)
    assert ref.bits("zebra-only") is None and "near" not in ref


def test_shared_predicate_unseen_by_reference_is_reported_not_smoothed():
    ref = build_reference({"on": 1, "near": 3}, {"on", "near", "floating over"})
    assert ref.missing == ("floating over",)
    assert ref.bits("floating over") is None


def test_eq4_sums_surprisal_of_accepted_relations_only():
    ref = build_reference({"on": 2, "holding": 6})  # p(on)=0.25 -> 2 bits, p(holding)=0.75
    preds = ["on", "on", "holding", "near", "on"]
    verdicts = [True, False, True, True, None]  # None = unparseable, never an acceptance
    s = judged_information(preds, verdicts, ref, images=2)
    assert s.accepted == 3 and s.accepted_in_reference == 2
    assert s.bits == pytest.approx(2.0 + math.log2(4 / 3))
    assert s.bits_per_image == pytest.approx(s.bits / 2)
    assert s.out_of_reference_share == pytest.approx(1 / 3)  # "near": reported, no bits folded in
    assert s.bits_per_accepted == pytest.approx(s.bits / 2)


def test_kt_hand_computed_streams():
    # a a b, K=2: 1/2 * 3/4 * 1/6 = 1/16 -> 4 bits
    assert kt_code_length_sequential(list("aab")) == pytest.approx(4.0)
    assert kt_code_length({"a": 2, "b": 1}) == pytest.approx(4.0)
    # a b, K=2: 1/2 * 1/4 -> 3 bits; one symbol over a one-letter alphabet is free
    assert kt_code_length({"a": 1, "b": 1}) == pytest.approx(3.0)
    assert kt_code_length({"on": 7}) == 0.0
    # declared vocabulary of 4: first "on" costs log2(4) = 2 bits, the second log2(3) (P = 1.5/3 ... )
    assert kt_code_length({"on": 1}, vocabulary_size=4) == pytest.approx(2.0)
    assert kt_code_length({"on": 2}, vocabulary_size=4) == pytest.approx(2.0 + math.log2(3 / 1.5))
    with pytest.raises(ValueError, match="vocabulary_size"):
        kt_code_length({"a": 1, "b": 1}, vocabulary_size=1)


def test_kt_repetition_is_cheap_and_vocabulary_costs():
    repetitive = kt_code_length({"on": 100})
    varied = kt_code_length({p: 10 for p in "abcdefghij"})
    assert repetitive == 0.0 < varied
    assert kt_code_length({"on": 100}, vocabulary_size=50) < kt_code_length({"on": 100}, vocabulary_size=500)


def test_pooling_threshold():
    stream = ["on"] * 5 + ["near"] * 2 + ["riding"]
    assert pool_rare(stream, 1) == {"on": 5, "near": 2, "riding": 1}
    assert pool_rare(stream, 3) == {"on": 5, POOLED: 3}
    # pooled stream "on x5, <pooled> x3" over K=2, divided by 4 images
    assert kt_bits_per_image(stream, images=4, min_count=3) == pytest.approx(kt_code_length({"a": 5, "b": 3}) / 4)
    assert kt_bits_per_image(stream, 4, 1) > kt_bits_per_image(stream, 4, 3) > kt_bits_per_image(stream, 4, 10) == 0.0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["on", "near", "holding", "in", "behind"]), max_size=40),
       st.integers(min_value=0, max_value=5))
def test_kt_closed_form_matches_sequential_coding(stream, extra):
    k = len(set(stream)) + extra if stream else None
    assert kt_code_length({p: stream.count(p) for p in set(stream)}, k) == pytest.approx(
        kt_code_length_sequential(stream, k), abs=1e-9)
