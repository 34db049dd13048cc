"""Benchmark data, step by step: check one benchmark's native files and prepare one split for OV-SGG-Bench.

    python -m eval_jobs.prepare vg150 --root /data/vg --out runs/prepared
    python -m eval_jobs.prepare spatialsense --root /data/spatialsense --describe
    python -m eval_jobs.prepare hico_det --root /data/hico --exclude runs/leakage/excluded_ids.csv
    python -m eval_jobs.prepare synthetic --root runs/demo/synthetic     # the synthetic suite

``synthetic`` builds the synthetic OV-SGG-Bench from a synthetic world (pipelines.synthetic's
output folder): its test split exported in the native VG150, PSG, Haystack and SpatialSense
layouts and PSG with simulated detections, under ``OUT/synthetic/`` (what
``eval_jobs/configs/ovsgg_synthetic.yaml`` reads), with the same manifest of file hashes.

Benchmarks: vg150, indoorvg, psg, haystack, hico_det, spatialsense (the readers of
relate.data.readers). Steps:

1. print where the files come from and the layout expected under ``--root``;
2. check the annotation files' structure and name every missing or malformed file (and entry),
   not just the first; an unreadable layout stops here with all the problems listed;
3. hash every annotation file found (sha256 and size). **No published checksum of any of these
   files could be found** (Scene-Graph-Benchmark, OpenPSG, Haystack, HICO-DET and SpatialSense
   publish none), so none is pinned: the hashes found are written to ``manifest.json``, and
   ``--expect OLD/manifest.json`` verifies a copy against a manifest written earlier;
4. read the split with the benchmark's reader (which follows the field's own loader and counts in
   ``notes`` every place it must differ) and check that every image file it points at exists;
5. apply the leakage exclusion lists (``--exclude``: the ``excluded_ids.csv`` of pipelines.leakage
   or one id per line; ids are namespaced by dataset, ``vg:123`` or ``coco:000139``, and compare
   without leading zeros; a bare id is an error) and record what was removed;
6. write, under ``OUT/<benchmark>/<split>/``: ``corpus.parquet`` (+ ``cells.parquet``),
   ``eval_ids.txt`` (this split's namespaced image ids, for ``pipelines.leakage --set eval_ids_files=[...]``
   so no training corpus holds them), ``excluded_ids.txt``, ``manifest.json`` and
   ``benchmark.yaml``: a ready ``eval_jobs.ovsgg`` benchmark entry that reads the native files
   with the same reader, options and exclusion list.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NoReturn, Sequence

import pyarrow.parquet as pq
import yaml
from pydantic import Field

from relate.config import StrictConfig, apply_overrides, dump_config
from relate.storage import Location, under_root
from relate.data.corpus import require_corpus
from relate.job_inputs import MAKE_WORLD, one_line_errors
from relate.data.readers import BenchmarkData, image_key, load_exclusions, read_benchmark
from relate.data.readers.layouts import LAYOUTS, check_layout, describe_layout

__all__ = ["PrepareConfig", "PrepareResult", "PrepareError", "KNOWN_CHECKSUMS", "file_manifest", "main",
           "prepare_synthetic"]

Benchmark = Literal["vg150", "indoorvg", "psg", "haystack", "hico_det", "spatialsense"]

# Published (bytes, sha256) per benchmark file. Empty on purpose: none of the distributors publishes
# a checksum that we could find; fill an entry only from a real published source.
KNOWN_CHECKSUMS: dict[str, dict[str, tuple[int, str]]] = {}


class PrepareError(RuntimeError):
    """The benchmark's files are missing or malformed; the message lists every problem found."""


class PrepareConfig(StrictConfig):
    """One benchmark, one split: where its native files are and where the prepared split goes."""

    benchmark: Benchmark = Field(description="registered reader name of the benchmark")
    root: Location = Field(description="folder holding the benchmark's native files (see --describe)")
    split: str = Field(default="test", description="split to prepare (vg150/indoorvg: train, val or test; "
                                                   "psg/hico_det: train or test; spatialsense: train, valid or test)")
    out_dir: Location = Field(default="runs/prepared", description="prepared splits go to OUT/<benchmark>/<split>/")
    exclude: list[str] = Field(default_factory=list, description="leakage exclusion lists (excluded_ids.csv of "
                                                                 "pipelines.leakage, or one id per line)")
    expect: str | None = Field(default=None, description="a manifest.json written earlier; every file it lists "
                                                        "must be present with the same size and sha256")
    reader_options: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="extra reader keyword arguments (h5_name, image_dir, json_name, ...)")
    require_images: bool = Field(default=True, description="every image the split points at must exist")
    axis: Literal["A1", "A2", "A3", "A6"] | None = Field(
        default=None, description="axis written into benchmark.yaml (default: the benchmark's usual axis)")


@dataclass
class PrepareResult:
    out_dir: Path
    manifest: dict[str, Any]
    data: BenchmarkData


def file_manifest(root: Path, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``{relative path: {bytes, sha256}}`` of the files among ``names`` that exist under ``root``."""
    out = {}
    for n in names:
        p = root / n
        if p.is_file():
            h = hashlib.sha256()
            with open(p, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    h.update(chunk)
            out[n] = {"bytes": p.stat().st_size, "sha256": h.hexdigest()}
    return out


def _verify(name: str, found: dict[str, dict], expect: str | None) -> tuple[list[str], dict[str, str]]:
    """Problems against published and expected hashes, and the verification status per file."""
    problems, status = [], {}
    pinned = {k: {"bytes": b, "sha256": s} for k, (b, s) in KNOWN_CHECKSUMS.get(name, {}).items()}
    ref = dict(pinned)
    if expect:
        p = Path(expect)
        if not p.is_file():
            return [f"{p}: expected manifest not found"], status
        ref.update(json.loads(p.read_text()).get("files", {}))
    for f, want in ref.items():
        got = found.get(f)
        if got is None:
            problems.append(f"{f}: listed in {'the published checksums' if f in pinned else expect} but missing")
        elif (got["bytes"], got["sha256"]) != (want["bytes"], want["sha256"]):
            problems.append(f"{f}: {got['bytes']} bytes sha256 {got['sha256'][:16]}... differs from the expected "
                            f"{want['bytes']} bytes sha256 {want['sha256'][:16]}...")
    for f in found:
        status[f] = ("published" if f in pinned else "expected manifest") if f in ref else "recorded only"
    return problems, status


def _fail(out: Path, problems: list[str], stage: str) -> NoReturn:
    out.mkdir(parents=True, exist_ok=True)
    (out / "validation.json").write_text(json.dumps({"stage": stage, "problems": problems}, indent=2))
    shown = problems[:40] + ([f"... and {len(problems) - 40} more"] if len(problems) > 40 else [])
    raise PrepareError(f"{stage}: {len(problems)} problem(s) (all in {out / 'validation.json'}):\n  "
                       + "\n  ".join(shown))


def _read(cfg: PrepareConfig, exclusion_file: Path | None) -> BenchmarkData:
    kw: dict[str, Any] = {"split": cfg.split, **cfg.reader_options}
    if cfg.benchmark == "hico_det" and (cfg.axis or LAYOUTS[cfg.benchmark].axis) == "A2":
        kw["cells"] = True
    return read_benchmark(cfg.benchmark, cfg.root, exclude=str(exclusion_file) if exclusion_file else None, **kw)


def _counts(data: BenchmarkData) -> dict[str, Any]:
    rels = data.corpus.column("relations").to_pylist()
    # images without a relation (HICO-DET's all-no_interaction ones) are evaluation images all the same:
    # counted apart, listed in eval_ids.txt, kept out of training by the leakage filter
    out = {"images": data.corpus.num_rows, "images_with_relations": sum(1 for r in rels if r),
           "relations": sum(len(r) for r in rels),
           "predicates_used": len({x["predicate"] for r in rels for x in r}), "vocabulary_size": data.vocabulary_size}
    if data.cells is not None:
        labels = [c["label"] for cs in data.cells.column("cells").to_pylist() for c in cs]
        out |= {"positive_cells": sum(labels), "negative_cells": len(labels) - sum(labels)}
    return out


def _benchmark_entry(cfg: PrepareConfig, exclusion_file: Path | None) -> dict[str, Any]:
    """An eval_jobs.ovsgg BenchmarkSpec reading the same native files, options and exclusions."""
    opts = dict(cfg.reader_options)
    if exclusion_file is not None:
        opts["exclude"] = str(exclusion_file.resolve())
    return {"name": cfg.benchmark, "axis": cfg.axis or LAYOUTS[cfg.benchmark].axis, "reader": cfg.benchmark,
            "path": str(Path(cfg.root).resolve()), "split": cfg.split, "reader_options": opts}


def _merge_exclusions(cfg: PrepareConfig, out: Path) -> Path | None:
    if not cfg.exclude:
        return None
    ids = set().union(*(load_exclusions(p) for p in cfg.exclude))
    path = out / "exclusion_list.txt"
    path.write_text("".join(f"{i}\n" for i in sorted(ids)))
    return path


def _vg_image_dir(cfg: PrepareConfig) -> PrepareConfig:
    """Scene-Graph-Benchmark keeps the VG pixels in VG_100K/; use it when images/ is absent."""
    root = Path(cfg.root)
    if (cfg.benchmark in ("vg150", "indoorvg") and "image_dir" not in cfg.reader_options
            and not (root / "images").is_dir() and (root / "VG_100K").is_dir()):
        return cfg.model_copy(update={"reader_options": {**cfg.reader_options, "image_dir": "VG_100K"}})
    return cfg


def prepare_synthetic(root: str | Path, out_dir: str | Path = "runs/prepared", seed: int = 0) -> dict[str, Path]:
    """The synthetic suite from a synthetic world folder, under ``out_dir/synthetic/<benchmark>``;
    every written file's size and sha256 go to ``manifest.json`` there."""
    from relate.data.corpus import read_corpus
    from relate.data.export import export_benchmark_suite

    out = Path(out_dir) / "synthetic"
    truth = read_corpus(root)  # names the folder when it holds no corpus
    paths = export_benchmark_suite(truth, out, seed=seed)
    files = sorted(str(f.relative_to(out)) for f in out.rglob("*") if f.is_file() and f.name != "manifest.json")
    manifest = {"benchmark": "synthetic", "root": str(Path(root).resolve()), "seed": seed,
                "benchmarks": {k: str(v) for k, v in paths.items()}, "files": file_manifest(out, files)}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    n = sum(1 for s in truth.column("split").to_pylist() if (s or "test") == "test")
    print(f"synthetic suite from {root}: {n} test images -> {out} ({', '.join(paths)})")
    return paths


def main(cfg: PrepareConfig) -> PrepareResult:
    """Describe, validate, hash, read, exclude and write one benchmark split (see the module docstring)."""
    cfg = _vg_image_dir(cfg)
    root, out = Path(cfg.root), Path(cfg.out_dir) / cfg.benchmark / cfg.split
    print(describe_layout(cfg.benchmark, root), end="\n\n")
    problems = check_layout(cfg.benchmark, root, cfg.reader_options, cfg.split)
    names = LAYOUTS[cfg.benchmark].files({**cfg.reader_options, "split": cfg.split})
    if cfg.benchmark == "haystack" and not cfg.reader_options.get("json_name"):
        names = ["annotation_v1.json", "haystack.json"]
    found = file_manifest(root, names)
    bad_hash, status = _verify(cfg.benchmark, found, cfg.expect)
    if problems or bad_hash:
        _fail(out, problems + bad_hash, "validation")
    out.mkdir(parents=True, exist_ok=True)
    exclusion_file = _merge_exclusions(cfg, out)
    try:
        data = _read(cfg, exclusion_file)
    except (OSError, ValueError, KeyError) as exc:
        _fail(out, [f"{type(exc).__name__}: {exc}"], "reading")
    missing = sorted(u for u in data.corpus.column("uri").to_pylist() if not Path(u).is_file())
    (out / "missing_images.txt").write_text("".join(f"{u}\n" for u in missing))
    if missing and cfg.require_images:
        _fail(out, [f"{u}: image missing" for u in missing], f"images ({len(missing)} of {data.corpus.num_rows})")
    pq.write_table(data.corpus, out / "corpus.parquet")
    if data.cells is not None:
        pq.write_table(data.cells, out / "cells.parquet")
    ids = data.corpus.column("image_id").to_pylist()
    keys = [image_key(src, i) for i, src in zip(ids, data.corpus.column("source").to_pylist())]
    (out / "eval_ids.txt").write_text("".join(f"{k}\n" for k in keys))  # namespaced: vg:123, coco:139
    (out / "excluded_ids.txt").write_text("".join(f"{i}\n" for i in data.excluded))
    entry = _benchmark_entry(cfg, exclusion_file)
    (out / "benchmark.yaml").write_text(yaml.safe_dump({"benchmarks": [entry]}, sort_keys=False))
    manifest = {"benchmark": cfg.benchmark, "split": cfg.split, "root": str(root.resolve()),
                "source": LAYOUTS[cfg.benchmark].source, "files": found, "checksums": status,
                "checksums_note": "no published checksum exists for these files to our knowledge; hashes are "
                                  "those found here, verified only against --expect when given",
                "counts": _counts(data), "notes": dict(data.notes), "excluded": len(data.excluded),
                "exclusion_lists": [str(Path(p).resolve()) for p in cfg.exclude], "missing_images": len(missing),
                "reader_options": dict(cfg.reader_options), "benchmark_entry": entry}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    dump_config(cfg, out / "prepare_config.yaml")
    _report(manifest, out)
    return PrepareResult(out, manifest, data)


def _report(m: dict[str, Any], out: Path) -> None:
    print(f"{m['benchmark']} {m['split']}: " + ", ".join(f"{k} {v}" for k, v in m["counts"].items()))
    for f, h in m["files"].items():
        print(f"  {f}: {h['bytes']} bytes sha256 {h['sha256']} ({m['checksums'][f]})")
    for k, v in m["notes"].items():
        print(f"  note: {v} {k}")
    print(f"  excluded by the leakage lists: {m['excluded']}; missing images: {m['missing_images']}")
    print(f"wrote {out}; point eval_jobs.ovsgg at {out / 'benchmark.yaml'} (its 'benchmarks' entry)")


def parse_args(argv: Sequence[str] | None = None) -> tuple[PrepareConfig | None, str | None]:
    """``BENCHMARK --root DIR [--split S] [--out DIR] [--exclude F]... [--expect M] [--set k=v]...``;
    with ``--describe`` only the layout text is returned."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("benchmark", choices=sorted(LAYOUTS) + ["synthetic"])
    ap.add_argument("--root", required=True, help="folder holding the benchmark's native files")
    ap.add_argument("--split", default="test")
    ap.add_argument("--out", dest="out_dir", default="runs/prepared")
    ap.add_argument("--exclude", action="append", default=[], help="leakage exclusion list (repeatable)")
    ap.add_argument("--expect", default=None, help="a manifest.json to verify the files against")
    ap.add_argument("--describe", action="store_true", help="print where the data comes from and the layout")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="any other config field, e.g. --set reader_options.image_dir=VG_100K")
    a = ap.parse_args(argv)
    if a.benchmark == "synthetic":
        if a.describe:
            return None, ("synthetic: a folder written by pipelines.synthetic (corpus/<split>/*.parquet and images/); "
                          "its test split is exported as the synthetic OV-SGG-Bench")
        require_corpus(under_root(a.root, "--root"), "synthetic world (--root)", MAKE_WORLD)
        prepare_synthetic(under_root(a.root, "--root"), under_root(a.out_dir, "--out"))
        return None, None
    if a.describe:
        return None, describe_layout(a.benchmark, a.root)
    tree = {k: v for k, v in vars(a).items() if k not in ("describe", "overrides")}
    return PrepareConfig.model_validate(apply_overrides(tree, a.overrides)), None


if __name__ == "__main__":
    one_line_errors("eval_jobs.prepare")
    _cfg, _text = parse_args(sys.argv[1:])
    if _cfg is None:
        if _text:
            print(_text)
        sys.exit(0)
    try:
        main(_cfg)
    except PrepareError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
