"""Configuration by environment (`KINDEX_*`), so moving from folders to S3 is not an edit.

    KINDEX_UPSTREAM          where upstream CSVs are (directory or s3://bucket[/prefix])
    KINDEX_WAREHOUSE         where the warehouse is (directory or s3://bucket[/prefix])
    KINDEX_RERUN_DEPLOYMENT  the Prefect deployment that runs GPU re-runs ("flow/deployment")
    KINDEX_CATALOG_DIR       a directory whose gpus.json / kernels.json override the packaged ones
    KINDEX_ORPHAN_GRACE_S    staging older than this with no commit is removed (seconds)

Credentials are never configured here: S3 access uses the standard AWS chain only.
"""

from __future__ import annotations

from functools import cache

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KINDEX_", extra="ignore")

    upstream: str = "upstream"
    warehouse: str = "warehouse"
    rerun_deployment: str = "kindex-gpu-rerun/gpu-rerun"
    catalog_dir: str | None = None
    orphan_grace_s: float = 3600.0


@cache
def settings() -> Settings:
    return Settings()
