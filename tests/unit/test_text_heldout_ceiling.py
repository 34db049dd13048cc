"""scripts/text_heldout_ceiling.py: the passive-voice bound on held-out Table 16 AUC, by hand."""

from __future__ import annotations

import pytest

from scripts.text_heldout_ceiling import is_by_passive, passive_oracle_auc


def test_passive_cue_is_a_final_by_on_either_side():
    assert is_by_passive("biting", "bitten by") and is_by_passive("being worn by", "wears")
    assert not is_by_passive("following", "leading")
    assert not is_by_passive("nearby", "far from")


def test_oracle_moves_only_the_passive_pairs():
    # synonyms 0.5, 0.6 against inverses 0.7 (passive) and 0.55 (no cue): of the four
    # comparisons only 0.6 > 0.55 is ordered right, AUC 1/4; with the passive pair at -1 the
    # two comparisons against it are right too, 3/4, and 0.5 < 0.55 stays wrong.
    measured, oracle = passive_oracle_auc([0.5, 0.6], [("chewing", "chewed by", 0.7), ("x", "y", 0.55)])
    assert measured == pytest.approx(0.25) and oracle == pytest.approx(0.75)
