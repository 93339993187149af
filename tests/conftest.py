"""Shared fixtures. S3 fixtures (moto's real HTTP server on 127.0.0.1) live in tests/s3_fixtures.py."""

pytest_plugins = ["tests.s3_fixtures"]
