"""One local Ray instance for the whole session: 2 CPUs, dashboard off (tests that need the
dashboard start their own cluster).

The Serve proxy of this instance runs as it does on a cluster node: our token middleware is
installed on the proxy itself (``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH``) with the token in
``RELATE_API_TOKEN``, so every app on it, ours or not, answers 401 without ``_serve_helpers.AUTH``.
The variables must be in the environment before ``ray.init`` starts the raylet."""

from __future__ import annotations

import os

import pytest

from _serve_helpers import SERVE_TOKEN


@pytest.fixture(scope="session")
def ray_session():
    import ray

    from serve_apps.auth import PROXY_CALLBACK, TOKEN_ENV

    if not ray.is_initialized():
        os.environ[TOKEN_ENV] = SERVE_TOKEN
        os.environ["RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"] = PROXY_CALLBACK
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False, ignore_reinit_error=True)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    yield ray
    ray.shutdown()
