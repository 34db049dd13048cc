"""The zero-shot text baseline with the offline MiniLM: hand-picked odd-one-out triplets."""

from __future__ import annotations

import pytest

from relate.probe.text_baseline import odd_one_out, text_triplet_correct


@pytest.fixture(scope="module")
def minilm():
    from relate.text import load_text_encoder

    return load_text_encoder("minilm")


@pytest.mark.parametrize("names, odd", [
    (("cat", "dog", "car"), "car"),
    (("apple", "banana", "hammer"), "hammer"),
    (("piano", "violin", "carrot"), "carrot"),
    (("truck", "cat", "car"), "cat"),
])
def test_minilm_finds_the_odd_one_out(minilm, names, odd):
    for metric in ("cosine", "euclidean", "spearman"):
        assert odd_one_out(minilm, names, metric) == odd


def test_triplets_scored_from_class_names(minilm):
    q, t, d = ["cat", "hammer", "dog"], ["dog", "nail", "bone"], ["car", "apple", "sofa"]
    assert text_triplet_correct(minilm, q, t, d).tolist() == [True, True, True]
    assert text_triplet_correct(minilm, q, d, t).tolist() == [False, False, False]  # roles swapped
    with pytest.raises(ValueError, match="class name"):
        text_triplet_correct(minilm, ["cat"], [""], ["car"])
    with pytest.raises(ValueError, match="three distinct"):
        odd_one_out(minilm, ["cat", "cat", "car"])
