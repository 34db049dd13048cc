"""Write a learning-curve run's report into a docs result file, so the docs' tables come from the run.

    python -m scripts.learning_results RUN_DIR --name learning_cpu_long_500 [--commit C] [--conditions TEXT]
    python -m scripts.results_render --write      # then re-render the docs' blocks

``RUN_DIR`` is a ``train_jobs.learning_curve`` output folder whose job reported (``report_split``):
its ``curves.json`` (the report: per source and figure the mean over seeds, the interval over seeds
and test images, each seed's value, the paired gap to the first source; and each source's share of
the truth stated), ``learning_curve_config.yaml`` and ``curves.parquet`` (each run's wall time).
The result file ``docs/results/NAME.json`` (``kind: learning``, ``scripts/results_render.py``) keeps
what a person wrote there, each family's ``bar`` and ``note`` and each source's ``label`` and
``corpus``; every figure in it is replaced by the run's.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_FIGURE_OF = {"top-10 precision": "top10_precision"}


def _figure(family: str) -> str:
    return _FIGURE_OF.get(family, f"family/{family}_ap")


def build(run_dir: Path, old: dict, commit: str | None, conditions: str | None, command: dict | None) -> dict:
    """The result document for ``run_dir``'s report, keeping ``old``'s bars, notes and labels."""
    import pyarrow.parquet as pq

    from relate.config import read_yaml

    summary = json.loads((run_dir / "curves.json").read_text())
    if "report" not in summary:
        raise SystemExit(f"{run_dir}/curves.json has no report: run train_jobs.learning_curve with report_split set")
    rep, coverage = summary["report"], summary.get("coverage", {})
    cfg = read_yaml((run_dir / "learning_curve_config.yaml").read_text())
    rows_t = pq.read_table(run_dir / "curves.parquet").to_pylist()
    final: dict[tuple, float] = {}
    for r in rows_t:
        if r["step"] == cfg["steps"]:
            final[(r["source"], r["seed"])] = r["seconds"]
    minutes = [v / 60 for v in final.values()]
    old_sources = {s["name"]: s for s in old.get("sources", [])}
    names = list(rep["sources"])
    sources = []
    for i, name in enumerate(names):
        s = {k: v for k, v in old_sources.get(name, {}).items() if k in ("label", "corpus", "bar")}
        s.update({"name": name, "seeds": rep["seeds"][name]})
        s.setdefault("label", name)
        if i == 0:
            s.setdefault("bar", True)
        else:
            s["gap_to"] = names[0]
        sources.append(s)
    old_rows = {r["family"]: r for r in old.get("rows", [])}
    families = [k.removeprefix("family/").removesuffix("_ap") for k in rep["sources"][names[0]] if k.startswith("family/")]
    rows = []
    for fam in families + ["top-10 precision"]:
        key = _figure(fam)
        row = {k: v for k, v in old_rows.get(fam, {}).items() if k in ("bar", "note")}
        row["family"] = fam
        for name in names:
            c = rep["sources"][name].get(key)
            if c is None:
                continue
            cell = {"mean": round(c["mean"], 4), "lo": round(c["lo"], 4), "hi": round(c["hi"], 4),
                    "per_seed": [round(x, 4) for x in c["per_seed"]]}
            for g in ("gap", "gap_lo", "gap_hi"):
                if g in c:
                    cell[g] = round(c[g], 4)
            stated = coverage.get(name, {}).get(fam, {}).get("covered")
            if stated is not None:
                cell["stated"] = round(stated, 4)
            row[name] = cell
        rows.append({"family": row.pop("family"), **row})
    doc = {"kind": "learning", "title": old.get("title", "What the model learns against the world's rules"),
           "measured": datetime.date.today().isoformat()}
    if commit:
        doc["commit"] = commit
    if conditions:
        doc["conditions"] = conditions
    doc["run"] = {"recipe": Path(cfg["recipe"]).as_posix().split("/train_jobs/")[-1] if "/train_jobs/" in cfg["recipe"]
                  else cfg["recipe"], "steps": cfg["steps"], "scenes": old.get("run", {}).get("scenes"),
                  "eval_images": rep["images"], "eval_split": rep["split"],
                  "minutes_per_seed": [round(min(minutes), 1), round(max(minutes), 1)] if minutes else None}
    if doc["run"]["recipe"].startswith("configs/"):
        doc["run"]["recipe"] = "train_jobs/" + doc["run"]["recipe"]
    doc["metric"] = ("average precision per family over every (ordered pair, concept) cell of the images; top-10 "
                     "precision per image")
    doc["interval"] = (f"95% percentile bootstrap over seeds and {rep['split']} images together "
                       f"({rep['resamples']} replicates; relate.metrics.truth_intervals); gaps paired by seed and image")
    doc["sources"] = sources
    doc["rows"] = rows
    doc["command"] = command if command is not None else old.get("command", "")
    return doc


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--name", required=True, help="docs/results/NAME.json to write")
    ap.add_argument("--commit", default=None)
    ap.add_argument("--conditions", default=None, help="the machine and its load while the runs trained")
    ap.add_argument("--command-file", type=Path, default=None,
                    help="JSON mapping of labelled command lines (default: keep the file's)")
    args = ap.parse_args(argv)
    if not (args.run_dir / "curves.json").is_file():
        ap.error(f"{args.run_dir}/curves.json not found: run train_jobs.learning_curve first")
    path = REPO / "docs" / "results" / f"{args.name}.json"
    old = json.loads(path.read_text()) if path.is_file() else {}
    command = json.loads(args.command_file.read_text()) if args.command_file else None
    path.write_text(json.dumps(build(args.run_dir, old, args.commit, args.conditions, command), indent=1) + "\n")
    print(f"wrote {path}; now: python -m scripts.results_render --write", flush=True)
    return path


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
