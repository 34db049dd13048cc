"""A5: graph quality judged without ground truth (seed 001, § 6.5, D.8, D.8.1).

- :mod:`protocol` — per-relation arm (A5b): matched and deployed depths, corruption control.
- :mod:`graph_compare` — whole-graph arm with scramble, padding and primacy controls, certification.
- :mod:`information` — Eq. 4 against a shared, restricted reference marginal.
- :mod:`kt` — Krichevsky-Trofimov description length, the reference-free check.
- :mod:`scripted` — a judge with known error rates (and optional first-position bias).
- :mod:`summary` — audit rows -> Tab. 7 blocks and the A5 value per system.
Ray-free: the Ray job is ``eval_jobs.judge``.
"""

from relate.judge.calls import AUDIT_SCHEMA, JudgeCall, TruthIndex, audit_table
from relate.judge.graph_compare import GraphArmConfig, build_graph_calls, parse_graph_verdict, tally_graph_arm
from relate.judge.information import (ReferenceMarginal, build_reference, judged_information, normalise_predicate,
                                      shared_vocabulary, surprisal)
from relate.judge.kt import kt_bits_per_image, kt_code_length, pool_rare
from relate.judge.protocol import (RelationArmConfig, build_relation_calls, select_deployed, select_matched,
                                   select_relative)
from relate.judge.scripted import ScriptedJudge, ScriptedJudgeConfig
from relate.judge.summary import binomial, summarise_relation_arm

__all__ = ["AUDIT_SCHEMA", "JudgeCall", "TruthIndex", "audit_table", "GraphArmConfig", "build_graph_calls",
           "parse_graph_verdict", "tally_graph_arm", "ReferenceMarginal", "build_reference", "judged_information",
           "normalise_predicate", "shared_vocabulary", "surprisal", "kt_bits_per_image", "kt_code_length",
           "pool_rare", "RelationArmConfig", "build_relation_calls", "select_deployed", "select_matched", "select_relative",
           "ScriptedJudge", "ScriptedJudgeConfig", "binomial", "summarise_relation_arm"]
