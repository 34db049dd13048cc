"""LVIS-style support buckets (seed 001, 5.1): rare (< 50 GT relations), common (50-500), frequent (> 500).

Both recall protocols (``relate.metrics.recall`` and ``relate.metrics.sgb``) and the federated
scores report per-bucket figures, so the bucket edges live here, once.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BUCKETS", "bucket_of"]

# (name, low inclusive, high inclusive)
BUCKETS = (("rare", 0, 49), ("common", 50, 500), ("frequent", 501, np.iinfo(np.int64).max))


def bucket_of(support: np.ndarray) -> np.ndarray:
    """Bucket name per predicate support count."""
    out = np.full(support.shape, "frequent", dtype=object)
    out[support <= 500] = "common"
    out[support < 50] = "rare"
    return out
