"""Build the synthetic corpus with Ray Data: scenes -> PNG/JPEG images + Parquet corpus splits.

``python -m pipelines.synthetic --set num_scenes=2000 --set out_dir=runs/synthetic`` (or
``ray job submit -- python -m pipelines.synthetic ...`` on a cluster). Writes
``<out_dir>/images/<image_id>.<ext>``, ``<out_dir>/corpus/{train,val,test}/*.parquet`` in the
project schema, and ``<out_dir>/synthetic_stats.json``; prints the corpus statistics. ``--config
pipelines/configs/synthetic_pu.yaml`` builds a positive-unlabeled corpus mixed from annotation
sources of different scope (``sources``, ``multi_label``; see ``relate.data.synthetic_annotation``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from PIL import Image
from pydantic import Field

from relate.config import dump_config, parse_job_args
from relate.jobinfo import Progress, run_name
from relate.storage import Location
from relate.corpus_stats import corpus_statistics, format_statistics
from relate.data.corpus import SPLITS, read_corpus
from relate.data.lexicon import concept_of
from relate.data.synthetic import SyntheticConfig, make_scene, split_of
from relate.schema import CORPUS_SCHEMA, to_table

__all__ = ["SyntheticJobConfig", "SceneStage", "build_synthetic", "main", "SyntheticResult"]


class SyntheticJobConfig(SyntheticConfig):
    """The synthetic world plus where and how the Ray Data job writes it."""

    out_dir: Location = Field("runs/synthetic", description="Run folder for images, corpus shards and stats.")
    blocks: int = Field(8, ge=1, description="Ray Data blocks the scene index range is cut into.")
    num_cpus: float = Field(1.0, gt=0, description="CPUs reserved per scene-building task.")
    overwrite: bool = Field(True, description="Replace an existing corpus folder instead of failing.")


class SceneStage:
    """Ray Data stage: scene indices in, corpus rows out (writes each image as a side effect).

    Needs the column ``id`` (scene index). Works on a plain ``{"id": [...]}`` dict in tests.
    """

    def __init__(self, world: SyntheticConfig, image_dir: str) -> None:
        self.world = world
        self.image_dir = Path(image_dir)
        self.ext = "png" if world.image_format == "png" else "jpg"

    def __call__(self, batch: dict[str, np.ndarray]) -> pa.Table:
        rows = []
        for index in np.asarray(batch["id"]).tolist():
            scene = make_scene(int(index), self.world)
            path = (self.image_dir / f"{scene.image_id}.{self.ext}").resolve()
            tmp = path.with_suffix(f".tmp{os.getpid()}.{self.ext}")
            Image.fromarray(scene.image).save(tmp, quality=92) if self.ext == "jpg" else Image.fromarray(scene.image).save(tmp, compress_level=1)
            os.replace(tmp, path)  # atomic: a crashed task never leaves half an image
            rows.append(scene.to_record(str(path), split_of(scene.image_id, self.world.split_fractions)))
        return to_table(rows, CORPUS_SCHEMA, table="synthetic")


def build_synthetic(cfg: SyntheticJobConfig):
    """The unmaterialised Dataset of corpus rows (images are written as blocks execute)."""
    import ray

    image_dir = Path(cfg.out_dir) / "images"
    image_dir.mkdir(parents=True, exist_ok=True)
    world = SyntheticConfig(**{k: getattr(cfg, k) for k in SyntheticConfig.model_fields})
    ds = ray.data.range(cfg.num_scenes, override_num_blocks=min(cfg.blocks, cfg.num_scenes))
    return ds.map_batches(SceneStage(world, str(image_dir)), batch_size=None, num_cpus=cfg.num_cpus)


@dataclass
class SyntheticResult:
    out_dir: str
    stats: dict
    seconds: float

    @property
    def scenes_per_s(self) -> float:
        return self.stats["images"] / max(self.seconds, 1e-9)


def _family(predicate: str) -> str:
    return concept_of(predicate).family


def _annotation_statistics(table: pa.Table) -> dict:
    """Images per annotation source and the share of stated (subject, object) pairs carrying two or
    more predicates: the two properties ``sources`` and ``multi_label`` add to the world."""
    sources = Counter(table.column("source").to_pylist())
    per_pair = Counter((i, r["subject"], r["object"]) for i, rels in enumerate(table.column("relations").to_pylist())
                       for r in rels)
    multi = sum(1 for n in per_pair.values() if n > 1)
    return {"sources": dict(sorted(sources.items())), "stated_pairs": len(per_pair),
            "multi_predicate_pair_share": round(multi / max(len(per_pair), 1), 4)}


def main(cfg: SyntheticJobConfig) -> SyntheticResult:
    import ray

    ray.init(ignore_reinit_error=True, include_dashboard=False, configure_logging=False) if not ray.is_initialized() else None
    out = Path(cfg.out_dir)
    corpus = out / "corpus"
    if corpus.exists():
        if not cfg.overwrite:
            raise FileExistsError(f"{corpus} exists; pass --set overwrite=true to replace it")
        shutil.rmtree(corpus)
    out.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, out / "synthetic_config.yaml")
    t0 = time.perf_counter()
    # stream the scenes through the driver (rows only; the stage wrote the images) to count them
    progress = Progress(run_name("synthetic", cfg.out_dir), "scenes", cfg.num_scenes, min_interval_s=10.0)
    tables = []
    for batch in build_synthetic(cfg).iter_batches(batch_size=None, batch_format="pyarrow"):
        tables.append(batch)
        progress.update(batch.num_rows)
    # Every row is on the driver already; one file per split from here. (Three more Ray Data jobs
    # started right after the first one finished warned on 2 CPUs that no CPU was free yet.)
    rows = pa.concat_tables(tables)
    for split in SPLITS:
        (corpus / split).mkdir(parents=True)
        pq.write_table(rows.filter(pc.equal(rows["split"], split)), corpus / split / "part-0.parquet")
    seconds = time.perf_counter() - t0
    table = read_corpus(out)
    stats = corpus_statistics(table, _family)
    stats["splits"] = {s: int(sum(1 for v in table.column("split").to_pylist() if v == s)) for s in SPLITS}
    if cfg.sources is not None or cfg.multi_label > 0:
        stats.update(_annotation_statistics(table))
    (out / "synthetic_stats.json").write_text(json.dumps(stats, indent=2))
    print(format_statistics(stats, f"synthetic corpus ({out})"))
    print(f"  built in {seconds:.1f} s ({stats['images'] / seconds:.1f} scenes/s)")
    return SyntheticResult(str(out), stats, seconds)


def _cli(argv: Sequence[str] | None = None) -> None:
    main(parse_job_args(SyntheticJobConfig, argv, description=__doc__ or ""))


if __name__ == "__main__":
    _cli(sys.argv[1:])
