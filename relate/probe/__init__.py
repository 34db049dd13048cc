"""The triplet relatedness probe (seed 000): cosine readout, per-axis accuracy, gaps, bootstrap
intervals, paired tests and report writers. Ray-free; eval_jobs.triplet_probe drives it.
Manifests are read by relate.data.poporo."""

from relate.probe.metrics import (
    DISTRACTOR_TYPES, RELATION_TYPES, AxisScores, accuracy_matrix, check_axis_labels,
    cosine_correct, score_triplets,
)
from relate.probe.report import ModelRow, format_markdown_table, format_paired_tests, format_text_table, plot_scatter
from relate.probe.uncertainty import (
    Interval, PairedTest, bootstrap_intervals, mcnemar_exact, paired_test, permutation_pvalue,
)

__all__ = [
    "RELATION_TYPES", "DISTRACTOR_TYPES", "AxisScores", "cosine_correct", "score_triplets",
    "check_axis_labels", "accuracy_matrix", "Interval", "PairedTest", "bootstrap_intervals",
    "paired_test", "mcnemar_exact", "permutation_pvalue", "ModelRow", "format_markdown_table",
    "format_text_table", "format_paired_tests", "plot_scatter",
]
