"""What each annotation-gap mechanism of the recipe costs in training time: a step with it against one without.

    python -m scripts.lever_step_cost --world runs/world_annotated [--recipe train_jobs/configs/cpu_long.yaml]

Four of the recipe's five mechanisms act in training (the fifth, the pairs pass, is one more VLM
call an image and costs the trainer nothing): implied relations (more stated rows), the gate's
negatives, sampled sigmoid rows and unlabelled families (terms of the objective). Each is switched off
in turn on the recipe; every variant's ``TrainRunner`` trains the same 16 annotated training images of
``--world`` at the recipe's base side (one scale rung, so every step does the same work), the variants
taking turns two steps at a time so the machine's load falls on all alike. Prints each variant's median
step time and its ratio to the whole recipe's: a mechanism costs time when the recipe is slower than the
variant without it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

RECIPE = Path(__file__).resolve().parents[1] / "train_jobs" / "configs" / "cpu_long.yaml"
VARIANTS = {"the recipe": [], "without implied relations": ["data.implied_relations=false"],
            "without the gate's negatives": ["loss.gate_negatives=0.0"],
            "annotated sigmoid rows": ["loss.sigmoid_rows=annotated"],
            "without unlabelled families": ["data.unlabelled_families=[]"]}


def main(argv=None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", required=True, type=Path, help="an annotated corpus (pipelines.annotate's out_dir)")
    ap.add_argument("--recipe", type=Path, default=RECIPE)
    ap.add_argument("--rounds", type=int, default=24, help="turns of two timed steps a variant")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    import torch

    from relate.config import load_config
    from relate.data.corpus import read_corpus
    from train_jobs.relation_config import TrainRelationConfig
    from train_jobs.relation_data import DecodeStage, build_space
    from train_jobs.relation_worker import TrainRunner

    torch.set_num_threads(args.threads)
    runners = {}
    for name, overrides in VARIANTS.items():
        cfg = load_config(TrainRelationConfig, args.recipe, [f"data.corpus_root={args.world}", "data.decode_cache=false",
                                                             "data.rungs=[1.0]", *overrides])
        space = build_space(cfg.data, cfg.model.text_dim)
        stage = DecodeStage(cfg.model.backbone.img_size, cfg.data, space["forms"], space["categories"],
                            seed=cfg.run.seed, sources=space["sources"], keep_aspect=cfg.model.backbone.keep_aspect)
        rows = read_corpus(args.world, "train").slice(0, cfg.optim.batch_size)
        batch = {k: torch.from_numpy(v) for k, v in stage(rows).items()}
        torch.manual_seed(cfg.run.seed)
        runner = TrainRunner(cfg, space, cfg.optim.max_steps)
        for _ in range(6):  # past the first steps' allocations
            runner.train_step(batch)
        runners[name] = (runner, batch)
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(args.rounds):
        for name, (runner, batch) in runners.items():
            for _ in range(2):
                t0 = time.perf_counter()
                runner.train_step(batch)
                times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["the recipe"])
    out = {}
    for name, ts in times.items():
        m = statistics.median(ts)
        out[name] = m / base
        print(f"{name:30s} {m * 1e3:7.1f} ms a step (median of {len(ts)})  {m / base:.3f} of the recipe's", flush=True)
    return out


if __name__ == "__main__":
    main()
