"""Scoring a split for the relation train job: recall on ground-truth boxes and pixel-only accuracy.

Goes through ``relate.api.RelationPredictor`` and ``relate.metrics``, as the evaluator does.
Recall is reported exact-string and synonym-tolerant, graph-constrained, and synonym-tolerant
without the constraint (``syn_nogc``). ``python -m train_jobs.relation_eval CHECKPOINT
CORPUS_ROOT`` prints the test-split report of one checkpoint folder, as training prints it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from train_jobs.relation_data import DataConfig, _predicate_tables, concept_family, concept_key

__all__ = ["evaluate_split", "baseline_metrics", "report_test", "truth_root", "truth_report", "truth_cells",
           "score_truth_split", "truth_intervals", "format_report", "summary_lines"]


def _recalls(gt, preds, mode: str, tag: str) -> dict[str, float]:
    """Recall on GT boxes, with per-family mR@50: exact-string and synonym-tolerant, graph-constrained
    (one predicate per pair), and synonym-tolerant without the constraint (``syn_nogc``), where a
    pair's further true predicates can count. Unconstrained, each concept enters a pair's ranking
    once, at its best-scoring form, so a concept's synonyms do not take its pair's other slots."""
    from relate.metrics.recall import evaluate_recall

    pk = np.array([concept_key(str(s), mode) for s in preds.vocab], dtype=object)
    gk = np.array([concept_key(str(s), mode) for s in gt.predicates], dtype=object)
    by_concept = _best_form_per_concept(preds, pk)
    out: dict[str, float] = {}
    for name, p, match, constrained in (("exact", preds, None, True), ("syn", preds, pk[:, None] == gk[None, :], True),
                                        ("syn_nogc", by_concept, by_concept.vocab[:, None] == gk[None, :], False)):
        res = evaluate_recall(gt, p, ks=(20, 50, 100), predicate_match=match, graph_constrained=constrained)
        for key in ("R@20", "R@50", "R@100", "mR@20", "mR@50", "mR@100"):
            out[f"{tag}{name}/{key}"] = res.metrics[key]
        fam: dict[str, list[float]] = {}
        for pred, r in res.per_predicate[50].items():
            fam.setdefault(concept_family(pred, mode), []).append(r)
        out.update({f"{tag}{name}/family/{f}@50": float(np.mean(v)) for f, v in sorted(fam.items())})
    return out


def _best_form_per_concept(preds, keys: np.ndarray):
    """``preds`` with one triplet per (image, subject, object, concept): the best score among the
    concept's forms; the vocabulary becomes the concept keys."""
    from dataclasses import replace

    concepts, code = np.unique(keys.astype(str), return_inverse=True)
    key = np.stack([preds.image, preds.subject, preds.object, code[preds.predicate]], axis=1)
    rows, group = np.unique(key, axis=0, return_inverse=True)
    best = np.full(len(rows), -np.inf)
    np.maximum.at(best, group.ravel(), preds.score)
    return replace(preds, image=rows[:, 0], subject=rows[:, 1], object=rows[:, 2], predicate=rows[:, 3],
                   score=best, vocab=concepts.astype(object), offsets=None)


def _pixel_accuracy(gt, scores, strings, mode: str) -> dict[str, float]:
    """Pixel-only families (depth, appearance): does the true concept outscore its inverse on the
    annotated pair? Chance is 0.5 and a boxes-only model cannot do better (the synthetic world
    draws occlusion order and colour independently of geometry)."""
    if mode != "synthetic_lexicon":
        return {}
    from relate.data.lexicon import CONCEPTS, PIXEL_FAMILIES

    keys = np.array([concept_key(s, mode) for s in strings], dtype=object)
    hits: dict[str, list[float]] = {f: [] for f in PIXEL_FAMILIES}
    for img, s, o, p in zip(gt.rel_image, gt.rel_subject, gt.rel_object, gt.rel_predicate):
        c = CONCEPTS.get(concept_key(str(gt.predicates[p]), mode))
        if c is None or c.family not in PIXEL_FAMILIES or c.inverse is None:
            continue
        sc = scores[img]
        row = np.flatnonzero((sc.pairs[:, 0] == s) & (sc.pairs[:, 1] == o))
        own, inv = keys == c.name, keys == c.inverse
        if row.size == 0 or not own.any() or not inv.any():
            continue
        logits = sc.l_pred[row[0]]
        hits[c.family].append(float(logits[own].max() > logits[inv].max()))
    return {f"pixel/{f}_acc": float(np.mean(v)) for f, v in hits.items() if v} | \
        {f"pixel/{f}_n": float(len(v)) for f, v in hits.items()}


def truth_cells(predictor, scores, strings, truth, mode: str) -> tuple[list, list[str]]:
    """(per-image ``relate.metrics.truth.ImageCells``, the world's concepts): ``truth`` holds each
    image's (triples, count of the world's boxes). Each concept's score on a pair is its best form's
    Eq. 6 logit (the score's order, unsaturated); pairs with a box beyond the world's own (appended
    by a pipeline) are left out."""
    from relate.data.lexicon import CONCEPTS
    from relate.metrics.truth import ImageCells
    from relate.model.score import relation_logit

    concepts = list(CONCEPTS)
    col = {c: j for j, c in enumerate(concepts)}
    form_col = np.array([col.get(concept_key(s, mode), -1) for s in strings])
    w = predictor.model.cfg.pair_weight
    cells = []
    for sc, (t, n_world) in zip(scores, truth):
        inside = (sc.pairs < n_world).all(axis=1)
        logit = relation_logit(sc.l_pred[inside], sc.l_pair[inside], w)
        per = np.full((int(inside.sum()), len(concepts)), -np.inf)
        for j in range(len(concepts)):
            cols = form_col == j
            if cols.any():
                per[:, j] = logit[:, cols].max(axis=1)
        cells.append(ImageCells(sc.pairs[inside], per, n_world, t))
    return cells, concepts


def truth_report(predictor, scores, strings, truth, mode: str, k: int = 10):
    """``relate.metrics.truth.score_against_truth`` over scored images (:func:`truth_cells`)."""
    from relate.data.lexicon import CONCEPTS
    from relate.metrics.truth import score_against_truth

    cells, concepts = truth_cells(predictor, scores, strings, truth, mode)
    return score_against_truth(cells, concepts, {c: CONCEPTS[c].family for c in concepts}, k=k,
                               inverse_of={c: CONCEPTS[c].inverse for c in concepts})


def score_truth_split(predictor, truth_root: str, split: str, limit: int | None = None):
    """Every image of ``split`` of a synthetic world (the first ``limit`` only for a curve's quick
    look) scored against its full truth: (the per-family figures, and the seed's
    ``relate.metrics.truth_intervals.TruthKit`` for intervals over seeds and images)."""
    from relate.data.corpus import read_corpus
    from relate.data.lexicon import CONCEPTS
    from relate.data.world_truth import world_truth
    from relate.metrics.truth import score_against_truth
    from relate.metrics.truth_intervals import truth_kit

    table = read_corpus(truth_root, split)
    if limit is not None:
        table = table.slice(0, limit)
    scores = predictor.score_images(table.column("uri").to_pylist(), table.column("boxes").to_pylist())
    truth = world_truth(truth_root, table.column("image_id").to_pylist(), table.column("boxes").to_pylist())
    cells, concepts = truth_cells(predictor, scores, list(predictor.vocabulary_strings(None)), truth,
                                  "synthetic_lexicon")
    family_of = {c: CONCEPTS[c].family for c in concepts}
    report = score_against_truth(cells, concepts, family_of, inverse_of={c: CONCEPTS[c].inverse for c in concepts})
    return report.flat("truth/"), truth_kit(cells, concepts, family_of)


def _truth_figures(predictor, table, scores, strings, cfg: DataConfig, tag: str) -> dict[str, float]:
    """Per-family AP, top-10 precision and recall within count against the world's full truth."""
    from relate.data.world_truth import world_truth

    root = truth_root(cfg)
    if root is None:
        return {}
    truth = world_truth(root, table.column("image_id").to_pylist(), table.column("boxes").to_pylist())
    return truth_report(predictor, scores, strings, truth, cfg.predicates).flat(f"{tag}truth/")


def truth_root(cfg: DataConfig) -> str | None:
    """The synthetic world folder whose rules give the full truth: ``data.truth_root``, or the corpus
    root itself when it holds a world config (``pipelines.synthetic`` output); None otherwise."""
    from relate.data.world_truth import WORLD_CONFIG

    if cfg.predicates != "synthetic_lexicon":
        return None
    if cfg.truth_root is not None:
        return cfg.truth_root
    return cfg.corpus_root if (Path(cfg.corpus_root) / WORLD_CONFIG).is_file() else None


def evaluate_split(predictor, cfg: DataConfig, split: str, limit: int | None = None,
                   vocabulary=None, tag: str = "") -> dict[str, float]:
    """Score a split with the predictor (GT boxes): recall, pixel-only accuracy and, where the corpus
    comes from the synthetic world, AP and top-10 precision against its full truth."""
    from relate.data.corpus import read_corpus
    from relate.metrics._tables import load_ground_truth, load_predictions

    table = read_corpus(cfg.corpus_root, split)
    if limit is not None:
        table = table.slice(0, limit)
    gt = load_ground_truth(table)
    scores = predictor.score_images(table.column("uri").to_pylist(), table.column("boxes").to_pylist(), vocabulary)
    preds = load_predictions(predictor.scores_to_table(table.column("image_id").to_pylist(), scores, vocabulary), gt)
    strings = list(predictor.vocabulary_strings(vocabulary))
    out = _recalls(gt, preds, cfg.predicates, tag)
    out.update({f"{tag}{k}": v for k, v in _pixel_accuracy(gt, scores, strings, cfg.predicates).items()})
    out.update(_truth_figures(predictor, table, scores, strings, cfg, tag))
    return out


def baseline_metrics(cfg: DataConfig, split: str = "test") -> dict[str, float]:
    """The frequency baseline (true categories, most frequent training predicates per category pair)."""
    from relate.data.corpus import read_corpus
    from relate.metrics._tables import load_ground_truth, load_predictions
    from relate.metrics.baseline import fit_frequency_baseline

    table = read_corpus(cfg.corpus_root, split)
    gt = load_ground_truth(table)
    base = fit_frequency_baseline(read_corpus(cfg.corpus_root, "train"), k=3)
    preds = load_predictions(base.predict(gt, pairs="all"), gt)
    return _recalls(gt, preds, cfg.predicates, "baseline/")


def report_test(predictor, cfg: DataConfig, verbose: bool = False) -> dict[str, float]:
    """Test split: model with every known form, the frequency baseline, and the vocabulary swap to
    held-out synonyms only (never in the training bank), scored by the synonym-tolerant matcher.
    Prints a per-family summary (every figure with ``verbose``); ``format_report`` gives them all."""
    held = _predicate_tables(cfg, None)[2] if cfg.predicates == "synthetic_lexicon" else None
    forms = _all_forms(cfg)
    out = evaluate_split(predictor, cfg, "test", vocabulary=forms, tag="model/")
    out.update(baseline_metrics(cfg, "test"))
    if held is not None and any(held):
        unseen = [f for f, h in zip(forms, held) if h]
        out.update(evaluate_split(predictor, cfg, "test", vocabulary=unseen, tag="swap/"))
    print(format_report(out) if verbose else summary_lines(out), flush=True)
    return out


def format_report(figures: dict[str, float]) -> str:
    """Every figure of a test report, one per line."""
    lines = [f"{k:45s} {v:.4f}" for k, v in sorted(figures.items())]
    return ("test split, GT boxes (syn_nogc: without the graph constraint; truth: against every relation that "
            "holds; the rest graph-constrained)\n" + "\n".join(lines))


def summary_lines(figures: dict[str, float]) -> str:
    """A short test report: per family, recall@50 of the stated relations (no graph constraint; the
    frequency baseline beside it) and, where the world's truth is known, AP against it."""
    fams = sorted({k.split("/")[-1][:-3] for k in figures if k.startswith("model/syn_nogc/family/")})
    truth = any(k.startswith("model/truth/") for k in figures)
    head = f"{'family':12s} {'recall@50':>9s} {'baseline':>8s}" + (f" {'AP vs truth':>11s}" if truth else "")
    lines = ["test split, GT boxes: recall of the stated relations without the graph constraint" +
             (", and AP against every relation that holds (the world's rules)" if truth else ""), head]
    for f in fams:
        row = f"{f:12s} {figures.get(f'model/syn_nogc/family/{f}@50', float('nan')):9.3f} " \
              f"{figures.get(f'baseline/syn_nogc/family/{f}@50', float('nan')):8.3f}"
        if truth:
            row += f" {figures.get(f'model/truth/family/{f}_ap', float('nan')):11.3f}"
        lines.append(row)
    tail = f"mR@50 {figures.get('model/syn_nogc/mR@50', float('nan')):.3f} (baseline " \
           f"{figures.get('baseline/syn_nogc/mR@50', float('nan')):.3f}; graph-constrained " \
           f"{figures.get('model/syn/mR@50', float('nan')):.3f})"
    if truth:
        tail += f"; top-10 precision vs truth {figures.get('model/truth/top10_precision', float('nan')):.3f}"
    return "\n".join(lines + [tail])


def _all_forms(cfg: DataConfig) -> list[str]:
    if cfg.predicates == "synthetic_lexicon":
        from relate.data.lexicon import all_surface_forms

        return all_surface_forms()
    from relate.data.corpus import read_corpus

    train = read_corpus(cfg.corpus_root, "train")
    return sorted({r["predicate"] for rels in train.column("relations").to_pylist() for r in rels})


def truth_intervals(checkpoints, world: str, split: str = "test", resamples: int = 1000,
                    converse: bool | None = None) -> tuple[dict, str]:
    """Several seeds' checkpoints scored on every image of a world's ``split`` against its full truth:
    per figure the mean over seeds and its 95% interval over seeds and images
    (``relate.metrics.truth_intervals``); (figures, a Markdown table)."""
    from relate.api import load_model
    from relate.metrics.truth_intervals import seed_image_intervals

    kits = [score_truth_split(load_model(c, converse=converse), world, split)[1] for c in checkpoints]
    ivs = seed_image_intervals(kits, resamples)
    lines = [f"{split} split of {world}: all {kits[0].n_images} images, {len(kits)} checkpoint(s); mean over them "
             f"[95% interval over checkpoints and images, {resamples} replicates]", "",
             "| figure | mean [interval] | each checkpoint |", "|---|---:|---|"]
    for k, v in ivs.items():
        lines.append(f"| {k.replace('family/', '').removesuffix('_ap')} | {v.mean:.3f} [{v.low:.3f}, {v.high:.3f}] | "
                     + ", ".join(f"{x:.3f}" for x in v.per_seed) + " |")
    return {k: v.as_dict() for k, v in ivs.items()}, "\n".join(lines) + "\n"


def _cli(argv=None) -> dict:
    """``python -m train_jobs.relation_eval CHECKPOINT [CHECKPOINT ...] CORPUS_ROOT``: the test-split
    report of one checkpoint folder (model, frequency baseline, vocabulary swap), as printed after
    training; against a synthetic world, the truth figures of every checkpoint given (the seeds of
    one recipe) with intervals over seeds and images, on every image of ``--split``."""
    import argparse
    import json
    import typing

    from relate.api import load_model

    ap = argparse.ArgumentParser(description=_cli.__doc__)
    ap.add_argument("checkpoint", nargs="+", help="checkpoint folder(s): the seeds of one recipe")
    ap.add_argument("corpus_root")
    modes = typing.get_args(DataConfig.model_fields["predicates"].annotation)
    ap.add_argument("--predicates", default=modes[0], choices=modes,
                    help="where synonym groups come from: the training run's data.predicates (a checkpoint does "
                         "not record it)")
    ap.add_argument("--truth", default=None, metavar="WORLD_ROOT",
                    help="synthetic world folder whose rules give the full truth (default: CORPUS_ROOT when it is one); "
                         "adds per-family AP and top-10 precision against it")
    ap.add_argument("--split", default="test", help="split of the world the truth figures' intervals are scored on "
                    "(all of its images; default test, the split figures are reported on; val for choices)")
    ap.add_argument("--resamples", type=int, default=1000, help="bootstrap replicates of the intervals")
    ap.add_argument("--converse", default=None, choices=["on", "off"],
                    help="average each predicate logit with its converse statement's (relate.converse); default: "
                         "the checkpoint's model.converse_scoring")
    ap.add_argument("--out", default=None, help="also write the figures as JSON")
    args = ap.parse_args(argv)
    from relate.data.corpus import require_corpus
    from relate.job_inputs import MAKE_CORPUS, MAKE_WORLD, one_line_errors, require_checkpoint

    one_line_errors("relation_eval")
    for c in args.checkpoint:  # every input is checked before any model loads
        require_checkpoint(c)
    require_corpus(args.corpus_root, "corpus", MAKE_CORPUS)
    if args.truth is not None:
        require_corpus(args.truth, "synthetic world (--truth)", MAKE_WORLD)
    converse = None if args.converse is None else args.converse == "on"
    data = DataConfig(corpus_root=args.corpus_root, predicates=args.predicates, truth_root=args.truth)
    out: dict = {}
    if len(args.checkpoint) == 1:
        out = report_test(load_model(args.checkpoint[0], converse=converse), data, verbose=True)
    world = truth_root(data)
    if world is not None:
        out["intervals"], table = truth_intervals(args.checkpoint, world, args.split, args.resamples, converse)
        print(table, flush=True)
    elif len(args.checkpoint) > 1:
        ap.error("several checkpoints are compared on a synthetic world's truth: give --truth WORLD_ROOT")
    if args.out:
        from pathlib import Path

        Path(args.out).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    _cli()
