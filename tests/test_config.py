"""kindex_etl/config.py: the KINDEX_* settings, and which of them a work pool inherits."""

from __future__ import annotations

import pytest

from kindex_etl.config import Settings, pool_setting_names, settings

# The CLI's local Prefect server on the machine a command runs on (kindex_etl/cli/server.py).
HOST_ONLY_NAMES = {"KINDEX_STATE_DIR", "KINDEX_LOCAL_SERVER", "KINDEX_SERVER_IDLE_S"}


def test_pools_inherit_every_setting_but_the_local_servers() -> None:
    every = {f"KINDEX_{name.upper()}" for name in Settings.model_fields}
    pooled = pool_setting_names()
    assert len(pooled) == len(set(pooled))
    assert set(pooled) == every - HOST_ONLY_NAMES
    assert {"KINDEX_UPSTREAM", "KINDEX_WAREHOUSE", "KINDEX_CATALOG_DIR"} <= set(pooled)


def test_host_only_settings_are_still_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KINDEX_LOCAL_SERVER", "0")
    monkeypatch.setenv("KINDEX_SERVER_IDLE_S", "12.5")
    monkeypatch.setenv("KINDEX_STATE_DIR", "/srv/kindex-state")
    cfg = settings()
    assert cfg.local_server is False
    assert cfg.server_idle_s == 12.5
    assert cfg.state_dir == "/srv/kindex-state"
    monkeypatch.setenv("KINDEX_LOCAL_SERVER", "1")
    assert settings().local_server is True
