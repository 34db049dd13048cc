"""Leakage filter (seed 001, App. C.4): exclude evaluation images from a training corpus by identity.

Two mechanisms, both needed: the same photograph appears under different ids in different
corpora (VG ids vs zero-padded COCO ids), so a raw id intersection finds nothing; and re-encoded
or resized copies share no id at all. Hence (1) explicit id maps given as files, applied in both
directions, and (2) perceptual near-duplicate search: a 64-bit pHash per image (``imagehash``),
computed in parallel with Ray Data, and a Hamming-distance threshold against every evaluation
image. Writes ``excluded_ids.csv`` (image_id, reason) and a JSON summary; exclusion itself is
then applied by explicit id list, as in the paper.

Ids are namespaced by dataset (``relate.data.readers.image_key``): a corpus image is
``<namespace of its source>:<id>`` (``vg150`` and ``indoorvg`` -> ``vg``, ``psg`` -> ``coco``), so
COCO image 139 and VG image 139 are different images and only the same namespace and id is a
``same_id`` match. Evaluation image folders name their namespace (``vg=data/vg150_test``), id files
hold namespaced ids (``eval_ids.txt`` of ``eval_jobs.prepare``), id maps name theirs in the header
(``vg_id,coco_id``), and ``excluded_ids.csv`` lists namespaced ids, which the readers
(``read_benchmark(exclude=...)``, ``eval_jobs.prepare --exclude``) and ``eval_jobs.ovsgg`` read.

``python -m pipelines.leakage --set corpus_dir=runs/annotated --set eval_image_dirs=[vg=data/vg150_test]``
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
from relate.data.readers.base import IMAGE_NAMESPACES, image_key, image_namespace, parse_image_key

__all__ = ["LeakageConfig", "LeakageResult", "load_id_map", "phash_uint64", "HashStage", "near_duplicates", "main"]

_IMAGE_EXT = (".png", ".jpg", ".jpeg", ".webp", ".bmp")


class LeakageConfig(StrictConfig):
    """Which corpus to check, against which evaluation images, with which maps and threshold."""

    corpus_dir: str = Field(..., description="Run folder (or corpus folder) whose images may leak.")
    splits: list[str] = Field(default_factory=lambda: ["train"], description="Corpus splits to check.")
    eval_image_dirs: list[str] = Field(default_factory=list, description="Folders of evaluation images as NAMESPACE=FOLDER (e.g. vg=data/vg150_test); id = NAMESPACE:file stem.")
    eval_corpus_dirs: list[str] = Field(default_factory=list, description="Evaluation corpora in the project layout (all splits); ids namespaced by their source column.")
    eval_ids_files: list[str] = Field(default_factory=list, description="Text files, one namespaced evaluation image id per line (coco:139; eval_ids.txt of eval_jobs.prepare).")
    id_maps: list[str] = Field(default_factory=list, description="CSV files with two id columns whose header names the datasets (e.g. vg_id,coco_id), or namespaced ids without header; applied both ways.")
    max_hamming: int = Field(6, ge=0, le=32, description="pHash distance (of 64 bits) at or below which two images are one.")
    out_dir: str = Field("runs/leakage", description="Where excluded_ids.csv and the summary go.")
    hash_batch_size: int = Field(64, ge=1, description="Images per Ray Data hashing batch.")
    num_cpus: float = Field(0.5, gt=0, description="CPUs per hashing task.")


@dataclass
class LeakageResult:
    excluded: dict[str, str]
    summary: dict
    out_dir: Path


def _header_namespace(name: str, path: str | Path) -> str:
    n = name.strip().lower()
    for suffix in ("_image_id", "_id", " id"):
        if n.endswith(suffix):
            n = n[: -len(suffix)]
    try:
        return image_namespace(n)
    except ValueError:
        raise ValueError(f"{path}: header column {name!r} names no dataset; write e.g. vg_id,coco_id") from None


def load_id_map(path: str | Path) -> dict[str, set[str]]:
    """Undirected equivalences between namespaced ids from a 2-column CSV: either a header naming
    each column's dataset (``vg_id,coco_id``: values are bare ids of those datasets) or namespaced
    values on every line (``vg:123,coco:456``)."""
    links: dict[str, set[str]] = {}
    spaces: tuple[str, str] | None = None
    with open(path, newline="") as fh:
        for i, row in enumerate(csv.reader(fh)):
            if not row:
                continue
            if len(row) < 2:
                raise ValueError(f"{path}: line {i + 1} has {len(row)} column(s); expected two ids")
            if i == 0 and ":" not in row[0] + row[1]:
                if any(ch.isdigit() for ch in row[0] + row[1]):
                    raise ValueError(f"{path}: line 1 holds bare ids and no header; name the datasets in a header "
                                     f"(vg_id,coco_id) or namespace each id (vg:123,coco:456)")
                spaces = (_header_namespace(row[0], path), _header_namespace(row[1], path))
                continue
            where = f"{path} line {i + 1}"
            if spaces is not None:
                a, b = image_key(spaces[0], row[0]), image_key(spaces[1], row[1])
            else:
                a, b = parse_image_key(row[0], where), parse_image_key(row[1], where)
            links.setdefault(a, set()).add(b)
            links.setdefault(b, set()).add(a)
    return links


def eval_image_dir(entry: str) -> tuple[str, Path]:
    """``NAMESPACE=FOLDER`` -> (namespace, folder); a bare folder is refused (its file stems would
    match the same digits in every dataset)."""
    ns, sep, folder = entry.partition("=")
    if not sep or not folder.strip():
        raise ValueError(f"eval_image_dirs entry {entry!r} names no dataset; write NAMESPACE=FOLDER, e.g. "
                         f"vg={entry}, where the file names are that dataset's image ids "
                         f"(namespaces: {sorted(set(IMAGE_NAMESPACES.values()))} or a corpus source)")
    return image_namespace(ns), Path(folder.strip())


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

    items: list[tuple[str, str]] = []  # (namespaced id, image file)
    for d in cfg.eval_image_dirs:
        ns, folder = eval_image_dir(d)
        if not folder.is_dir():
            raise FileNotFoundError(f"eval_image_dirs: {folder} is not a folder")
        items += [(image_key(ns, p.stem), str(p)) for p in sorted(folder.rglob("*")) if p.suffix.lower() in _IMAGE_EXT]
    for d in cfg.eval_corpus_dirs:
        t = read_corpus(d, validate=False)
        items += [(image_key(src, i), u) for i, src, u in zip(t.column("image_id").to_pylist(),
                                                              t.column("source").to_pylist(), t.column("uri").to_pylist())]
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


def _id_exclusions(keys: Iterable[str], eval_ids: set[str], maps: dict[str, dict[str, set[str]]]) -> dict[str, str]:
    """Corpus keys (namespaced) that are evaluation keys, directly or through an id map."""
    out: dict[str, str] = {}
    for key in keys:
        if key in eval_ids:
            out[key] = "same_id"
            continue
        for name, links in maps.items():
            hit = sorted(links.get(key, set()) & eval_ids)
            if hit:
                out[key] = f"id_map:{name}:{hit[0]}"
                break
    return out


def main(cfg: LeakageConfig) -> LeakageResult:
    """Find every corpus image that is an evaluation image by id, id map or near-duplicate pixels."""
    from relate.data.corpus import read_corpus

    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, out / "leakage_config.yaml")
    tables = [read_corpus(cfg.corpus_dir, s, validate=False) for s in cfg.splits]
    ids = [image_key(src, i) for t in tables
           for i, src in zip(t.column("image_id").to_pylist(), t.column("source").to_pylist())]
    uris = [u for t in tables for u in t.column("uri").to_pylist()]
    evals = _eval_images(cfg)
    eval_ids = {i for i, _ in evals}
    for f in cfg.eval_ids_files:
        for n, line in enumerate(Path(f).read_text().splitlines()):
            line = line.split("#", 1)[0].strip()
            if line:
                eval_ids.add(parse_image_key(line, f"{f} line {n + 1}"))
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
