"""PoporoIN builder (seed 000, Sec. 3.3): class-pair lists per cell + an ImageNet-val folder ->
a triplet manifest, with Ray Data doing the per-triplet image sampling.

    python -m pipelines.poporo_in --config my_poporo_in.yaml

The class-level plan (which query/target/distractor classes, one quarter per CR/TR x CD/SD cell)
is made on the driver from the seed; each triplet's images are then chosen from (seed,
triplet_id) alone, so the manifest is identical however Ray splits or orders the work.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from relate.config import StrictConfig, parse_job_args
from relate.data.poporo import (
    list_class_images, pick_images, plan_class_triplets, read_class_names, read_pair_list,
    write_triplet_manifest,
)

__all__ = ["PoporoINConfig", "PairListsConfig", "AssignImages", "build_poporo_in", "write_poporo_in", "main"]


class PairListsConfig(StrictConfig):
    """One class-pair file per annotation cell ('a,b' per line, folder names of the image root)."""

    CR: str = Field(description="taxonomic pairs (same purpose or basic category)")
    TR: str = Field(description="thematic pairs (used together, same situation, object-location...)")
    CD: str = Field(description="colour-matched but unrelated pairs")
    SD: str = Field(description="shape-matched but unrelated pairs")


class PoporoINConfig(StrictConfig):
    """Where the images and pair lists are, how many triplets, and where the manifest goes."""

    image_root: str = Field(description="ImageNet-validation folder in class layout: root/<class>/<image>")
    pairs: PairListsConfig = Field(description="class-pair list per cell")
    class_names: str | None = Field(default=None, description="optional 'wnid name, ...' mapping file (LOC_synset_mapping.txt) for the label columns")
    n_triplets: int = Field(default=1000, ge=4, description="triplets; multiple of 4 (PoporoIN: 1000, CR=TR=CD=SD=500)")
    seed: int = Field(default=0, description="seed for class planning and image choice")
    symmetric: bool = Field(default=True, description="a pair (a, b) also offers b as the query")
    output: str = Field(default="runs/poporo_in/manifest.csv", description="manifest path (.csv or .parquet)")
    num_cpus: float = Field(default=0.5, gt=0, description="CPUs per image-assignment actor (fractional on small machines)")
    concurrency: int = Field(default=1, ge=1, description="image-assignment actors")
    batch_size: int = Field(default=64, ge=1, description="triplets per map_batches call")


class AssignImages:
    """Ray Data stage: adds query/target/distractor image paths (and labels) to planned rows.

    Needs columns triplet_id, query_class, target_class, distractor_class; works on a plain dict
    of lists too. Class folder listings are read once per actor.
    """

    columns = ("triplet_id", "query_class", "target_class", "distractor_class")

    def __init__(self, image_root: str, seed: int, class_names: dict[str, str] | None = None) -> None:
        self.root = image_root
        self.seed = seed
        self.names = class_names or {}
        self._listing: dict[str, list[str]] = {}

    def _images(self, cls: str) -> list[str]:
        if cls not in self._listing:
            self._listing[cls] = list_class_images(self.root, cls)
        return self._listing[cls]

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        missing = [c for c in self.columns if c not in batch]
        if missing:
            raise KeyError(f"AssignImages needs columns {missing}; batch has {sorted(batch)}")
        out: dict[str, list[str]] = {k: [] for k in ("query", "target", "distractor", "query_label",
                                                     "target_label", "distractor_label")}
        for i in range(len(batch["triplet_id"])):
            row = {k: str(batch[k][i]) for k in self.columns}
            for cls in (row["query_class"], row["target_class"], row["distractor_class"]):
                self._images(cls)
            picked = pick_images(row, self._listing, self.seed)
            for role in ("query", "target", "distractor"):
                out[role].append(picked[role])
                cls = row[f"{role}_class"]
                out[f"{role}_label"].append(self.names.get(cls, cls))
        return dict(batch) | {k: np.array(v, dtype=object) for k, v in out.items()}


def _plan(cfg: PoporoINConfig) -> list[dict[str, str]]:
    pairs = {cell: read_pair_list(getattr(cfg.pairs, cell)) for cell in ("CR", "TR", "CD", "SD")}
    plan = plan_class_triplets(pairs, cfg.n_triplets, cfg.seed, cfg.symmetric)
    root = Path(cfg.image_root)
    if not root.is_dir():
        raise FileNotFoundError(f"image_root is not a folder: {root}")
    used = sorted({r[k] for r in plan for k in ("query_class", "target_class", "distractor_class")})
    absent = [c for c in used if not (root / c).is_dir()]
    if absent:
        raise FileNotFoundError(f"{root}: no folder for classes {absent[:10]} ({len(absent)} missing)")
    return plan


def build_poporo_in(cfg: PoporoINConfig):
    """The unmaterialised Ray Dataset of manifest rows (plan on the driver, images in Ray Data)."""
    import ray

    plan = _plan(cfg)
    names = read_class_names(cfg.class_names) if cfg.class_names else None
    return ray.data.from_items(plan).map_batches(
        AssignImages, fn_constructor_args=(cfg.image_root, cfg.seed, names),
        batch_size=cfg.batch_size, num_cpus=cfg.num_cpus, concurrency=cfg.concurrency,
        batch_format="numpy")


def write_poporo_in(cfg: PoporoINConfig) -> Path:
    """Run the builder and write the manifest sorted by triplet_id."""
    rows = sorted(build_poporo_in(cfg).take_all(), key=lambda r: r["triplet_id"])
    return write_triplet_manifest(rows, cfg.output)


def main(cfg: PoporoINConfig) -> Path:
    import ray

    if not ray.is_initialized():
        ray.init(ignore_reinit_error=True, log_to_driver=False)
    path = write_poporo_in(cfg)
    print(f"PoporoIN manifest with {cfg.n_triplets} triplets: {path}")
    return path


if __name__ == "__main__":
    main(parse_job_args(PoporoINConfig, description="Build a PoporoIN-style triplet manifest"))
