"""Zero-shot text baseline: a triplet scored from its class names alone, no image.

A text encoder from ``relate.text`` (offline MiniLM by default) embeds the query, target and
distractor class names; the triplet is correct when the target's name is nearer the query's
than the distractor's is, under the same readouts as the image features (``readout_correct``).
This bounds what language alone knows about the pairs (seed 000, Sec. 6: "zero-shot
text-encoder baselines"). It differs from the zoo's ``text_minilm`` row in taking any registered
text encoder by name and in being reported apart from the image models.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from relate.probe.readouts import Similarity, readout_correct

__all__ = ["text_triplet_correct", "odd_one_out"]


def _encode_unique(encoder, names: Sequence[str]) -> tuple[np.ndarray, dict[str, int]]:
    bad = [n for n in names if not isinstance(n, str) or not n.strip()]
    if bad:
        raise ValueError(f"text baseline needs a class name for every item; got {bad[:3]!r}")
    uniq = list(dict.fromkeys(names))
    return np.asarray(encoder.encode(uniq), dtype=np.float64), {u: i for i, u in enumerate(uniq)}


def text_triplet_correct(encoder, query: Sequence[str], target: Sequence[str], distractor: Sequence[str],
                         metric: Similarity = "cosine") -> np.ndarray:
    """Per-triplet correctness of the class-name readout (each distinct name encoded once)."""
    if not len(query) == len(target) == len(distractor):
        raise ValueError(f"role lists differ in length: {len(query)}, {len(target)}, {len(distractor)}")
    feats, row = _encode_unique(encoder, [*query, *target, *distractor])
    pick = lambda names: feats[[row[n] for n in names]]  # noqa: E731
    return readout_correct(pick(query), pick(target), pick(distractor), metric)


def odd_one_out(encoder, names: Sequence[str], metric: Similarity = "cosine") -> str:
    """The name left out of the most similar pair among three (the odd-one-out task)."""
    if len(names) != 3 or len(set(names)) != 3:
        raise ValueError(f"odd_one_out takes three distinct names, got {list(names)!r}")
    from relate.probe.readouts import pair_similarity

    f, row = _encode_unique(encoder, list(names))
    pairs = [(0, 1, 2), (0, 2, 1), (1, 2, 0)]
    sims = [pair_similarity(f[[a]], f[[b]], metric)[0] for a, b, _ in pairs]
    return names[pairs[int(np.argmax(sims))][2]]
