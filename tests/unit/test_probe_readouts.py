"""Euclidean and rank readouts against scipy/numpy on hand-made vectors; cosine unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import euclidean
from scipy.stats import spearmanr

from relate.probe import cosine_correct
from relate.probe.readouts import SIMILARITIES, pair_similarity, readout_correct

A = np.array([[1.0, 2.0, 3.0, 4.0], [0.5, -1.0, 2.0, 2.0], [3.0, 3.0, 1.0, 0.0]])
B = np.array([[4.0, 3.0, 2.0, 1.0], [0.1, -2.0, 5.0, 5.0], [1.0, 2.0, 2.0, 9.0]])


def test_euclidean_and_spearman_equal_scipy():
    np.testing.assert_allclose(pair_similarity(A, B, "euclidean"), [-euclidean(a, b) for a, b in zip(A, B)])
    # row 1 has a tie (2.0, 2.0 and 5.0, 5.0): scipy averages tied ranks, and so must we
    np.testing.assert_allclose(pair_similarity(A, B, "spearman"),
                               [spearmanr(a, b).statistic for a, b in zip(A, B)], atol=1e-12)
    np.testing.assert_allclose(pair_similarity(A, B, "cosine"),
                               [a @ b / np.linalg.norm(a) / np.linalg.norm(b) for a, b in zip(A, B)])


def test_readouts_disagree_where_they_should():
    q = np.array([[1.0, 0.0, 0.0]])
    t = np.array([[10.0, 0.0, 0.0]])  # same direction, far away
    d = np.array([[0.8, 0.6, 0.0]])   # near, but at an angle
    assert readout_correct(q, t, d, "cosine")[0] and not readout_correct(q, t, d, "euclidean")[0]
    # rank readout ignores any monotone rescaling of values: only the order of dimensions counts
    q, t, d = np.array([[1.0, 2.0, 3.0]]), np.array([[1.0, 20.0, 300.0]]), np.array([[3.0, 2.0, 1.01]])
    assert readout_correct(q, t, d, "spearman")[0]
    assert pair_similarity(q, t, "spearman")[0] == pytest.approx(1.0)


def test_cosine_readout_is_todays_and_ties_are_wrong():
    rng = np.random.default_rng(0)
    q, t, d = rng.normal(size=(3, 50, 8))
    for m in SIMILARITIES:
        assert not readout_correct(q, q, q, m).any()  # a tie never earns credit
    np.testing.assert_array_equal(readout_correct(q, t, d), cosine_correct(q, t, d))
    with pytest.raises(ValueError, match="valid"):
        pair_similarity(q, t, "manhattan")  # type: ignore[arg-type]
