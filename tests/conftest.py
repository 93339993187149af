"""Shared fixtures. S3 ones (moto's real HTTP server on 127.0.0.1) are in tests/s3_fixtures.py."""

import os

# Tests stay on loopback: Prefect's telemetry and analytics would otherwise try the internet.
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# Commands run by tests use Prefect's temporary server, never the shared local one in the
# developer's ~/.local/state (tests/cli gives its commands a local server of their own).
os.environ.setdefault("KINDEX_LOCAL_SERVER", "0")

pytest_plugins = ["tests.s3_fixtures"]


def pytest_sessionfinish(session, exitstatus):  # type: ignore[no-untyped-def]
    """Free what tests left alive before the interpreter exits: deltalake 1.6 can abort the
    process at exit while a table it read from S3 is still alive (docs/reading.md)."""
    import gc

    gc.collect()
