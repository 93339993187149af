"""S3 test fixtures: moto's real HTTP server on 127.0.0.1, reached through the standard AWS chain.

Code under test finds the server the way it would find AWS (AWS_ENDPOINT_URL and the credential
env vars), so nothing is patched and the same code path runs as in production.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

# Dummy values only; the secret is distinctive so tests can assert it never shows up in errors.
TEST_ACCESS_KEY_ID = "AKIAKINDEXTESTONLY00"
TEST_SECRET_ACCESS_KEY = "kindex-test-secret-DO-NOT-LEAK-0123456789"

_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": TEST_ACCESS_KEY_ID,
    "AWS_SECRET_ACCESS_KEY": TEST_SECRET_ACCESS_KEY,
    "AWS_DEFAULT_REGION": "us-east-1",
    # Without this, a missing credential would make botocore probe 169.254.169.254 and stall.
    "AWS_EC2_METADATA_DISABLED": "true",
}
# Set by a developer's shell, these would outrank or redirect the test values.
_AWS_ENV_CLEARED = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_REGION",
    "AWS_ENDPOINT_URL_S3",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start moto's S3 server on 127.0.0.1 and point the AWS env at it; yields the endpoint.

    The server is a process of its own: in this process it would share the GIL with the
    ingest under test, and every request would wait for the pipeline's Python to yield.
    """
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1):
                break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise RuntimeError("moto's server did not start") from None
            time.sleep(0.05)

    empty = tmp_path_factory.mktemp("aws-empty")
    saved = {
        name: os.environ.get(name) for name in (*_AWS_ENV, *_AWS_ENV_CLEARED, "AWS_ENDPOINT_URL")
    }
    for name in _AWS_ENV_CLEARED:
        os.environ.pop(name, None)
    os.environ.update(_AWS_ENV)
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    # A developer's ~/.aws/config could set a profile endpoint or region; point at empty files.
    os.environ["AWS_CONFIG_FILE"] = str(empty / "config")
    os.environ["AWS_SHARED_CREDENTIALS_FILE"] = str(empty / "credentials")
    try:
        yield endpoint
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture(scope="session")
def s3_client(moto_server: str) -> Any:
    """A plain boto3 client on the moto server, for setting up and checking from outside."""
    import boto3

    return boto3.session.Session().client("s3")


@pytest.fixture
def s3_bucket_factory(s3_client: Any) -> Callable[[], str]:
    """Create fresh, uniquely named buckets; each call returns a new bucket's name."""

    def make() -> str:
        name = f"kindex-test-{uuid.uuid4().hex[:20]}"
        s3_client.create_bucket(Bucket=name)
        return name

    return make


@pytest.fixture
def make_bucket(s3_bucket_factory: Callable[[], str]) -> Callable[[], str]:
    """Alias of `s3_bucket_factory`."""
    return s3_bucket_factory


@pytest.fixture
def s3_bucket(s3_bucket_factory: Callable[[], str]) -> str:
    """One fresh bucket."""
    return s3_bucket_factory()
