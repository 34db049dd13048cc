"""Which box pairs the pairs pass asks a VLM about: a seeded uniform sample of an image's pairs.

The other passes ask for one relation per pair, so what a pair holds beyond its one statement is
never known. The pairs pass asks instead for every relation of a few pairs, which makes those
pairs completely labelled: a predicate left unstated there is known not to hold, and the co-occurrence
P(q | p) of Eq. 3 can be counted on them instead of guessed. For that to be a fair sample of the
corpus the pairs are drawn uniformly, not by salience, from the unordered pairs of whole objects
(body parts are placed by their person, as the spatial pass's rules say). The draw depends only on
(seed, image id, number of boxes), so a resumed run and the training job agree on it.
"""

from __future__ import annotations

import zlib
from typing import Sequence

import numpy as np

__all__ = ["sample_pairs"]


def sample_pairs(image_id: str, boxes: Sequence[dict], k: int, seed: int = 0) -> list[tuple[int, int]]:
    """Up to ``k`` unordered pairs (i < j) of the image's whole-object boxes, drawn without replacement,
    in ascending order; every pair when there are ``k`` or fewer."""
    if k <= 0:
        return []
    whole = [i for i, b in enumerate(boxes) if not b.get("is_body_part")]
    pairs = [(a, b) for n, a in enumerate(whole) for b in whole[n + 1:]]
    if len(pairs) <= k:
        return pairs
    rng = np.random.default_rng([seed, zlib.crc32(image_id.encode()), len(boxes), 5])
    return sorted(pairs[int(i)] for i in rng.choice(len(pairs), size=k, replace=False))
