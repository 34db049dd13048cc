"""Checkpoints that each add one change to the one before, scored on the same images: what each change buys.

    python -m scripts.lever_ladder --world /tmp/w12k --split val \\
        --row "base=CKPT0,CKPT1,CKPT2" --row "+ implied relations=CKPT0,CKPT1,CKPT2" ... \\
        [--reference "truth=CKPT0,CKPT1,CKPT2"] [--name annotated_levers --command-file FILE]

A row is one change's checkpoints, one a seed (comma-separated, the same seeds in the same order in
every row: seed i of a row is paired with seed i of the row above). Every checkpoint is scored
against the synthetic world's full truth on every image of ``--split``
(``train_jobs.relation_eval.score_truth_split``); each row shows, per family, its AP (the mean over
its seeds) and after the first row the paired difference to the row above, with a 95% interval
over seeds and images together (the same seed and image draws for both rows:
``relate.metrics.truth_intervals.paired_gap_intervals``); with one seed a row the interval covers
the images only. A ``--reference`` row (the truth-trained arm) is shown last, with the last row's
gap to it. ``--name`` writes the table as ``docs/results/NAME.json``
(``kind: table``; ``python -m scripts.results_render --write`` renders it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _pair(text: str) -> tuple[str, list[str]]:
    label, sep, paths = text.rpartition("=")
    found = [p for p in paths.split(",") if p]
    if not sep or not label or not found or len(found) != len(paths.split(",")):
        raise argparse.ArgumentTypeError(f"expected LABEL=CHECKPOINT[,CHECKPOINT...], got {text!r}")
    return label, found


def ladder_rows(rows: list[tuple[str, list]], ladder: int, resamples: int = 1000) -> tuple[list[str], list[list[str]]]:
    """(figure names, table rows) of a ladder: ``rows`` is (label, one TruthKit a seed) in ladder order,
    its first ``ladder`` the ladder and a last one, if any, the reference. A row's cell is its figure's
    mean over seeds and, after the first, the paired difference to the row above (the reference: the
    last ladder row's difference to it) with its interval over seeds and images."""
    from relate.metrics.truth_intervals import paired_gap_intervals

    seeds = {len(kits) for _, kits in rows}
    if len(seeds) != 1:
        raise ValueError(f"every row needs the same number of seeds (checkpoints), got "
                         f"{ {label: len(kits) for label, kits in rows} }")
    figures = list(rows[0][1][0].figures())
    out = []
    for i, (label, kits) in enumerate(rows):
        per_seed = [k.figures() for k in kits]
        gaps = {}
        if i and i < ladder:
            gaps = paired_gap_intervals(rows[i - 1][1], kits, resamples)
        elif i >= ladder:  # the reference: the last ladder row's gap to it
            gaps = paired_gap_intervals(kits, rows[ladder - 1][1], resamples)
        cells = []
        for f in figures:
            g = gaps.get(f)
            mean = sum(p[f] for p in per_seed) / len(per_seed)
            cells.append(f"{mean:.3f}" + (f" ({g.mean:+.3f} [{g.low:+.3f}, {g.high:+.3f}])" if g is not None else ""))
        out.append([label] + cells)
    return figures, out


def main(argv=None) -> dict:
    from relate.api import load_model
    from train_jobs.relation_eval import score_truth_split

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", required=True, help="synthetic world folder whose truth scores every checkpoint")
    ap.add_argument("--split", default="val", help="split scored, all of its images (val: where choices are made)")
    ap.add_argument("--row", action="append", type=_pair, required=True, help="LABEL=CHECKPOINT[,CHECKPOINT...] (one a seed), in ladder order")
    ap.add_argument("--reference", type=_pair, default=None, help="LABEL=CHECKPOINT[,...] of the arm the last row is held to")
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--name", default=None, help="write docs/results/NAME.json")
    ap.add_argument("--title", default="Each change on its own: the annotated arm, validation")
    ap.add_argument("--command-file", type=Path, default=None, help="text file: the commands that trained the rows")
    args = ap.parse_args(argv)
    rows = list(args.row) + ([args.reference] if args.reference else [])
    seeds = {len(cks) for _, cks in rows}
    if len(seeds) != 1:  # before any checkpoint is scored
        ap.error(f"every row needs the same number of checkpoints (seeds): {[(label, len(c)) for label, c in rows]}")
    scored = []
    for label, cks in rows:
        kits = []
        for ck in cks:
            print(f"scoring {label}: {ck}", flush=True)
            kits.append(score_truth_split(load_model(ck), args.world, args.split)[1])
        scored.append((label, kits))
    figures, table_rows = ladder_rows(scored, len(args.row), args.resamples)
    names = [f.removeprefix("family/").removesuffix("_ap") for f in figures]
    n_seeds, n_images = seeds.pop(), scored[0][1][0].n_images
    doc = {"kind": "table", "title": args.title, "measured": datetime.date.today().isoformat(),
           "conditions": f"{args.split} split of {args.world}, all {n_images} images; {n_seeds} seed(s) a row, the "
                         "mean over them; in brackets the paired difference to the row above, 95% interval over "
                         + ("seeds and images" if n_seeds > 1 else "the images")
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
