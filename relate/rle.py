"""COCO uncompressed run-length masks: checked in exact integer arithmetic, decoded only on demand.

A mask travels as its runs (alternating 0s and 1s, column-major, starting with 0s), which costs
bytes in proportion to its outline, not its area. :func:`check_rle` proves a mask well formed
from the runs alone (Python integers: a sum cannot overflow, a huge run cannot allocate), so a
server can refuse a bad one before any pixel exists; :func:`decode_rle` expands a checked mask.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["RLEError", "check_rle", "decode_rle", "encode_rle"]


class RLEError(ValueError):
    """A run-length mask that does not describe a non-empty mask of the stated size."""


def check_rle(counts: Sequence[int], height: int, width: int) -> np.ndarray:
    """The runs as an int64 array, after checking them without expanding anything.

    Every run is an integer in [0, height * width], the runs sum to exactly height * width, and
    at least one pixel is set."""
    area = int(height) * int(width)
    if len(counts) == 0:
        raise RLEError("counts is empty")
    if len(counts) > area + 1:  # more runs than pixels (+ a leading empty run) cannot sum right
        raise RLEError(f"{len(counts)} runs for {area} pixels")
    if any(type(c) is not int for c in counts):  # bool and float are not run lengths
        raise RLEError("runs must be integers")
    lo, hi = min(counts), max(counts)
    if lo < 0 or hi > area:
        raise RLEError(f"every run must lie in [0, {area}] (the image's pixel count); got {lo if lo < 0 else hi}")
    total = sum(counts)  # Python integers: exact, no wrap-around
    if total != area:
        raise RLEError(f"runs sum to {total}, the image has {area} pixels")
    arr = np.asarray(counts, dtype=np.int64)  # every value bounded by area above: no overflow
    if int(arr[1::2].sum()) == 0:
        raise RLEError("empty mask (no pixel set)")
    return arr


def decode_rle(counts: np.ndarray, height: int, width: int) -> np.ndarray:
    """(height, width) bool mask from runs that passed :func:`check_rle`."""
    values = np.repeat(np.arange(len(counts)) % 2 == 1, counts)
    return values.reshape(width, height).T  # column-major, as COCO


def encode_rle(mask: np.ndarray) -> list[int]:
    """Runs of a (height, width) bool mask (inverse of :func:`decode_rle`)."""
    flat = np.asarray(mask, dtype=bool).T.reshape(-1)
    change = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    bounds = np.concatenate([[0], change, [flat.size]])
    runs = np.diff(bounds).tolist()
    return runs if not flat[0] else [0, *runs]
