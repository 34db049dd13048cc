"""The RelateAnything relation model (seed 001, § 3.2 and App. A)."""

import importlib

from relate.model.config import BackboneConfig, DeformableConfig, RelationModelConfig, SamplerConfig

# The torch modules load on first use, so code that only needs the config (the Serve ingress,
# job validation) does not pay torch's import.
_LAZY = {"ScoringMatrix": "relate.model.branches", "RelationModel": "relate.model.model",
         "RelationOutput": "relate.model.model", "create_relation_model": "relate.model.model",
         "Calibration": "relate.model.score", "fit_platt": "relate.model.score",
         "relation_logit": "relate.model.score", "relation_score": "relate.model.score"}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'relate.model' has no attribute {name!r}")

__all__ = ["BackboneConfig", "DeformableConfig", "SamplerConfig", "RelationModelConfig", "RelationModel",
           "RelationOutput", "create_relation_model", "Calibration", "fit_platt", "relation_logit",
           "relation_score", "ScoringMatrix"]
