"""What the Serve test modules share: the proxy's token, a free loopback port, PNG encoding, and a
small detect-and-relate app."""

from __future__ import annotations

import base64
import contextlib
import io
import socket
from pathlib import Path
from typing import Iterator

import numpy as np
from PIL import Image

# conftest.ray_session puts this token in RELATE_API_TOKEN for the proxy; the apps use it too
SERVE_TOKEN = "relate-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {SERVE_TOKEN}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def png(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    return buf.getvalue()


def b64png(arr: np.ndarray) -> str:
    return base64.b64encode(png(arr)).decode()


@contextlib.contextmanager
def tiny_app(root: Path, app: str, vocab: list[str], max_boxes: int) -> Iterator[str]:
    """A Serve app of the tiny relation checkpoint (``vocab`` as its bank) and the tiny OWLv2
    detector on a free loopback port, guarded by SERVE_TOKEN; yields its base URL."""
    from ray import serve

    from serve_apps.app import build_app
    from serve_apps.config import ServeAppConfig
    from serve_apps.tiny import save_tiny_checkpoint, save_tiny_owlv2

    ckpt, owl = save_tiny_checkpoint(root / "ckpt", vocab), save_tiny_owlv2(root / "owl")
    port = free_port()
    cfg = ServeAppConfig.model_validate({
        "http": {"port": port},
        "security": {"bearer_token": SERVE_TOKEN},
        "relation": {"checkpoint": str(ckpt), "torch_threads": 1, "deployment": {"num_cpus": 0.3}},
        "detector": {"detector": {"mode": "transformers", "model": str(owl), "threshold": 0.0,
                                  "max_boxes": max_boxes, "queries": ["person", "cup"], "torch_threads": 1},
                     "deployment": {"num_cpus": 0.2}},
        "judge": None,
        "ingress": {"num_cpus": 0.1, "max_ongoing_requests": 64},
    })
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(build_app(cfg), name=app, route_prefix="/")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.delete(app)
        serve.shutdown()
