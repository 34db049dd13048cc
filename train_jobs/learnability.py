"""Can the relation model learn what its data decides? Memorise a few images, then take away what decides.

A model that cannot memorise a handful of images cannot learn a corpus; one that memorises them
without the input a family needs is reading something else. This check trains the train job's
own step (``train_jobs.relation_worker.TrainRunner``: its objective, optimiser, EMA and multi-scale
rungs) in-process on a few synthetic scenes and their twins, states their full truth, and asks
how much of each image's truth ranks among its ``|truth|`` best cells (``recall within count``,
``relate.metrics.truth``). Three arms:

* ``none``: the model as trained; it should reach 1.0 in every family;
* ``shuffled_boxes``: every step hands the model the image's boxes in a fresh random order, so a
  relation's label no longer belongs to the boxes it is read from. The families decided by boxes
  (spatial, contact, containment, proximity) cannot be learned; scored on the true boxes;
* ``blank_pixels``: the images are blank, in training and when scored. Each scene comes with its
  twin (``make_scene(..., twin=True)``: the same boxes, the drawing order and brightness order
  reversed), so the pixel families (depth, appearance) carry contradictory labels for identical
  inputs: their direction accuracy (the true concept above its inverse on the same pair) cannot
  beat chance, 0.5, while recall within count can still be filled by scoring both directions.

    python -m train_jobs.learnability --set control=blank_pixels
    python -m benchmarks.learnability --quick      # all three arms, and a short run's AP vs the rules
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Sequence

import numpy as np
import torch
from pydantic import Field

from relate.config import StrictConfig, load_config, parse_job_args

__all__ = ["LearnabilityConfig", "LearnabilityResult", "CONTROLS", "main", "build_recipe",
           "pooled_recall"]

CONTROLS = ("none", "shuffled_boxes", "blank_pixels")
_RECIPE = Path(__file__).resolve().parent / "configs" / "learnability.yaml"


class LearnabilityConfig(StrictConfig):
    """Which images, which recipe, how long, and which input is taken away."""

    recipe: str = Field(str(_RECIPE), description="train_relation config YAML whose model, loss and optimiser are "
                        "trained (the run and corpus fields are not used)")
    overrides: list[str] = Field(default_factory=list, description="dotted overrides on the recipe, e.g. "
                                 "['optim.lr_head=1e-3']")
    scenes: int = Field(4, ge=1, description="synthetic scenes memorised; each comes with its twin")
    twins: bool = Field(True, description="add each scene's twin (same boxes, depth and brightness reversed): "
                        "without them, the blank-pixel arm can memorise depth from the boxes of so few images")
    seed: int = Field(0, description="world seed of the scenes and the run's seed")
    min_size: int = Field(96, ge=48, description="smallest image side of the scenes")
    max_size: int = Field(128, ge=48, description="largest image side of the scenes")
    max_objects: int = Field(6, ge=2, description="most objects per scene")
    steps: int = Field(200, gt=0, description="optimiser steps, each over optim.batch_size images drawn from the scenes "
                       "(all of them when they are fewer)")
    eval_scenes: int = Field(0, ge=0, description="0: score the training images (memorisation); N: score N further "
                             "scenes of the world, never trained on (a short run's generalisation)")
    eval_every: int = Field(0, ge=0, description="with eval_scenes: also score the held-out scenes every N steps "
                            "(the result's curve; a line printed each time); 0: only at the end")
    control: Literal["none", "shuffled_boxes", "blank_pixels"] = Field("none", description="what is taken away")
    coverage: Literal["full", "stated"] = Field(
        "full", description="what the training scenes state: 'full', every relation that holds; 'stated', only the "
        "few the world chooses to state, as annotation gives (a positive-unlabeled corpus). Held-out scenes are "
        "scored against their full truth either way")
    work_dir: str | None = Field(None, description="folder for the images, the corpus and the final EMA weights "
                                 "(ema_weights.pt); None: a temporary folder, removed at the end")


@dataclass
class LearnabilityResult:
    control: str
    count_recall: float
    family_count_recall: dict[str, float]
    family_ap: dict[str, float]
    top10_precision: float
    positives: dict[str, int]
    family_direction: dict[str, float]
    steps: int
    seconds: float
    images: int
    losses: list[float] = field(default_factory=list)
    curve: list[dict] = field(default_factory=list)  # (step, seconds, AP per family, top-10) at each eval_every
    report: object | None = None  # the final relate.metrics.truth.TruthReport (concept AP, pair AP, directions)


def pooled_recall(res: LearnabilityResult, families: Sequence[str]) -> float:
    """Recall within count over ``families`` only (each family weighted by its true relations)."""
    num = den = 0.0
    for f in families:
        v, n = res.family_count_recall.get(f), res.positives.get(f, 0)
        if v is not None and n and v == v:
            num, den = num + v * n, den + n
    return num / den if den else float("nan")


def build_recipe(cfg: LearnabilityConfig, corpus_root: str, steps: int):
    """The recipe's TrainRelationConfig pointed at ``corpus_root`` (its warm-up and schedule kept)."""
    from train_jobs.train_relation import TrainRelationConfig

    over = [*cfg.overrides, f"data.corpus_root={corpus_root}", f"optim.max_steps={steps}", f"run.seed={cfg.seed}",
            f"data.cache_dir={Path(corpus_root) / 'cache'}"]
    return load_config(TrainRelationConfig, cfg.recipe, over)


def _write_scenes(cfg: LearnabilityConfig, root: Path) -> None:
    """The training scenes (with twins) as split ``train``; ``eval_scenes`` more, without twins and stating
    their full truth, as ``val``."""
    import pyarrow.parquet as pq
    from PIL import Image

    from relate.config import dump_config
    from relate.data.synthetic import SyntheticConfig, make_scene
    from relate.schema import CORPUS_SCHEMA, to_table

    world = SyntheticConfig(seed=cfg.seed, num_scenes=cfg.scenes + cfg.eval_scenes, min_size=cfg.min_size,
                            max_size=cfg.max_size, max_objects=cfg.max_objects, min_objects=min(3, cfg.max_objects),
                            coverage="full")
    stated = world.model_copy(update={"coverage": "stated"})  # the same scenes, stating what the world chooses
    rows: dict[str, list[dict]] = {"train": [], "val": []}
    for i in range(cfg.scenes + cfg.eval_scenes):
        split = "train" if i < cfg.scenes else "val"
        for twin in (False, True) if cfg.twins and split == "train" else (False,):
            sc = make_scene(i, stated if split == "train" and cfg.coverage == "stated" else world, twin=twin)
            uri = root / "images" / f"{sc.image_id}.png"
            uri.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(sc.image).save(uri)
            rows[split].append(sc.to_record(str(uri), split))
    for split, items in rows.items():
        if items:
            (root / "corpus" / split).mkdir(parents=True, exist_ok=True)
            pq.write_table(to_table(items, CORPUS_SCHEMA), root / "corpus" / split / "part-0.parquet")
    dump_config(world, root / "synthetic_config.yaml")


def _apply_control(batch: dict[str, torch.Tensor], control: str, rng: np.random.Generator) -> None:
    if control == "blank_pixels":
        batch["image"].zero_()
    elif control == "shuffled_boxes":
        for k in range(batch["boxes"].shape[0]):
            n = int(batch["box_valid"][k].sum())
            batch["boxes"][k, :n] = batch["boxes"][k, torch.from_numpy(rng.permutation(n))]


def _truth(table) -> list[tuple[frozenset, int]]:
    """Each row's full truth: its stated relations are all of it (coverage: full), by concept."""
    from relate.data.lexicon import SURFACE_TO_CONCEPT

    return [(frozenset((r["subject"], r["object"], SURFACE_TO_CONCEPT[r["predicate"]]) for r in rels), len(bx))
            for rels, bx in zip(table.column("relations").to_pylist(), table.column("boxes").to_pylist())]


def main(cfg: LearnabilityConfig) -> LearnabilityResult:
    """Train the recipe on the scenes under ``cfg.control`` and score recall within count."""
    from relate.data.corpus import read_corpus
    from train_jobs.relation_data import DataConfig, DecodeStage, build_space
    from train_jobs.relation_worker import TrainRunner

    if cfg.coverage == "stated" and (cfg.twins or not cfg.eval_scenes):
        raise ValueError("coverage 'stated' trains on what the world states and is scored on held-out scenes against "
                         "their full truth: set twins=false and eval_scenes > 0")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(cfg.work_dir or tmp)
        _write_scenes(cfg, root)
        train_cfg = build_recipe(cfg, str(root), cfg.steps)
        space = build_space(train_cfg.data, train_cfg.model.text_dim)
        table = read_corpus(root, "train")
        data: DataConfig = train_cfg.data
        if len(table) and max(len(b) for b in table.column("boxes").to_pylist()) > data.max_boxes:
            raise ValueError(f"scenes have more boxes than the recipe's data.max_boxes={data.max_boxes}")
        decode = DecodeStage(train_cfg.model.backbone.img_size, data, space["forms"], space["categories"],
                             seed=cfg.seed, sources=space["sources"], keep_aspect=train_cfg.model.backbone.keep_aspect)
        runner = TrainRunner(train_cfg, space, cfg.steps)
        rng = np.random.default_rng([cfg.seed, 17])
        per_step = min(train_cfg.optim.batch_size, len(table))
        eval_table = read_corpus(root, "val") if cfg.eval_scenes else table
        t0 = time.perf_counter()
        losses, curve = [], []
        for step in range(1, cfg.steps + 1):
            rows = table.take(np.sort(rng.choice(len(table), per_step, replace=False)))
            batch = {k: torch.from_numpy(v) for k, v in decode(rows).items()}  # fresh photometric jitter
            _apply_control(batch, cfg.control, rng)
            losses.append(runner.train_step(batch)["loss/total"])
            if cfg.eval_scenes and cfg.eval_every and step % cfg.eval_every == 0 and step < cfg.steps:
                rep = _score(runner, train_cfg, space, eval_table, cfg, ema=True)
                curve.append(_curve_point(step, time.perf_counter() - t0, rep))
        seconds = time.perf_counter() - t0
        if cfg.work_dir:  # kept for a closer look (relate.checkpoint reads EMA state dicts)
            torch.save(runner.ema.state, root / "ema_weights.pt")
        rep = _score(runner, train_cfg, space, eval_table, cfg, ema=bool(cfg.eval_scenes))
        if cfg.eval_scenes and cfg.eval_every:
            curve.append(_curve_point(cfg.steps, seconds, rep))
    return LearnabilityResult(cfg.control, rep.count_recall, rep.family_count_recall, rep.family_ap,
                              rep.topk_precision, rep.positives, rep.family_direction, cfg.steps, seconds, len(eval_table), losses, curve,
                              rep)


def _score(runner, train_cfg, space, table, cfg: LearnabilityConfig, ema: bool):
    """Recall within count, AP and top-10 of the runner's weights (EMA or raw) on ``table``'s images
    (blank for the blank-pixel arm), against their full truth."""
    from relate.api import RelationPredictor
    from relate.model.model import create_relation_model
    from train_jobs.relation_eval import truth_report

    model = create_relation_model(train_cfg.model)
    model.load_state_dict(runner.ema.state if ema else runner.raw.state_dict())
    predictor = RelationPredictor(model, space["bank"])  # packs its own copy for CPU inference
    images = [np.zeros((h, w, 3), np.uint8) for h, w in zip(table.column("height").to_pylist(),
                                                          table.column("width").to_pylist())] \
        if cfg.control == "blank_pixels" else table.column("uri").to_pylist()
    scores = predictor.score_images(images, table.column("boxes").to_pylist())
    return truth_report(predictor, scores, predictor.vocabulary_strings(), _truth(table), train_cfg.data.predicates)


def _curve_point(step: int, seconds: float, rep) -> dict:
    point = {"step": step, "seconds": round(seconds, 1), "top10_precision": rep.topk_precision,
             **{f"{f}_ap": v for f, v in rep.family_ap.items()}}
    aps = " ".join(f"{f} {v:.2f}" for f, v in rep.family_ap.items())
    print(f"step {step} ({seconds:.0f} s): AP {aps}; top-10 {rep.topk_precision:.3f}", flush=True)
    return point


def _cli(argv: Sequence[str] | None = None) -> LearnabilityResult:
    res = main(parse_job_args(LearnabilityConfig, argv, description=__doc__ or ""))
    fams = " ".join(f"{f} {v:.2f}" for f, v in res.family_count_recall.items())
    aps = " ".join(f"{f} {v:.2f}" for f, v in res.family_ap.items())
    print(f"{res.control}: recall within count {res.count_recall:.3f} over {res.images} images after {res.steps} "
          f"steps ({res.seconds:.0f} s); {fams}\n  AP per family: {aps}; top-10 precision {res.top10_precision:.3f}")
    if res.report is not None:  # what limits a family: which pairs, which direction, which concept
        pair = " ".join(f"{f} {v:.2f}" for f, v in res.report.family_pair_ap.items())
        dirs = " ".join(f"{f} {v:.2f}" for f, v in res.report.family_direction.items())
        concepts = " ".join(f"{c} {v:.2f}" for c, v in res.report.concept_ap.items() if v == v)
        print(f"  finding each family's pairs (AP): {pair}\n  direction accuracy: {dirs}\n  AP per concept: {concepts}")
    return res


if __name__ == "__main__":
    _cli(sys.argv[1:])
