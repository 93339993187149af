"""Fixtures of the Delta tables' tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["local", "s3"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    if request.param == "local":
        return str(tmp_path / "up"), str(tmp_path / "wh")
    bucket = request.getfixturevalue("s3_bucket")
    return str(tmp_path / "up"), f"s3://{bucket}/warehouse"
