"""The judge's OpenAI app config: one token source, and the shipped YAMLs keep every public app
guarded by itself, with the relate app's judge client sending the token the judge app checks
(the app over HTTP: tests/ray/test_serve_judge_auth.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from serve_apps.auth import is_loopback
from serve_apps.config import ServeAppConfig
from serve_apps.deployments.judge import JudgeLLMConfig

CONFIGS = Path(__file__).resolve().parents[2] / "serve_apps" / "configs"


def test_judge_llm_config_takes_one_token_source():
    with pytest.raises(ValueError, match="one token source"):
        JudgeLLMConfig(bearer_token_env="RELATE_API_TOKEN", bearer_token_file="/run/secrets/token")
    assert JudgeLLMConfig().bearer_token_env is None  # none: allowed, the app then refuses a public bind


@pytest.mark.parametrize("name", ["local", "gpu"])
def test_every_app_on_a_public_bind_has_its_own_token_source(name):
    doc = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    public = not is_loopback(doc["http_options"]["host"])
    for app in doc["applications"]:
        if app["import_path"].endswith("build_judge_llm_app"):
            cfg = JudgeLLMConfig.model_validate(app["args"])
            source = cfg.bearer_token_env or cfg.bearer_token_file
        else:
            sec = ServeAppConfig.model_validate(app["args"]).security
            source = sec.bearer_token_env or sec.bearer_token_file or sec.bearer_token
        assert source or not public, (name, app["name"])


def test_relate_judge_client_sends_the_token_the_judge_app_checks():
    doc = yaml.safe_load((CONFIGS / "gpu.yaml").read_text())
    apps = {a["name"]: a for a in doc["applications"]}
    judge_app = JudgeLLMConfig.model_validate(apps["judge-llm"]["args"])
    client = ServeAppConfig.model_validate(apps["relate"]["args"]).judge.judge.openai
    assert judge_app.bearer_token_env is not None and client.api_key_env == judge_app.bearer_token_env
    assert client.base_url.rstrip("/").endswith(apps["judge-llm"]["route_prefix"] + "/v1")
    assert client.model == judge_app.model_id
