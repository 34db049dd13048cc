"""Krichevsky-Trofimov description length (seed 001, D.8.1): a reference-free check on Eq. 4.

Each system's stream of accepted predicates is coded sequentially with the KT estimator,
P(next = a | past) = (n_a + 1/2) / (t + K/2), K the alphabet size. The first use of a predicate
is expensive and the hundredth nearly free, and the code grows with the alphabet, so a longer
vocabulary does not buy headroom by itself. The code length depends only on the counts, so it is
computed in closed form with log-gamma. Predicates seen fewer than ``min_count`` times are pooled
into one symbol first (the paper checks stability over thresholds 1, 3 and 10).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Iterable, Mapping, Sequence

from relate.judge.information import normalise_predicate

__all__ = ["POOLED", "pool_rare", "kt_code_length", "kt_code_length_sequential", "kt_bits_per_image"]

POOLED = "<pooled>"


def pool_rare(stream: Iterable[str], min_count: int = 1) -> Counter:
    """Counts per symbol after merging predicates seen fewer than ``min_count`` times into POOLED."""
    if min_count < 1:
        raise ValueError(f"min_count must be >= 1, got {min_count}")
    counts = Counter(normalise_predicate(p) for p in stream)
    out: Counter = Counter()
    for p, c in counts.items():
        out[p if c >= min_count else POOLED] += c
    return out


def _alphabet(counts: Mapping[str, int], vocabulary_size: int | None) -> int:
    used = sum(1 for c in counts.values() if c > 0)
    if vocabulary_size is None:
        return used
    if vocabulary_size < used:
        raise ValueError(f"vocabulary_size={vocabulary_size} is smaller than the {used} symbols in the stream")
    return vocabulary_size


def kt_code_length(counts: Mapping[str, int], vocabulary_size: int | None = None) -> float:
    """KT code length in bits of any stream with these symbol counts.

    ``vocabulary_size`` is the alphabet K (the system's declared vocabulary); by default the
    number of distinct symbols in the stream. L = log2 G(n + K/2)/G(K/2) - sum_a log2 G(n_a + 1/2)/G(1/2).
    """
    n = sum(counts.values())
    if n == 0:
        return 0.0
    k = _alphabet(counts, vocabulary_size)
    nats = math.lgamma(n + k / 2) - math.lgamma(k / 2)
    nats -= sum(math.lgamma(c + 0.5) - math.lgamma(0.5) for c in counts.values() if c > 0)
    return nats / math.log(2)


def kt_code_length_sequential(stream: Sequence[str], vocabulary_size: int | None = None) -> float:
    """The same code length accumulated symbol by symbol (reference implementation for tests)."""
    counts = Counter(stream)
    k = _alphabet(counts, vocabulary_size)
    seen: Counter = Counter()
    bits = 0.0
    for t, a in enumerate(stream):
        bits -= math.log2((seen[a] + 0.5) / (t + k / 2))
        seen[a] += 1
    return bits


def kt_bits_per_image(stream: Iterable[str], images: int, min_count: int = 1,
                      vocabulary_size: int | None = None) -> float:
    """Description length of a system's accepted predicates, per image, after pooling rare ones.

    A declared ``vocabulary_size`` shrinks with pooling: the pooled predicates become one symbol.
    """
    if images <= 0:
        raise ValueError(f"images must be positive, got {images}")
    stream = list(stream)
    counts = pool_rare(stream, min_count)
    k = vocabulary_size
    if k is not None:
        distinct = len({normalise_predicate(p) for p in stream})
        kept = sum(1 for p in counts if p != POOLED)
        if k < distinct:
            raise ValueError(f"vocabulary_size={k} is smaller than the {distinct} predicates in the stream")
        # unseen vocabulary entries are rarer than any threshold: they join the pooled symbol
        k = kept + (1 if (POOLED in counts or k > distinct) else 0) if min_count > 1 else k
    return kt_code_length(counts, k) / images
