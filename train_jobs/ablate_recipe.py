"""What the positive-unlabeled discount (Eq. 3) and source-aware negatives (App. B.1) buy.

Trains the same recipe four ways (discount on/off x source masks on/off), each over several
seeds, on one corpus, and tabulates the test split's synonym-tolerant mR@50 and per-family
recall@50 of each arm: mean over seeds with a Student-t 95% interval, and each arm's difference
to the full recipe. Meant for a corpus where both terms can act, the positive-unlabeled world:

    python -m pipelines.synthetic --config pipelines/configs/synthetic_pu.yaml --set out_dir=/tmp/pu
    python -m train_jobs.ablate_recipe --corpus-root /tmp/pu --world pipelines/configs/synthetic_pu.yaml \\
        --seeds 0 1 2 --out runs/ablate_recipe

``--world`` reads the sources' scopes from the world config (``data.source_scopes``); further
``--set key=value`` pairs go to every training run (e.g. ``--set optim.max_steps=200``). Each run
is a normal ``train_jobs.train_relation`` run under ``<out>/train``; ``ablation.json`` and
``ablation.md`` are written to ``<out>``. Each finished run's test figures are kept in
``<out>/runs/<arm>-seed<seed>.json`` with the settings that produced them and the checkpoint, so an
interrupted ablation, or one given more seeds, trains only what is missing; a run whose settings
differ is trained again. A kept run whose figures lack one the table needs (a report that grew
since) is scored again from its checkpoint, accepted only when that reproduces every kept figure.

Two tables: graph-constrained recall (one predicate per pair) and recall without the constraint
(``syn_nogc``), where a pair's further true predicates, the ones the discount stops pushing down,
can count.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Callable, Sequence

ARMS = {"full": (True, True), "no_discount": (False, True), "no_masks": (True, False), "neither": (False, False)}
CONFIG = Path(__file__).resolve().parent / "configs" / "cpu_small.yaml"
NEEDED = ("model/syn/mR@50", "model/syn_nogc/mR@50")  # a kept run without these is scored again


def mean_interval(values: Sequence[float], within: tuple[float, float] | None = None) -> tuple[float, float, float]:
    """Mean and the two ends of its Student-t 95% interval over seeds (one value: no interval).
    ``within``: the figure's own range (an AP lies in [0, 1], a difference of two in [-1, 1]); the
    interval's ends are kept inside it, as the true value is (with three seeds near 1.0 the t interval
    runs past it)."""
    from scipy import stats

    n = len(values)
    m = sum(values) / n
    if n < 2:
        return m, float("nan"), float("nan")
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))
    h = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    if within is None:
        return m, m - h, m + h
    return m, max(m - h, within[0]), min(m + h, within[1])


def format_cell(c: dict | None, delta: str) -> str:
    """A table cell: mean [95% interval] (no interval from one value) and the paired difference
    ``c[delta]`` in parentheses when there is one; "-" for no value."""
    if c is None:
        return "-"
    txt = f"{c['mean']:.3f} [{c['lo']:.3f}, {c['hi']:.3f}]" if not math.isnan(c["lo"]) else f"{c['mean']:.3f}"
    return txt + (f" ({c[delta]:+.3f})" if delta in c else "")


def tabulate(runs: dict[str, dict[int, dict[str, float]]], keys: Sequence[str]) -> tuple[dict, str]:
    """``runs[arm][seed]`` = test figures -> per-arm summary and a Markdown table (arms x keys)."""
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for arm, by_seed in runs.items():
        summary[arm] = {}
        for k in keys:
            vals = [fig[k] for fig in by_seed.values() if k in fig]
            if vals:
                m, lo, hi = mean_interval(vals)
                summary[arm][k] = {"mean": m, "lo": lo, "hi": hi, "n": len(vals)}
        full = runs.get("full", {})
        for k in keys:  # paired over seeds: the same seed's full-recipe run is the reference
            diffs = [fig[k] - full[s][k] for s, fig in by_seed.items() if s in full and k in fig and k in full[s]]
            if arm != "full" and diffs:
                m, lo, hi = mean_interval(diffs)
                summary[arm][k].update({"diff": m, "diff_lo": lo, "diff_hi": hi})
    lines = ["| arm | " + " | ".join(k.split("/", 2)[-1] for k in keys) + " |", "|---|" + "---:|" * len(keys)]
    for arm in runs:
        cells = []
        for k in keys:
            cells.append(format_cell(summary[arm].get(k), "diff"))
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return summary, "\n".join(lines) + "\n"


def shared_pair_shares(relations: Sequence[Sequence[dict]], family: Callable[[str], str]) -> dict[str, tuple[int, int]]:
    """Family -> (relations, those whose pair carries another stated predicate), over images'
    relation lists: where a pair's further true predicates, and so the discount, can count."""
    out: dict[str, list[int]] = {}
    for rels in relations:
        per_pair: dict[tuple[int, int], set[str]] = {}
        for r in rels:
            per_pair.setdefault((r["subject"], r["object"]), set()).add(r["predicate"])
        for r in rels:
            c = out.setdefault(family(r["predicate"]), [0, 0])
            c[0] += 1
            c[1] += len(per_pair[(r["subject"], r["object"])]) > 1
    return {f: (n, k) for f, (n, k) in sorted(out.items())}


def run_settings(overrides: Sequence[str]) -> list[str]:
    """The overrides that decide a run's figures (where it is stored and its name do not)."""
    return sorted(o for o in overrides if not o.startswith(("run.storage_path=", "run.name=")))


def load_saved(path: Path, settings: Sequence[str]) -> dict | None:
    """A finished run's file (settings, test figures, checkpoint), if it is for exactly these settings."""
    if not path.is_file():
        return None
    saved = json.loads(path.read_text())
    return saved if saved.get("settings") == list(settings) else None


def rescore(saved: dict, candidates: Sequence[str], score: Callable[[str], dict[str, float]],
            tol: float = 1e-9) -> tuple[dict[str, float], str] | None:
    """A kept run's figures scored again from its checkpoint: the first of ``candidates`` whose
    figures reproduce every kept one (within ``tol``), with that checkpoint; None when none does."""
    for ckpt in dict.fromkeys(candidates):
        if not Path(ckpt).is_dir():
            continue
        new = score(ckpt)
        off = [k for k, v in saved["test"].items() if k not in new or abs(new[k] - v) > tol]
        if not off:
            return {**saved["test"], **new}, ckpt
        print(f"[ablate] {ckpt}: does not reproduce the kept figures ({len(off)} differ, e.g. {off[0]})", flush=True)
    return None


def checkpoint_candidates(saved: dict, train_root: Path, run: str) -> list[str]:
    """The run's recorded checkpoint, then every checkpoint in ``<train_root>/<run>`` and
    ``<train_root>/<run>-<time>-<hex>`` (``run.unique_name``), newest first."""
    found = sorted((c for c in train_root.glob(f"{run}*/checkpoint_*")
                    if c.parent.name == run or c.parent.name.startswith(f"{run}-")), key=lambda p: p.name, reverse=True)
    return [c for c in [saved.get("checkpoint"), *map(str, found)] if c]


def _write_json(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    tmp.replace(path)  # atomic: a crash never leaves a half-written result


def main(argv: Sequence[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus-root", required=True)
    ap.add_argument("--world", default=None, help="synthetic world YAML whose sources give data.source_scopes")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--config", default=str(CONFIG))
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="key=value for every run")
    ap.add_argument("--out", default="runs/ablate_recipe")
    args = ap.parse_args(argv)

    from relate.api import load_model
    from relate.config import load_config
    from relate.data.corpus import read_corpus
    from relate.data.synthetic import SyntheticConfig
    from relate.data.synthetic_annotation import source_scopes
    from train_jobs.relation_data import concept_family
    from train_jobs.relation_eval import report_test
    from train_jobs.train_relation import TrainRelationConfig
    from train_jobs.train_relation import main as train

    out = Path(args.out).resolve()
    scopes = []
    if args.world:
        world = SyntheticConfig.model_validate(_world_fields(args.world))
        scopes = [f"data.source_scopes.{k}=[{', '.join(v)}]" for k, v in source_scopes(world.sources).items()]
    runs: dict[str, dict[int, dict[str, float]]] = {}
    for arm in args.arms:
        discount, masks = ARMS[arm]
        for seed in args.seeds:
            over = [f"data.corpus_root={Path(args.corpus_root).resolve()}", f"run.storage_path={out / 'train'}",
                    f"run.name={arm}-seed{seed}", f"run.seed={seed}", f"loss.pu_discount={str(discount).lower()}",
                    f"loss.source_negatives={str(masks).lower()}", "run.calibrate=false", *scopes, *args.overrides]
            done_file = out / "runs" / f"{arm}-seed{seed}.json"
            settings = run_settings([f"config={Path(args.config).resolve()}", *over])
            cfg = load_config(TrainRelationConfig, args.config, over)
            saved, test = load_saved(done_file, settings), None
            if saved is not None and all(k in saved["test"] for k in NEEDED):
                print(f"[ablate] {arm} seed {seed}: finished earlier ({done_file})", flush=True)
                test = saved["test"]
            elif saved is not None:
                print(f"[ablate] {arm} seed {seed}: finished earlier, scoring its checkpoint again", flush=True)
                got = rescore(saved, checkpoint_candidates(saved, out / "train", f"{arm}-seed{seed}"),
                              lambda c: {k: float(v) for k, v in report_test(load_model(c), cfg.data).items()})
                if got is not None:
                    test = got[0]
                    _write_json(done_file, {"settings": settings, "test": test, "checkpoint": got[1]})
            if test is None:
                print(f"[ablate] {arm} seed {seed}", flush=True)
                res = train(cfg)
                test = {k: float(v) for k, v in res.test.items()}
                _write_json(done_file, {"settings": settings, "test": test, "checkpoint": res.checkpoint})
            runs.setdefault(arm, {})[seed] = test
    summary, tables = {}, []
    for title, tag in (("graph-constrained", "syn"), ("without the graph constraint", "syn_nogc")):
        families = sorted({k for by in runs.values() for fig in by.values() for k in fig
                           if k.startswith(f"model/{tag}/family/")})
        part, table = tabulate(runs, [f"model/{tag}/mR@50", f"model/{tag}/R@50", *families])
        for arm, cells in part.items():
            summary.setdefault(arm, {}).update(cells)
        tables.append(f"Test split, synonym-tolerant recall@50, {title}\n\n{table}")
    test_relations = read_corpus(Path(args.corpus_root).resolve(), "test").column("relations").to_pylist()
    mode = cfg.data.predicates  # every run's: --set applies to all
    shares = shared_pair_shares(test_relations, lambda p: concept_family(p, mode))
    tables.append("Test relations per family, and how many share their pair with another stated predicate\n\n"
                  + "\n".join(f"- {f}: {k} of {n} ({k / n:.0%})" for f, (n, k) in shares.items()) + "\n")
    out.mkdir(parents=True, exist_ok=True)
    (out / "ablation.json").write_text(json.dumps({"runs": {a: {str(s): f for s, f in by.items()}
                                                            for a, by in runs.items()}, "summary": summary,
                                                   "shared_pair": {f: {"relations": n, "shared": k}
                                                                   for f, (n, k) in shares.items()}}, indent=1))
    (out / "ablation.md").write_text("\n".join(tables))
    print("\n".join(tables), flush=True)
    return summary


def _world_fields(path: str) -> dict:
    """The world config's SyntheticConfig fields (the pipeline's own keys, such as out_dir, dropped)."""
    import yaml

    from relate.data.synthetic import SyntheticConfig

    tree = yaml.safe_load(Path(path).read_text()) or {}
    return {k: v for k, v in tree.items() if k in SyntheticConfig.model_fields}


if __name__ == "__main__":
    main()
