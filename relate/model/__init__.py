"""The RelateAnything relation model (seed 001, § 3.2 and App. A)."""

from relate.model.branches import ScoringMatrix
from relate.model.config import BackboneConfig, DeformableConfig, RelationModelConfig, SamplerConfig
from relate.model.model import RelationModel, RelationOutput, create_relation_model
from relate.model.score import Calibration, fit_platt, relation_logit, relation_score

__all__ = ["BackboneConfig", "DeformableConfig", "SamplerConfig", "RelationModelConfig", "RelationModel",
           "RelationOutput", "create_relation_model", "Calibration", "fit_platt", "relation_logit",
           "relation_score", "ScoringMatrix"]
