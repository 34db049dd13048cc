"""One optimiser step of the relation model's training recipe, in process (CPU).

Figures:
* ``steps_per_s``: full steps per second of ``cpu_small`` (forward with forced annotated pairs,
  ``relation_objective``, backward, clip, AdamW) on a batch of 16 decoded synthetic scenes at the
  recipe's base side, with the whole recipe on (batch negatives, the Eq. 3 discount, per-source
  negative masks). ``step_ms`` is its median.
* ``recipe_overhead``: median step time with the discount and the source masks on over the same
  step with both off, arms alternating so machine load hits both alike. Goal <= 1.05.
  ``objective_ms_on`` / ``objective_ms_off`` time ``relation_objective`` alone (forward outputs
  reused), where the two terms' own cost shows.

The predicate space is the training job's own (``train_jobs.relation_data.build_space`` on a
small corpus of the positive-unlabeled synthetic world, ``pipelines/configs/synthetic_pu.yaml``:
three sources of different scope, pairs stated with some of their true predicates), so P(q|p) is
estimated from real co-annotations and the scoped sources' masks are live.

``python -m benchmarks.train_step [--quick] [--out FILE]``
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

CONFIG = Path(__file__).resolve().parents[1] / "train_jobs" / "configs" / "cpu_small.yaml"


PU_WORLD = Path(__file__).resolve().parents[1] / "pipelines" / "configs" / "synthetic_pu.yaml"


def _corpus(root: Path, n: int):
    """A train split of ``n`` scenes of the positive-unlabeled world; returns its SyntheticConfig."""
    import yaml

    from relate.data.synthetic import SyntheticConfig
    from relate.data.synthetic_corpus import write_corpus

    pu = yaml.safe_load(PU_WORLD.read_text())
    world = SyntheticConfig(num_scenes=n, min_size=96, max_size=128, sources=pu["sources"],
                            multi_label=pu["multi_label"])
    write_corpus(root, world)
    return world


def measure(quick: bool) -> dict[str, float]:
    import torch

    from relate.config import load_config
    from relate.data.corpus import read_corpus
    from relate.data.synthetic_annotation import source_scopes
    from relate.losses import force_mask, relation_objective
    from relate.model.model import create_relation_model
    from train_jobs.relation_data import DecodeStage, build_space
    from train_jobs.train_relation import TrainRelationConfig

    torch.set_num_threads(os.cpu_count() or 2)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        world = _corpus(root, 40)
        scopes = [f"data.source_scopes.{k}=[{', '.join(v)}]" for k, v in source_scopes(world.sources).items()]
        cfg = load_config(TrainRelationConfig, CONFIG, [
            f"data.corpus_root={root}", f"data.cache_dir={root / 'cache'}", *scopes])
        space = build_space(cfg.data, cfg.model.text_dim)
        train = read_corpus(root, "train")
        stage = DecodeStage(cfg.model.backbone.img_size, cfg.data, space["forms"], space["categories"],
                            sources=space["sources"], keep_aspect=cfg.model.backbone.keep_aspect)
        batch = {k: torch.from_numpy(v) for k, v in stage(train.slice(0, cfg.optim.batch_size)).items()}
    model = create_relation_model(cfg.model).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    bank = space["bank"].tensor("cpu")
    images = batch["image"].permute(0, 3, 1, 2).float().div_(255)
    boxes, valid, rels, cats = batch["boxes"], batch["box_valid"], batch["rels"], batch["categories"]
    force = force_mask(rels, valid.shape[1])
    on = cfg.loss
    off = on.model_copy(update={"pu_discount": False, "source_negatives": False})
    pspace = space["space"]

    def step(loss_cfg) -> float:
        t0 = time.perf_counter()
        out = model(images, boxes, valid, bank, force=force)
        terms = relation_objective(out, rels, cats, valid, pspace, loss_cfg, sources=batch["source"])
        opt.zero_grad(set_to_none=True)
        terms["total"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return time.perf_counter() - t0

    rounds = 6 if quick else 30
    for _ in range(2):  # warm-up: allocator, oneDNN primitives
        step(on), step(off)
    t_on, t_off = [], []
    for _ in range(rounds):
        t_on.append(step(on))
        t_off.append(step(off))
    with torch.no_grad():  # the objective alone, on one forward's outputs
        out = model(images, boxes, valid, bank, force=force)
        o_on, o_off = [], []
        for _ in range(rounds * 3):
            for arm, acc in ((on, o_on), (off, o_off)):
                t0 = time.perf_counter()
                relation_objective(out, rels, cats, valid, pspace, arm, sources=batch["source"])
                acc.append(time.perf_counter() - t0)
    m_on, m_off = statistics.median(t_on), statistics.median(t_off)
    return {"steps_per_s": round(1 / m_on, 3), "step_ms": round(m_on * 1e3, 1),
            "recipe_overhead": round(m_on / m_off, 4), "step_ms_off": round(m_off * 1e3, 1),
            "objective_ms_on": round(statistics.median(o_on) * 1e3, 2),
            "objective_ms_off": round(statistics.median(o_off) * 1e3, 2),
            "batch_size": cfg.optim.batch_size, "side": cfg.model.backbone.img_size,
            "scoped_images": int((batch["source"] > 0).sum()), "p_cond_nonzero": int((pspace.p_cond > 0).sum())}


if __name__ == "__main__":
    from benchmarks._common import run_benchmark

    run_benchmark("train_step", measure)
