"""The judge VLM's OpenAI-compatible Serve app with its own bearer-token check.

``ray.serve.llm.build_openai_app`` builds its FastAPI ingress with no authentication; before this
module the app was guarded only when every node also installed our proxy callback
(``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH``), which a node started without it silently skips.
Here the app is composed from ray.serve.llm's public parts instead (``build_llm_deployment``,
``OpenAiIngress``, ``make_fastapi_ingress`` and its ``app`` argument), so the token check sits on
the app itself, outermost, in front of every route (OpenAPI and docs included): the same
:class:`serve_apps.auth.BearerAuthMiddleware` and start-up rule the relate app uses.

This module imports ``ray.serve.llm`` at the top, which needs vLLM's (or SGLang's) protocol
models: :func:`serve_apps.deployments.judge.build_judge_llm_app` imports it only when called.
"""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.serve.deployment import Application
from ray.serve.llm import LLMConfig, build_llm_deployment
from ray.serve.llm.ingress import OpenAiIngress, make_fastapi_ingress

from serve_apps.auth import AuthConfigError, BearerAuthMiddleware, read_token, require_token_for_bind, serve_bind_host

__all__ = ["GuardedOpenAiIngress", "build_guarded_openai_app"]

# The replica's token, read by the ingress constructor from the replica's own environment or file
# and by the middleware from here. Only the token's source travels in the deployment's arguments:
# a token captured where the app is built would sit in the pickled application and the
# controller's records.
_STATE: dict[str, str | None] = {"token": None}


def _token() -> str | None:
    return _STATE["token"]


def _guarded_fastapi():
    """The FastAPI app ``build_openai_app`` starts from (Ray's request-id, metrics, CORS and
    OpenAI-error middleware), with the token check added last so it runs first: a request
    without the token never reaches Ray's CORS, routing or error handling."""
    # the one internal import: ray.serve.llm's public make_fastapi_ingress takes an app, but the
    # app Ray builds by default (with its middleware) is only reachable as ingress.init
    from ray.llm._internal.serve.core.ingress.ingress import init

    app = init()
    app.add_middleware(BearerAuthMiddleware, token=_token, open_paths=())
    return app


class GuardedOpenAiIngress(OpenAiIngress):
    """Ray's OpenAI router, started only with a token or on a loopback-only proxy."""

    def __init__(self, llm_deployments: dict, model_cards: dict, *, token_env: str | None = None,
                 token_file: str | None = None, lora_paths: dict | None = None) -> None:
        token = read_token(env=token_env, file=token_file)
        host = serve_bind_host()
        try:
            require_token_for_bind(host, token, "the judge's OpenAI app")
        except AuthConfigError:  # name the judge app's own settings, not the relate app's
            raise AuthConfigError(
                f"the judge's OpenAI app would listen on {host!r}, beyond this machine, with no bearer token: "
                "set bearer_token_env (or bearer_token_file) in the judge-llm application's args, "
                "or bind 127.0.0.1") from None
        _STATE["token"] = token
        super().__init__(llm_deployments, model_cards, lora_paths=lora_paths)


# Bound to its routes here, at import, like a class under @serve.ingress: Serve turns the route
# methods into class-based views by rewriting their signatures, and FastAPI >= 0.137 re-reads
# those signatures in the replica. Ray's methods travel by reference, so a rewrite done only
# where the app was built is lost there and every route asks for a 'self' query parameter (400).
# Naming this module as the class's home makes Serve ship the class by reference: the replica
# imports this module to find it, which repeats the rewrite there.
GuardedOpenAiIngress = make_fastapi_ingress(GuardedOpenAiIngress, app=_guarded_fastapi())
GuardedOpenAiIngress.__module__ = __name__


def build_guarded_openai_app(llm: LLMConfig, token_env: str | None, token_file: str | None) -> Application:
    """What ``build_openai_app({"llm_configs": [llm]})`` builds, with the token check on the ingress."""
    from ray.llm._internal.serve.core.configs.openai_api_models import to_model_metadata

    read_token(env=token_env, file=token_file)  # an unset variable fails the build, not the first request
    server = build_llm_deployment(llm)
    options: dict[str, Any] = GuardedOpenAiIngress.get_deployment_options([llm])
    return serve.deployment(GuardedOpenAiIngress, **options).bind(
        llm_deployments={llm.model_id: server}, model_cards={llm.model_id: to_model_metadata(llm.model_id, llm)},
        token_env=token_env, token_file=token_file)
