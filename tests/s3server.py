"""A real S3-compatible server on localhost for the cook cache's tests: moto's standalone server in a
subprocess, spoken to over HTTP by the real boto3 client (no mocks)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

START_TIMEOUT = 30.0
REGION = "us-east-1"


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    process: subprocess.Popen[bytes]

    def env(self, access_key: str = "testing", secret_key: str = "testing") -> dict[str, str]:
        """What a cook process needs to reach the server: the standard AWS variables only."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": access_key,
            "AWS_SECRET_ACCESS_KEY": secret_key,
            "AWS_DEFAULT_REGION": REGION,
        }

    def client(self, access_key: str = "testing", secret_key: str = "testing"):  # noqa: ANN201
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            region_name=REGION,
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def s3_server(unauthenticated_requests: int | None = None) -> Iterator[S3Server]:
    """A moto server on a free localhost port. With ``unauthenticated_requests``, requests after that
    many are checked against IAM users and policies (to test a read-only credential)."""
    port = free_port()
    env = dict(os.environ)
    if unauthenticated_requests is not None:
        env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(unauthenticated_requests)
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = S3Server(f"http://127.0.0.1:{port}", process)
    try:
        _wait_until_up(server)
        yield server
    finally:
        server.stop()


def _wait_until_up(server: S3Server) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"moto's server exited with code {server.process.returncode}")
        try:
            urllib.request.urlopen(server.endpoint + "/moto-api/", timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"moto's server did not answer on {server.endpoint} within {START_TIMEOUT:.0f} s")
