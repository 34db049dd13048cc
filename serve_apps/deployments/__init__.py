"""Serve deployments composed by ``serve_apps.app.build_app``."""

from serve_apps.deployments.detector import DetectorDeployment
from serve_apps.deployments.judge import JudgeDeployment, build_judge_llm_app
from serve_apps.deployments.relation import RelationModelDeployment

__all__ = ["DetectorDeployment", "JudgeDeployment", "RelationModelDeployment", "build_judge_llm_app"]
