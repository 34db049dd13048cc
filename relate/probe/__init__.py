"""The triplet relatedness probe (seed 000): cosine readout and its ablations (other metrics, a
learned linear probe, a class-name text baseline), per-axis accuracy, gaps, bootstrap
intervals, paired tests and report writers. Ray-free; eval_jobs.triplet_probe drives it.
Manifests are read by relate.data.poporo."""

from relate.probe.metrics import (
    DISTRACTOR_TYPES, RELATION_TYPES, AxisScores, accuracy_matrix, check_axis_labels,
    cosine_correct, score_triplets,
)
from relate.probe.linear_probe import LinearProbeResult, cross_validated_probe, pair_difference_features
from relate.probe.readouts import SIMILARITIES, pair_similarity, readout_correct
from relate.probe.text_baseline import odd_one_out, text_triplet_correct
from relate.probe.report import ModelRow, format_markdown_table, format_paired_tests, format_text_table, plot_scatter
from relate.probe.uncertainty import (
    Interval, PairedTest, bootstrap_intervals, mcnemar_exact, paired_test, permutation_pvalue,
)

__all__ = [
    "RELATION_TYPES", "DISTRACTOR_TYPES", "AxisScores", "cosine_correct", "score_triplets",
    "check_axis_labels", "accuracy_matrix", "Interval", "PairedTest", "bootstrap_intervals",
    "paired_test", "mcnemar_exact", "permutation_pvalue", "ModelRow", "format_markdown_table",
    "format_text_table", "format_paired_tests", "plot_scatter", "SIMILARITIES", "pair_similarity",
    "readout_correct", "LinearProbeResult", "cross_validated_probe", "pair_difference_features",
    "odd_one_out", "text_triplet_correct",
]
