"""What the Serve test modules share: the proxy's token, a free loopback port, PNG encoding."""

from __future__ import annotations

import base64
import io
import socket

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
