"""Feature cache: one Parquet file per model fingerprint, rows keyed by input content hash.

Keys are hashes of image bytes (or label text), not paths, so a moved or renamed image still hits
and an edited one misses. Rows are (key, layer, feature); 'final' is the probe's readout layer and
'block{i}' the layer-sweep taps. Writes go to a temporary file then rename, so an interrupted run
never leaves a truncated cache behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

__all__ = ["FeatureCache", "model_fingerprint", "cached_features"]

FINAL = "final"


def model_fingerprint(name: str, **identity: object) -> str:
    """'<name>--<hash of what decides the weights>' (checkpoint path, pretrained flag, seed...)."""
    blob = json.dumps(identity, sort_keys=True, default=str).encode()
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
    return f"{safe}--{hashlib.sha1(blob).hexdigest()[:10]}"


class FeatureCache:
    """Features of one model, loaded lazily and saved atomically."""

    def __init__(self, root: str | Path, fingerprint: str) -> None:
        self.path = Path(root) / f"{fingerprint}.parquet"
        self._rows: dict[tuple[str, str], np.ndarray] = {}
        self._dirty = False
        if self.path.is_file():
            import pyarrow.parquet as pq

            t = pq.read_table(self.path)
            for k, layer, f in zip(t.column("key").to_pylist(), t.column("layer").to_pylist(),
                                   t.column("feature").to_numpy(zero_copy_only=False)):
                self._rows[(k, layer)] = np.asarray(f, dtype=np.float32)

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, key: str, layer: str = FINAL) -> np.ndarray | None:
        return self._rows.get((key, layer))

    def put(self, keys: Sequence[str], feats: np.ndarray, layer: str = FINAL) -> None:
        if len(keys) != len(feats):
            raise ValueError(f"{len(keys)} keys for {len(feats)} feature rows")
        for k, f in zip(keys, feats):
            self._rows[(k, layer)] = np.asarray(f, dtype=np.float32)
        self._dirty = True

    def save(self) -> None:
        if not self._dirty:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        items = sorted(self._rows.items())
        table = pa.table({
            "key": [k for (k, _), _ in items], "layer": [layer for (_, layer), _ in items],
            "feature": pa.array([f.tolist() for _, f in items], type=pa.list_(pa.float32())),
        })
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        pq.write_table(table, tmp)
        os.replace(tmp, self.path)
        self._dirty = False


def cached_features(
    cache: FeatureCache, keys: Sequence[str], layers: Sequence[str],
    compute: Callable[[list[int]], Mapping[str, np.ndarray]],
) -> tuple[dict[str, np.ndarray], int]:
    """Features [len(keys), D] per layer, computing only inputs missing from the cache.

    ``compute(indices)`` returns {layer: features of keys[indices]} for every requested layer.
    Returns the features and how many inputs had to be computed.
    """
    missing = [i for i, k in enumerate(keys) if any(cache.get(k, layer) is None for layer in layers)]
    if missing:
        fresh = compute(missing)
        for layer in layers:
            if layer not in fresh:
                raise KeyError(f"compute() did not return layer {layer!r}")
            cache.put([keys[i] for i in missing], fresh[layer], layer)
        cache.save()
    out = {layer: np.stack([cache.get(k, layer) for k in keys]) for layer in layers}
    return out, len(missing)
