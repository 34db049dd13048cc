"""Does the relation model learn what its data decides? The learnability check's figures.

Three arms of ``train_jobs.learnability`` on the same few scenes and their twins (recall within
count: the share of each image's true relations ranked among its |truth| best cells):

* ``memorise_recall``: the recipe as trained (goal 1.0);
* ``shuffled_boxes_recall``: boxes handed over in a fresh random order every step; the box
  families' figure (spatial, contact, containment, proximity) is ``shuffled_boxes_box_recall``;
* ``blank_pixels_recall``: blank images; the pixel families' figure (depth, appearance) is
  ``blank_pixels_pixel_recall``, and their direction accuracy (true concept above its inverse,
  chance 0.5) ``blank_pixels_depth_direction`` / ``blank_pixels_appearance_direction``.

Then a short run on more scenes, scored on scenes it never saw (their validation split), against
the world's rules: ``short_ap_<family>`` and ``short_top10_precision`` (relate.metrics.truth). The
same run trained on what those scenes state instead of their full truth (``coverage: stated``, the
positive-unlabeled corpus annotation gives) is the annotated arm: ``annotated_ap_<family>``, and
``annotated_gap_max``, the largest family gap of it under the truth-trained run (0 or less: no
family is learned worse from annotation). ``--quick`` runs fewer steps and scenes; every figure is
still measured.
"""

from __future__ import annotations

from benchmarks._common import run_benchmark

def measure(quick: bool) -> dict[str, float]:
    from relate.data.lexicon import BOX_FAMILIES, PIXEL_FAMILIES
    from train_jobs.learnability import LearnabilityConfig, main, pooled_recall

    steps = 300 if quick else 600
    figures: dict[str, float] = {}
    for control, key in (("none", "memorise"), ("shuffled_boxes", "shuffled_boxes"), ("blank_pixels", "blank_pixels")):
        res = main(LearnabilityConfig(control=control, steps=steps))
        figures[f"{key}_recall"] = round(res.count_recall, 4)
        figures[f"{key}_seconds"] = round(res.seconds, 1)
        for f, v in res.family_count_recall.items():
            if v == v:
                figures[f"{key}_{f}_recall"] = round(v, 4)
        for f, v in res.family_direction.items():
            figures[f"{key}_{f}_direction"] = round(v, 4)
        if control == "shuffled_boxes":
            figures["shuffled_boxes_box_recall"] = round(pooled_recall(res, BOX_FAMILIES), 4)
        if control == "blank_pixels":
            figures["blank_pixels_pixel_recall"] = round(pooled_recall(res, PIXEL_FAMILIES), 4)
    # both arms with the released recipe's mechanisms for annotation that states less than holds
    mechanisms = ["data.implied_relations=true", "loss.gate_negatives=1.0", "loss.sigmoid_rows=sampled"]
    runs = {coverage: main(LearnabilityConfig(scenes=96 if quick else 400, twins=False, coverage=coverage,
                                              eval_scenes=48 if quick else 200, steps=150 if quick else 1000,
                                              overrides=mechanisms))
            for coverage in ("full", "stated")}
    short, annotated = runs["full"], runs["stated"]
    for f, v in short.family_ap.items():
        if v == v:
            figures[f"short_ap_{f}"] = round(v, 4)
    figures["short_top10_precision"] = round(short.top10_precision, 4)
    figures["short_steps"] = short.steps
    figures["short_seconds"] = round(short.seconds, 1)
    gaps = {}
    for f, v in annotated.family_ap.items():
        if v == v:
            figures[f"annotated_ap_{f}"] = round(v, 4)
            if short.family_ap.get(f, float("nan")) == short.family_ap.get(f):
                gaps[f] = short.family_ap[f] - v
    figures["annotated_top10_precision"] = round(annotated.top10_precision, 4)
    figures["annotated_gap_max"] = round(max(gaps.values()), 4)
    return figures


if __name__ == "__main__":
    run_benchmark("learnability", measure)
