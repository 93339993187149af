"""Shared fixtures. S3 ones (moto's real HTTP server on 127.0.0.1) are in tests/s3_fixtures.py."""

import os

# Tests stay on loopback: Prefect's telemetry and analytics would otherwise try the internet.
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

pytest_plugins = ["tests.s3_fixtures"]
