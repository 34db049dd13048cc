"""The learned linear probe: no leak across folds (random data at chance), and a planted signal found."""

from __future__ import annotations

import numpy as np
import pytest

from relate.probe.linear_probe import cross_validated_probe, pair_difference_features


def _random_triplets(n: int, dim: int, seed: int):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(3, n, dim))


def test_random_triplets_score_near_chance_and_a_leaky_split_would_not():
    # 120 triplets in 300 dimensions: a linear model can memorise its training rows, so a split
    # that put a triplet's (x, 1) and (-x, 0) rows on both sides would score near 100%.
    accs = [np.mean(cross_validated_probe(*_random_triplets(120, 300, s), n_splits=5).correct) for s in range(4)]
    assert abs(np.mean(accs) - 0.5) < 0.08, accs
    # The same data with rows as their own groups (the leak GroupKFold prevents) is far above chance.
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import KFold, cross_val_predict

    x = pair_difference_features(*_random_triplets(120, 300, 0))
    rows, labels = np.concatenate([x, -x]), np.r_[np.ones(120), np.zeros(120)]
    pred = cross_val_predict(LogisticRegression(fit_intercept=False, max_iter=1000), rows, labels,
                             cv=KFold(5, shuffle=True, random_state=0))
    assert (pred == labels).mean() > 0.7  # each row whose twin sat in training is scored right


def test_planted_linear_signal_is_found_where_cosine_misses_it():
    rng = np.random.default_rng(1)
    n, dim = 200, 64
    q, t, d = rng.normal(size=(3, n, dim))
    t[:, :2] = 0.5 * q[:, :2]  # the target agrees with the query on two dimensions
    d[:, :2] = -0.5 * q[:, :2]  # and the distractor disagrees there
    res = cross_validated_probe(q, t, d, n_splits=5)
    from relate.probe import cosine_correct

    assert np.mean(cosine_correct(q, t, d)) < 0.8 < np.mean(res.correct)
    assert len(res.fold_accuracy) == 5 and len(res.correct) == n
    # Grouping whole query classes together still works (and groups are checked).
    groups = np.repeat(np.arange(20), 10)
    assert np.mean(cross_validated_probe(q, t, d, groups=groups, features="absdiff").correct) > 0.6
    with pytest.raises(ValueError, match="one label per triplet"):
        cross_validated_probe(q, t, d, groups=groups[:5])
    with pytest.raises(ValueError, match="n_splits"):
        cross_validated_probe(q[:3], t[:3], d[:3], n_splits=5)
