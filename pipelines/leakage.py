"""Leakage filter (seed 001, App. C.4): exclude evaluation images from a training corpus by identity.

Two mechanisms, both needed: the same photograph appears under different ids in different
corpora (VG ids vs zero-padded COCO ids), so a raw id intersection finds nothing; and re-encoded
or resized copies share no id at all. Hence (1) explicit id maps given as files, applied in both
directions, and (2) perceptual near-duplicate search: a 64-bit pHash per image (``imagehash``),
computed in parallel with Ray Data, and a Hamming-distance threshold against every evaluation
image. Writes ``excluded_ids.csv`` (image_id, reason) and a JSON summary; exclusion itself is
then applied by explicit id list, as in the paper.

``python -m pipelines.leakage --set corpus_dir=runs/annotated --set eval_image_dirs=[data/vg150_test]``
"""

from __future__ import annotations

import csv
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
from pydantic import Field

from relate.config import StrictConfig, dump_config, parse_job_args
from relate.data.readers.base import normalise_image_id

__all__ = ["LeakageConfig", "LeakageResult", "load_id_map", "phash_uint64", "HashStage", "near_duplicates", "main"]

_IMAGE_EXT = (".png", ".jpg", ".jpeg", ".webp", ".bmp")


class LeakageConfig(StrictConfig):
    """Which corpus to check, against which evaluation images, with which maps and threshold."""

    corpus_dir: str = Field(..., description="Run folder (or corpus folder) whose images may leak.")
    splits: list[str] = Field(default_factory=lambda: ["train"], description="Corpus splits to check.")
    eval_image_dirs: list[str] = Field(default_factory=list, description="Folders of evaluation images; id = file stem.")
    eval_corpus_dirs: list[str] = Field(default_factory=list, description="Evaluation corpora in the project layout (all splits).")
    eval_ids_files: list[str] = Field(default_factory=list, description="Text files, one evaluation image id per line.")
    id_maps: list[str] = Field(default_factory=list, description="CSV files with two id columns (e.g. vg_id,coco_id), applied both ways.")
    max_hamming: int = Field(6, ge=0, le=32, description="pHash distance (of 64 bits) at or below which two images are one.")
    out_dir: str = Field("runs/leakage", description="Where excluded_ids.csv and the summary go.")
    hash_batch_size: int = Field(64, ge=1, description="Images per Ray Data hashing batch.")
    num_cpus: float = Field(0.5, gt=0, description="CPUs per hashing task.")


@dataclass
class LeakageResult:
    excluded: dict[str, str]
    summary: dict
    out_dir: Path


_norm_id = normalise_image_id  # one rule for the filter and the readers' exclusion lists


def load_id_map(path: str | Path) -> dict[str, set[str]]:
    """Undirected id equivalences from a 2-column CSV (a header row is skipped if not numeric-like)."""
    links: dict[str, set[str]] = {}
    with open(path, newline="") as fh:
        for i, row in enumerate(csv.reader(fh)):
            if len(row) < 2:
                raise ValueError(f"{path}: line {i + 1} has {len(row)} column(s); expected two ids")
            a, b = _norm_id(row[0]), _norm_id(row[1])
            if i == 0 and not any(ch.isdigit() for ch in a + b):
                continue  # header
            links.setdefault(a, set()).add(b)
            links.setdefault(b, set()).add(a)
    return links


def phash_uint64(path: str) -> int:
    """64-bit perceptual hash of an image file as an unsigned integer."""
    import imagehash
    from PIL import Image

    with Image.open(path) as im:
        bits = imagehash.phash(im.convert("RGB"), hash_size=8).hash.flatten()
    return int(np.packbits(bits.astype(np.uint8)).view(">u8")[0])


class HashStage:
    """Ray Data stage: ``uri`` -> ``phash`` (uint64). Works on a plain dict batch in tests."""

    def __call__(self, batch: dict) -> dict:
        return dict(batch, phash=np.array([phash_uint64(u) for u in batch["uri"]], dtype=np.uint64))


def _popcount(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.uint64)
    return np.unpackbits(x.view(np.uint8).reshape(*x.shape, 8), axis=-1).sum(-1)


def near_duplicates(corpus: np.ndarray, evals: np.ndarray, max_hamming: int, chunk: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """For each corpus hash: index of the nearest evaluation hash within ``max_hamming`` (or -1) and its distance."""
    best = np.full(corpus.size, -1, np.int64)
    dist = np.full(corpus.size, 65, np.int64)
    if evals.size == 0 or corpus.size == 0:
        return best, dist
    for i in range(0, corpus.size, chunk):
        d = _popcount(corpus[i:i + chunk, None] ^ evals[None, :])
        j = d.argmin(1)
        dj = d[np.arange(d.shape[0]), j]
        ok = dj <= max_hamming
        best[i:i + chunk] = np.where(ok, j, -1)
        dist[i:i + chunk] = dj
    return best, dist


def _eval_images(cfg: LeakageConfig) -> list[tuple[str, str]]:
    from relate.data.corpus import read_corpus

    items: list[tuple[str, str]] = []
    for d in cfg.eval_image_dirs:
        folder = Path(d)
        if not folder.is_dir():
            raise FileNotFoundError(f"eval_image_dirs: {folder} is not a folder")
        items += [(p.stem, str(p)) for p in sorted(folder.rglob("*")) if p.suffix.lower() in _IMAGE_EXT]
    for d in cfg.eval_corpus_dirs:
        t = read_corpus(d, validate=False)
        items += list(zip(t.column("image_id").to_pylist(), t.column("uri").to_pylist()))
    return items


def _hash_all(uris: list[str], cfg: LeakageConfig) -> np.ndarray:
    import ray

    if not uris:
        return np.zeros(0, np.uint64)
    if not ray.is_initialized():
        ray.init(ignore_reinit_error=True, log_to_driver=False)
    ds = ray.data.from_items([{"i": i, "uri": u} for i, u in enumerate(uris)])
    ds = ds.map_batches(HashStage(), batch_size=cfg.hash_batch_size, batch_format="numpy", num_cpus=cfg.num_cpus)
    out = np.zeros(len(uris), np.uint64)
    for b in ds.iter_batches(batch_format="numpy", batch_size=None):
        out[b["i"]] = b["phash"]
    return out


def _id_exclusions(ids: Iterable[str], eval_ids: set[str], maps: dict[str, dict[str, set[str]]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for cid in ids:
        n = _norm_id(cid)
        if n in eval_ids:
            out[cid] = "same_id"
            continue
        for name, links in maps.items():
            hit = sorted(links.get(n, set()) & eval_ids)
            if hit:
                out[cid] = f"id_map:{name}:{hit[0]}"
                break
    return out


def main(cfg: LeakageConfig) -> LeakageResult:
    """Find every corpus image that is an evaluation image by id, id map or near-duplicate pixels."""
    from relate.data.corpus import read_corpus

    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, out / "leakage_config.yaml")
    tables = [read_corpus(cfg.corpus_dir, s, validate=False) for s in cfg.splits]
    ids = [i for t in tables for i in t.column("image_id").to_pylist()]
    uris = [u for t in tables for u in t.column("uri").to_pylist()]
    evals = _eval_images(cfg)
    eval_ids = {_norm_id(i) for i, _ in evals}
    for f in cfg.eval_ids_files:
        eval_ids |= {_norm_id(x) for x in Path(f).read_text().split() if x.strip()}
    maps = {Path(p).name: load_id_map(p) for p in cfg.id_maps}
    excluded = _id_exclusions(ids, eval_ids, maps)
    hashes = _hash_all(uris + [u for _, u in evals], cfg)
    near, dist = near_duplicates(hashes[:len(uris)], hashes[len(uris):], cfg.max_hamming)
    for k in np.flatnonzero(near >= 0):
        excluded.setdefault(ids[k], f"near_duplicate:{evals[near[k]][0]}:hamming={int(dist[k])}")
    with open(out / "excluded_ids.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["image_id", "reason"])
        for i in sorted(excluded):
            w.writerow([i, excluded[i]])
    kinds: dict[str, int] = {}
    for r in excluded.values():
        kinds[r.split(":")[0]] = kinds.get(r.split(":")[0], 0) + 1
    summary = {"corpus_images": len(ids), "eval_images": len(evals), "eval_ids": len(eval_ids),
               "excluded": len(excluded), "by_reason": kinds}
    (out / "leakage_summary.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
    return LeakageResult(excluded, summary, out)


if __name__ == "__main__":
    main(parse_job_args(LeakageConfig, sys.argv[1:], description=__doc__.splitlines()[0]))
