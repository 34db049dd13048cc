"""scripts.lever_ladder's table from hand-made kits (top-10 precision only, one value an image): a row's
figure is the mean over its seeds, its bracket the paired difference to the row above (the
reference's: the last ladder row's difference to it), and rows with different seed counts are refused
before anything is scored."""

import argparse

import numpy as np
import pytest

from relate.metrics.truth_intervals import TruthKit
from scripts.lever_ladder import _pair, ladder_rows


def _kit(values):
    return TruthKit(len(values), {}, np.asarray(values, float), 10)


def _cell(text):
    mean, _, rest = text.partition(" (")
    if not rest:
        return float(mean), None
    gap, _, ival = rest.rstrip(")]").partition(" [")
    lo, hi = ival.split(", ")
    return float(mean), (float(gap), float(lo), float(hi))


def test_rows_are_seed_means_with_paired_gaps():
    base = ("base", [_kit([1, 1, 0, 0]), _kit([1, 0, 0, 0])])           # 0.5 and 0.25
    same = ("same", [_kit([1, 1, 0, 0]), _kit([1, 0, 0, 0])])
    better = ("better", [_kit([1, 1, 1, 0]), _kit([1, 1, 0, 0])])      # 0.75 and 0.5: +0.25 on each seed
    best = ("best", [_kit([1, 1, 1, 1]), _kit([1, 1, 1, 0])])          # +0.25 on the row above, +0.5 on base
    ref = ("truth", [_kit([1, 1, 1, 1]), _kit([1, 1, 1, 1])])
    figures, rows = ladder_rows([base, same, better, best, ref], ladder=4, resamples=400)
    assert figures == ["top10_precision"]
    assert [r[0] for r in rows] == ["base", "same", "better", "best", "truth"]
    assert _cell(rows[0][1]) == (0.375, None)
    assert _cell(rows[1][1]) == (0.375, (0.0, 0.0, 0.0))  # identical to the row above on every draw
    mean, (gap, lo, hi) = _cell(rows[2][1])
    assert mean == 0.625 and gap == 0.25 and 0.0 <= lo <= 0.25 <= hi <= 1.0 and lo < hi
    mean, (gap, lo, hi) = _cell(rows[3][1])
    assert mean == 0.875 and gap == 0.25 and 0.0 <= lo <= 0.25 <= hi <= 1.0
    mean, (gap, lo, hi) = _cell(rows[4][1])  # the last ladder row against the reference
    assert mean == 1.0 and gap == -0.125 and -1.0 <= lo <= -0.125 <= hi <= 0.0


def test_rows_need_the_same_seeds():
    with pytest.raises(ValueError, match="same number of seeds"):
        ladder_rows([("a", [_kit([1, 0])]), ("b", [_kit([1, 0]), _kit([0, 1])])], ladder=2)


def test_row_argument_names_each_seed():
    assert _pair("+ implied relations=/r/a,/r/b") == ("+ implied relations", ["/r/a", "/r/b"])
    assert _pair("a=b=/r/x") == ("a=b", ["/r/x"])
    for bad in ("/r/x", "label=", "label=/r/a,,/r/b"):
        with pytest.raises(argparse.ArgumentTypeError):
            _pair(bad)
