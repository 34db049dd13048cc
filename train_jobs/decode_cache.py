"""Decode once: every training row as ``DecodeStage`` gives it, kept as memory-mapped arrays.

``cpu_long`` visits its 9,623 training rows five times (2,800 steps of 16), and each visit decoded a
PNG, resized it, computed the gate's conditions of every box pair and padded the relations: a Ray
Data task that ran beside the trainer on the same two cores for the first half of every run. All of
that is a function of the row and of a few settings, except the photometric jitter; so with
``data.decode_cache`` the rows are decoded once, before the first step, into
``<data.cache_dir>/decoded/<key>/<array>.npy``, and every epoch and every later run over the same
rows and settings (another seed, another arm of ``train_jobs.learning_curve``) reads each batch's
rows from the memory map instead (``DecodeStage`` given ``cache``).

The key is a digest of everything the arrays depend on: the row table itself (ids, image paths and
sizes, boxes, relations, sources, asked pairs), each local image file's size and modification time, the input
side and ``keep_aspect``, the caps, the implied relations, the vocabulary, category and source
lists, whether the pictures are cached at all (not with photometric jitter, which draws anew each
visit), the versions of torch, Pillow and numpy, and the source of the code that decodes (the
stage, ``relate.api``'s resize, the gate's conditions, the entailments and their knowledge file). A
change to any of them is another folder, built afresh; nothing is ever read from a cache built
otherwise. An image on an object store is keyed by its URI only.

A cache is written into a temporary folder and renamed into place when complete, so a reader never
sees half of one and two runs building the same key at once leave one whole copy.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa

__all__ = ["decode_cache_key", "decode_cache_folder", "ensure_decode_cache", "DecodedRows", "write_decode_cache",
           "decode_in_process", "decode_with_ray", "CacheRowsStage", "META"]

FORMAT = 1
META = "meta.json"
# what a decoded row is computed by: any edit to these files is another key
_CODE_MODULES = ("train_jobs.relation_data", "train_jobs.decode_cache", "relate.api", "relate.gate", "relate.geometry",
                 "relate.entailment", "relate.predicate_knowledge", "relate.data.lexicon", "relate.text.resources")
_BLOCK_ROWS = 64

Batches = Iterable[tuple[np.ndarray, dict[str, np.ndarray]]]  # (row positions, DecodeStage arrays of those rows)


def _code_digest() -> str:
    from relate.predicate_knowledge import KNOWLEDGE_FILE

    h = hashlib.sha256()
    for name in _CODE_MODULES:
        h.update(Path(importlib.import_module(name).__file__).read_bytes())
    h.update(Path(KNOWLEDGE_FILE).read_bytes())
    return h.hexdigest()


def _table_digest(table: pa.Table) -> str:
    cols = [c for c in ("image_id", "uri", "width", "height", "boxes", "relations", "source", "asked_pairs")
            if c in table.column_names]
    t = table.select(cols).combine_chunks()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    h = hashlib.sha256(sink.getvalue().to_pybytes())
    for uri in table.column("uri").to_pylist():  # a picture rewritten in place is another key
        if "://" not in uri:
            st = os.stat(uri)
            h.update(f"{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()


def caches_images(stage_kwargs: dict) -> bool:
    """Whether the pictures themselves are cached: not when photometric jitter draws anew at each visit."""
    return stage_kwargs["data"].photometric <= 0


def decode_cache_key(stage_kwargs: dict) -> str:
    """The digest naming the cache of ``DecodeStage(**stage_kwargs)`` over its row table ``rows``."""
    import PIL
    import torch

    data = stage_kwargs["data"]
    settings = {"format": FORMAT, "size": stage_kwargs["size"], "keep_aspect": bool(stage_kwargs.get("keep_aspect")),
                "max_boxes": data.max_boxes, "max_relations": data.max_relations,
                "implied_relations": data.implied_relations, "predicates": data.predicates,
                "images": caches_images(stage_kwargs), "forms": list(stage_kwargs["forms"]),
                "categories": list(stage_kwargs["categories"]), "sources": list(stage_kwargs.get("sources") or ["*"]),
                "versions": [torch.__version__, PIL.__version__, np.__version__], "code": _code_digest(),
                "rows": _table_digest(stage_kwargs["rows"])}
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:24]


def decode_cache_folder(cache_dir: str, key: str) -> Path:
    return Path(cache_dir).expanduser() / "decoded" / key


class DecodedRows:
    """A built cache: every row's arrays, memory-mapped read-only where they are first read (the decode
    stage's process: the object pickles as its folder and row count). What ``DecodeStage`` is given as
    ``cache``; ``take`` is what it calls."""

    def __init__(self, folder: str | Path, rows: int) -> None:
        self.folder, self.rows = str(folder), rows
        self._arrays: dict[str, np.ndarray] | None = None

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        if self._arrays is None:
            folder = Path(self.folder)
            if not (folder / META).is_file():
                raise FileNotFoundError(f"decode cache {folder} is missing or incomplete (no {META}): it is built by "
                                        f"train_jobs.train_relation before the first step, on the driver's machine; "
                                        f"on a cluster data.cache_dir must be a filesystem every node reads")
            meta = json.loads((folder / META).read_text())
            if meta["rows"] != self.rows:
                raise ValueError(f"decode cache {folder} holds {meta['rows']} rows, the row table has {self.rows}")
            self._arrays = {k: np.load(folder / f"{k}.npy", mmap_mode="r") for k in meta["arrays"]}
        return self._arrays

    def take(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        """The arrays of rows ``idx`` (copies: fancy indexing reads only those rows of each map)."""
        return {k: a[idx] for k, a in self.arrays.items()}

    def __getstate__(self) -> dict:
        return {"folder": self.folder, "rows": self.rows, "_arrays": None}


def write_decode_cache(folder: str | Path, rows: int, batches: Batches, meta: dict | None = None) -> Path:
    """Write every row's arrays from ``batches`` into ``folder`` (atomically: a temporary folder renamed
    into place once every row is in). A folder another writer completed first is kept, ours dropped."""
    folder = Path(folder)
    tmp = folder.parent / f".{folder.name}.{os.getpid()}.{time.monotonic_ns()}.tmp"
    tmp.mkdir(parents=True)
    try:
        arrays: dict[str, np.ndarray] = {}
        filled = np.zeros(rows, bool)
        for pos, out in batches:
            for k, v in out.items():
                if k not in arrays:
                    arrays[k] = np.lib.format.open_memmap(tmp / f"{k}.npy", mode="w+", dtype=v.dtype,
                                                          shape=(rows, *v.shape[1:]))
                arrays[k][pos] = v
            filled[pos] = True
        if not filled.all():
            raise RuntimeError(f"decode cache: {int((~filled).sum())} of {rows} rows never came back from decoding")
        for a in arrays.values():
            a.flush()
        (tmp / META).write_text(json.dumps({**(meta or {}), "rows": rows,
                                            "arrays": {k: [str(a.dtype), list(a.shape)] for k, a in arrays.items()}}))
        del arrays
        try:
            os.rename(tmp, folder)
        except OSError:
            if not (folder / META).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


class CacheRowsStage:
    """Ray Data stage building a cache: a block of row positions -> those rows' arrays plus ``row``,
    without the pictures where they are not cached. Decodes on one torch thread (``DecodeStage``)."""

    def __init__(self, **stage_kwargs) -> None:
        from train_jobs.relation_data import DecodeStage

        self.images = caches_images(stage_kwargs)
        self.stage = DecodeStage(**stage_kwargs)

    def __call__(self, batch: pa.Table) -> dict[str, np.ndarray]:
        from train_jobs.relation_data import _one_thread

        with _one_thread():
            pos = batch.column("row")
            out = self.stage.decode(self.stage.rows.take(pos).to_pylist(), images=self.images)
        out["row"] = np.asarray(pos.to_numpy(), np.int64)
        return out


def decode_in_process(stage_kwargs: dict) -> Batches:
    """Every row decoded here, block by block (tests, benchmarks, in-process jobs)."""
    stage = CacheRowsStage(**stage_kwargs)
    n = stage_kwargs["rows"].num_rows
    for lo in range(0, n, _BLOCK_ROWS):
        out = stage(pa.table({"row": np.arange(lo, min(n, lo + _BLOCK_ROWS), dtype=np.int64)}))
        yield out.pop("row"), out


def decode_with_ray(stage_kwargs: dict) -> Batches:
    """Every row decoded by Ray Data: one decode actor per CPU the cluster has free, a CPU each
    (nothing else runs yet: the cache is built before the trainer starts)."""
    import math

    import ray

    n = stage_kwargs["rows"].num_rows
    actors = max(1, min(math.ceil(n / _BLOCK_ROWS), int(ray.available_resources().get("CPU", 1))))
    ds = ray.data.from_items([{"row": i} for i in range(n)], override_num_blocks=math.ceil(n / _BLOCK_ROWS))
    ds = ds.map_batches(CacheRowsStage, fn_constructor_kwargs=stage_kwargs, batch_format="pyarrow",
                        batch_size=_BLOCK_ROWS, compute=ray.data.ActorPoolStrategy(size=actors), num_cpus=1)
    for out in ds.iter_batches(batch_format="numpy", batch_size=None):
        yield out.pop("row"), out


def ensure_decode_cache(stage_kwargs: dict, cache_dir: str, decode: Callable[[dict], Batches] = decode_with_ray,
                        say: Callable[[str], None] = print) -> DecodedRows:
    """The cache of ``DecodeStage(**stage_kwargs)`` over its row table, built first if missing."""
    key = decode_cache_key(stage_kwargs)
    folder = decode_cache_folder(cache_dir, key)
    n = stage_kwargs["rows"].num_rows
    if (folder / META).is_file():
        say(f"decode cache: reading {n} decoded rows from {folder}")
        return DecodedRows(folder, n)
    t0 = time.perf_counter()
    write_decode_cache(folder, n, _batches(decode, stage_kwargs), {"key": key, "size": stage_kwargs["size"]})
    say(f"decode cache: {n} rows decoded once in {time.perf_counter() - t0:.1f} s into {folder}"
        + ("" if caches_images(stage_kwargs) else " (pictures decoded at each visit: photometric jitter)"))
    return DecodedRows(folder, n)


def _batches(decode: Callable[[dict], Batches], stage_kwargs: dict) -> Iterator:
    yield from decode({k: v for k, v in stage_kwargs.items() if k != "cache"})
