"""Checkpoints that each add one change to the one before, scored on the same images: what each change buys.

    python -m scripts.lever_ladder --world /tmp/w12k --split val \\
        --row "base=CKPT" --row "+ implied relations=CKPT" ... [--reference "truth=CKPT"] \\
        [--name annotated_levers --command-file FILE]

Every checkpoint is scored against the synthetic world's full truth on every image of ``--split``
(``train_jobs.relation_eval.score_truth_split``); each row after the first shows, per family, its AP
and the paired difference to the row above, with a 95% interval over the images (the same image
draws for both: ``relate.metrics.truth_intervals.paired_gap_intervals``). One seed a row, so the
interval covers the images, not the seeds. A ``--reference`` row (the truth-trained arm) is shown
last, with the last row's gap to it. ``--name`` writes the table as ``docs/results/NAME.json``
(``kind: table``; ``python -m scripts.results_render --write`` renders it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _pair(text: str) -> tuple[str, str]:
    label, sep, path = text.rpartition("=")
    if not sep or not label or not path:
        raise argparse.ArgumentTypeError(f"expected LABEL=CHECKPOINT, got {text!r}")
    return label, path


def main(argv=None) -> dict:
    from relate.api import load_model
    from relate.metrics.truth_intervals import paired_gap_intervals
    from train_jobs.relation_eval import score_truth_split

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", required=True, help="synthetic world folder whose truth scores every checkpoint")
    ap.add_argument("--split", default="val", help="split scored, all of its images (val: where choices are made)")
    ap.add_argument("--row", action="append", type=_pair, required=True, help="LABEL=CHECKPOINT, in ladder order")
    ap.add_argument("--reference", type=_pair, default=None, help="LABEL=CHECKPOINT of the arm the last row is held to")
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--name", default=None, help="write docs/results/NAME.json")
    ap.add_argument("--title", default="Each change on its own: the annotated arm, one seed, validation")
    ap.add_argument("--command-file", type=Path, default=None, help="text file: the commands that trained the rows")
    args = ap.parse_args(argv)
    rows = list(args.row) + ([args.reference] if args.reference else [])
    kits = []
    for label, ck in rows:
        print(f"scoring {label}: {ck}", flush=True)
        kits.append(score_truth_split(load_model(ck), args.world, args.split)[1])
    figures = [k for k in kits[0].figures()]
    names = [f.removeprefix("family/").removesuffix("_ap") for f in figures]
    table_rows = []
    for i, ((label, _), kit) in enumerate(zip(rows, kits)):
        figs = kit.figures()
        prev = i - 1 if i < len(args.row) else len(args.row) - 1
        gaps = paired_gap_intervals([kits[prev]], [kit], args.resamples) if i else {}
        if args.reference and i == len(rows) - 1:  # the last ladder row's gap to the reference
            gaps = paired_gap_intervals([kit], [kits[len(args.row) - 1]], args.resamples)
        cells = []
        for f in figures:
            g = gaps.get(f)
            cells.append(f"{figs[f]:.3f}" + (f" ({g.mean:+.3f} [{g.low:+.3f}, {g.high:+.3f}])" if g is not None else ""))
        table_rows.append([label] + cells)
    doc = {"kind": "table", "title": args.title, "measured": datetime.date.today().isoformat(),
           "conditions": f"{args.split} split of {args.world}, all {kits[0].n_images} images; one seed a row; in "
                         "brackets the paired difference to the row above, 95% interval over the images"
                         + ("; the reference row's bracket is the last row's gap to it" if args.reference else ""),
           "columns": ["row"] + names, "align": ["---"] + ["---:"] * len(names), "rows": table_rows}
    if args.command_file:
        doc["command"] = args.command_file.read_text().strip().splitlines()
    md = "| " + " | ".join(doc["columns"]) + " |\n|" + "|".join(doc["align"]) + "|\n" + \
        "\n".join("| " + " | ".join(r) + " |" for r in table_rows)
    print(md, flush=True)
    if args.name:
        path = REPO / "docs" / "results" / f"{args.name}.json"
        path.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {path}; now: python -m scripts.results_render --write", flush=True)
    return doc


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
