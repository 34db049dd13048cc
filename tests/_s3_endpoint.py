"""A real S3 endpoint for tests: moto's server on 127.0.0.1 (a free port), spoken to over HTTP.

Not a mock of our code: pyarrow's S3FileSystem, in the test process, in Ray workers and in fresh
subprocesses, sends real S3 requests to it. Any key pair is accepted; the one here is fixed so a
test can check that it never shows up in a printed location.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

KEY, SECRET = "relatetestkey", "relatetestsecret"


@dataclass(frozen=True)
class S3Endpoint:
    host_port: str

    def uri(self, path: str, credentials: bool = False) -> str:
        """``s3://[KEY:SECRET@]path?...``: endpoint, scheme and region in pyarrow's query syntax."""
        auth = f"{KEY}:{SECRET}@" if credentials else ""
        return f"s3://{auth}{path.strip('/')}?scheme=http&endpoint_override={self.host_port}&region=us-east-1"

    def env(self) -> dict[str, str]:
        """The default-chain credentials a process needs when the URI carries none; loopback never proxied."""
        return {"AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_EC2_METADATA_DISABLED": "true",
                "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}

    def filesystem(self):
        from pyarrow import fs

        return fs.S3FileSystem(access_key=KEY, secret_key=SECRET, endpoint_override=self.host_port, scheme="http",
                               region="us-east-1", allow_bucket_creation=True)

    def make_bucket(self, name: str) -> None:
        self.filesystem().create_dir(name)

    def upload(self, folder: Path, dest: str) -> None:
        """Copy a local folder's files to ``bucket/prefix``."""
        fs = self.filesystem()
        for f in sorted(Path(folder).iterdir()):
            if f.is_file():
                with fs.open_output_stream(f"{dest.strip('/')}/{f.name}") as out:
                    out.write(f.read_bytes())

    def read(self, path: str) -> bytes:
        with self.filesystem().open_input_stream(path) as f:
            return f.read()

    def write(self, path: str, data: bytes) -> None:
        with self.filesystem().open_output_stream(path) as f:
            f.write(data)


@contextmanager
def s3_endpoint() -> Iterator[S3Endpoint]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield S3Endpoint(f"{host}:{port}")
    finally:
        server.stop()
