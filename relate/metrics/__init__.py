"""OV-SGG-Bench metrics (seed 001, sections 5-6, App. D), vectorised over flattened tables.

One concept per module: recall (R/mR/F1/wR@K, buckets, matchers), per_image (the
per-image rows R@K and mR@K average), bootstrap (their intervals over images and paired
differences), resample (every headline under a draw of image counts: the
OV-SGG-Bench intervals), sgb (Scene-Graph-Benchmark's evaluation, the ``sgb`` protocol), sgb_stream (the same on a file
scored a batch of images at a time), scene_graphs (files
that carry their own objects and dense pair scores: sgcls / sgdet), pairs (pair-recall ceiling),
mass (shared triplet mass), baseline (frequency baseline), edges (per-edge accuracy and join),
federated (fAP, P-AUC, coverage), openvocab (synonym matching, MRR, median rank), spatial
(macro / pooled AUC), composite (chance correction, OVS), calibration (Platt, ECE), priors (H.3).
"""

from relate.metrics._boxmatch import Detections, box_map, load_detections
from relate.metrics._tables import GroundTruth, Predictions, load_ground_truth, load_predictions
from relate.metrics.baseline import FrequencyBaseline, fit_frequency_baseline
from relate.metrics.bootstrap import (CellBootstrap, CellRows, Difference, Interval, PairedBootstrap,
                                      bootstrap_cell, cell_rows, paired_bootstrap)
from relate.metrics.calibration import (Calibration, apply_platt, expected_calibration_error, fit_platt,
                                        platt_out_of_fold, reliability_bins)
from relate.metrics.composite import (COMPOSITE_AXES, Composite, chance_correct, composite, harmonic_mean,
                                      leave_one_axis_out, ratio_to_reference, recall_chance)
from relate.metrics.edges import edge_accuracy, edge_correct, edge_join
from relate.metrics.federated import LabelledCells, evaluate_federated, load_cells, score_cells
from relate.metrics.mass import shared_triplet_mass
from relate.metrics.openvocab import SynonymMatcher, calibrate_synonym_threshold, evaluate_open_vocab, rank_of_truth
from relate.metrics.pairs import pair_recall_ceiling
from relate.metrics.per_image import aggregate_per_image, per_image_recall, sgb_per_image
from relate.metrics.priors import prior_violation_check
from relate.metrics.recall import MATCHERS, RecallResult, evaluate_recall, rank_predictions
from relate.metrics.scene_graphs import SceneGraphs, evaluate_scene_graphs, load_scene_graphs
from relate.metrics.sgb import PROTOCOLS, sgb_iou, sgb_recall
from relate.metrics.sgb_stream import evaluate_sgb_stream
from relate.metrics.spatial import evaluate_spatial, spatial_auc

__all__ = [
    "GroundTruth", "Predictions", "Detections", "LabelledCells", "load_ground_truth", "load_predictions",
    "load_detections", "load_cells", "box_map", "MATCHERS", "PROTOCOLS", "sgb_iou", "sgb_recall",
    "RecallResult", "evaluate_recall", "SceneGraphs", "load_scene_graphs", "evaluate_scene_graphs", "per_image_recall", "aggregate_per_image",
    "sgb_per_image", "evaluate_sgb_stream",
    "CellRows", "Interval", "Difference", "CellBootstrap", "PairedBootstrap", "cell_rows", "bootstrap_cell",
    "paired_bootstrap",
    "rank_predictions", "pair_recall_ceiling", "shared_triplet_mass", "FrequencyBaseline",
    "fit_frequency_baseline", "edge_accuracy", "edge_correct", "edge_join", "evaluate_federated",
    "score_cells", "SynonymMatcher", "calibrate_synonym_threshold", "evaluate_open_vocab", "rank_of_truth",
    "evaluate_spatial", "spatial_auc", "COMPOSITE_AXES", "Composite", "chance_correct", "composite",
    "harmonic_mean", "leave_one_axis_out", "ratio_to_reference", "recall_chance", "Calibration",
    "apply_platt", "expected_calibration_error", "fit_platt", "platt_out_of_fold", "reliability_bins",
    "prior_violation_check",
]
