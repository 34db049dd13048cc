"""Driver process for test_serve_judge_auth.py: a Ray instance of its own, with no proxy callback,
that deploys gpu.yaml's judge-llm application (vLLM swapped for ``_llm_standin``) on request.

Not a test module. Run as ``python _judge_llm_driver.py HOST PORT``; it starts Ray with the
resources gpu.yaml's judge asks for (GPU, ``server``, the H100 accelerator hint: logical only),
starts Serve's proxy on HOST:PORT and then reads commands from stdin, one JSON object a line:
``{"deploy": NAME, "route_prefix": P, "token": true|false}`` deploys gpu.yaml's judge-llm args under
NAME (without their token source when ``token`` is false) and answers ``{"ok": true}`` or
``{"ok": false, "error": "..."}`` on stdout; ``{"quit": true}`` (or end of input) shuts down.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _judge_args(token: bool) -> tuple[str, dict]:
    import yaml

    doc = yaml.safe_load((REPO / "serve_apps/configs/gpu.yaml").read_text())
    (app,) = [a for a in doc["applications"] if a["name"] == "judge-llm"]
    args = {**app["args"], "server_cls": "_llm_standin:StandInServer"}
    if not token:
        args.pop("bearer_token_env", None)
        args.pop("bearer_token_file", None)
    return app["import_path"], args


def _why(app: str) -> dict[str, str]:
    """Each deployment's status message (where Serve keeps a failed constructor's error)."""
    from ray import serve

    status = serve.status().applications.get(app)
    return {} if status is None else {name: d.message[-3000:] for name, d in status.deployments.items()}


def main(host: str, port: int) -> None:
    import ray
    from ray import serve
    from ray._common.utils import import_attr

    ray.init(address="local", num_cpus=8, num_gpus=2, resources={"server": 2, "accelerator_type:H100": 2},
             include_dashboard=False, log_to_driver=False, configure_logging=False)
    serve.start(http_options={"host": host, "port": port})
    print(json.dumps({"ok": True, "started": f"{host}:{port}"}), flush=True)
    try:
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd.get("quit"):
                break
            import_path, args = _judge_args(cmd["token"])
            try:
                serve.run(import_attr(import_path)(args), name=cmd["deploy"], route_prefix=cmd["route_prefix"])
                out = {"ok": True}
            except Exception as exc:  # noqa: BLE001  the test reads why it did not start
                out = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[-4000:], "deployments": _why(cmd["deploy"])}
            print(json.dumps(out), flush=True)
    finally:
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
