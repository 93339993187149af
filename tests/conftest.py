"""Shared fixtures. S3 ones (moto's real HTTP server on 127.0.0.1) are in tests/s3_fixtures.py."""

pytest_plugins = ["tests.s3_fixtures"]
