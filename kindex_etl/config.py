"""Configuration by environment (`KINDEX_*`), so moving from folders to S3 is not an edit.

    KINDEX_UPSTREAM          where upstream CSVs are (directory or s3://bucket[/prefix])
    KINDEX_WAREHOUSE         where the warehouse is (directory or s3://bucket[/prefix])
    KINDEX_RERUN_DEPLOYMENT  the Prefect deployment that runs GPU re-runs ("flow/deployment")
    KINDEX_RERUN_SHARDS      flow runs (GPU hosts) one re-run is split over (default 1)
    KINDEX_RERUN_REPEATS     runs of each version a re-run makes, interleaved (default 3)
    KINDEX_CATALOG_DIR       a directory whose gpus.json / kernels.json override the packaged ones
    KINDEX_ORPHAN_GRACE_S    staging older than this with no commit is removed (seconds)
    KINDEX_CHECKPOINT_INTERVAL  a log checkpoint every this many commits (0: none)
    KINDEX_COMPACT_TARGET_ROWS  compaction packs small files into files of at most this many rows
    KINDEX_VACUUM_RETENTION_S   retired files are deleted by vacuum once retired this long (seconds)
    KINDEX_PYPI_URL          the package index (Simple API) GPU re-runs fetch sdists from
    KINDEX_SDIST_CACHE       where fetched sdists are kept (sha256-checked before reuse)
    KINDEX_OFFLINE           1: the demo fetches nothing and uses its generated sample
    KINDEX_DASK_ADDRESS      backfills fan their objects out over this existing Dask cluster
                             (its scheduler's address, e.g. tcp://10.0.0.5:8786); needs the
                             `dask` extra. Unset (default): no Dask, objects are read in-process
    KINDEX_DASK_WORKERS      without an address: N > 0 starts a local Dask cluster of N worker
                             processes (loopback only) for each backfill; 0 (default): no Dask
    KINDEX_DASK_AHEAD        commit batches being normalized on Dask ahead of the one being
                             committed (default 3): more keeps workers busy, each costs memory
    KINDEX_ANALYSIS_WORKERS  processes an analysis spreads its buckets and report pages over
                             (0, the default: one per CPU it may run on, at most 8; 1: none
                             but the calling one). Started only by a full analysis of more
                             than one bucket (100,000 runs); each holds a bucket or a
                             kernel's page (~0.5 GiB at 5M runs). 5M realistic runs on 2
                             CPUs: 47 s at 1, 26 s at 2
    KINDEX_STATE_DIR         the project's state on this machine: the local Prefect server's
                             home and port ($XDG_STATE_HOME/kindex-etl, ~/.local/state/kindex-etl)
    KINDEX_LOCAL_SERVER      1 (default): without a configured PREFECT_API_URL, commands share
                             one local Prefect server; 0: each command starts Prefect's own
                             temporary server (slower; nothing outlives the command)
    KINDEX_SERVER_IDLE_S     the local server stops after this many idle seconds (900)
    KINDEX_DESCRIPTOR_CAP    resolved descriptors a process keeps before it drops them and
                             resolves again what comes back (49152): on varied data, 65536
                             holds 20 to 95 MiB more for no measured gain in time, 32768
                             120 to 150 MiB less at 6 to 9 % more time
    KINDEX_INDEX_SPILL       1 (default): the run index keeps its frozen chunks (2M-4M runs) in
                             unlinked temporary files with a Bloom filter in memory (1.5 bytes
                             a run instead of 12); 0: all of it in memory
    KINDEX_WRITE_AHEAD       built batches an ingest lets wait for its writer thread (4): the
                             writer's work comes in bursts (a 64k-row Parquet row group every
                             few batches) and with 1 the builder and the normalizer stopped
                             behind it; each waiting batch holds ~30 MB (its documents). 5M
                             realistic rows, in process: 21.5 to 21.7 s at 1, 19.7 to 19.8 s at
                             4 (+25 to 40 MiB), 19.0 to 19.4 s at 6 (+60 to 80 MiB)
    KINDEX_MALLOC_MMAP_THRESHOLD  an ingest pins glibc's mmap threshold at this many bytes
                             (1048576), so large freed arrays go back to the system; 0: glibc's
                             own sliding threshold. At 131072 (glibc's starting value) every
                             numpy array of a batch's 20k rows was a fresh mapping: 5M realistic
                             rows took 2.6M page faults and 7.5 to 8.7 s of system CPU, against
                             1.8M and 5.3 to 6.6 s at 1 MiB, for the same peak (docs/performance.md)
    KINDEX_ARROW_DECAY_MS    how long Arrow's jemalloc keeps freed pages before giving them
                             back (30000; Arrow's own is 1000, -1 never): each batch reuses the
                             last one's instead of faulting fresh ones in. Read by the command and
                             the flows before pyarrow is imported (`memory.keep_arrow_pages`; a
                             JE_ARROW_MALLOC_CONF of the environment wins)

This is the only module that reads them, so `deploy/setup.py` can carry them into the work
pools: every one but the few marked `HOST_ONLY`, which set up the CLI's local Prefect server on the
machine a command runs on (a flow run in a pool is given its worker's API URL, and a path under
this machine's home means nothing there). Credentials are never configured here: S3 access uses
the standard AWS chain.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Final

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_PYPI_URL = "https://pypi.org/simple"
# Objects per commit of a backfill (the flow's and the command's default): progress and
# retries come per batch.
DEFAULT_OBJECTS_PER_BATCH = 32


class _HostOnly:
    """Marks a setting of this machine alone: `deploy/setup.py` never copies it into a pool."""

    def __repr__(self) -> str:
        return "HOST_ONLY"


HOST_ONLY: Final = _HostOnly()


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KINDEX_", extra="ignore")

    upstream: str = "upstream"
    warehouse: str = "warehouse"
    rerun_deployment: str = "kindex-gpu-rerun/gpu-rerun"
    rerun_shards: int = Field(default=1, ge=1)
    rerun_repeats: int = Field(default=3, ge=1)
    catalog_dir: str | None = None
    orphan_grace_s: float = 3600.0
    checkpoint_interval: int = 100
    compact_target_rows: int = 1 << 20
    # A week: longer than any reader holds a snapshot, as Delta Lake's default retention.
    vacuum_retention_s: float = 7 * 24 * 3600.0
    pypi_url: str = DEFAULT_PYPI_URL
    sdist_cache: str = "~/.cache/kindex-etl/sdists"
    offline: bool = False
    dask_address: str | None = None
    dask_workers: int = Field(default=0, ge=0)
    dask_ahead: int = Field(default=3, ge=1)
    analysis_workers: int = Field(default=0, ge=0)
    # How long an announcement waits for Prefect's server to have stored its events before
    # it fails and leaves the mark (kindex_etl.analysis.delivered); 0: no check.
    announce_confirm_s: float = Field(default=60.0, ge=0)
    descriptor_cap: int = Field(default=49_152, ge=1)
    index_spill: bool = True
    malloc_mmap_threshold: int = Field(default=1 << 20, ge=0)
    arrow_decay_ms: int = Field(default=30_000, ge=-1)
    write_ahead: int = Field(default=4, ge=1)
    state_dir: Annotated[str, HOST_ONLY] = Field(default_factory=lambda: str(_default_state_dir()))
    local_server: Annotated[bool, HOST_ONLY] = True
    server_idle_s: Annotated[float, HOST_ONLY] = 900.0


def _default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "kindex-etl"


def pool_setting_names() -> list[str]:
    """The environment variable of every setting a work pool's flow runs should inherit."""
    return [
        f"KINDEX_{name.upper()}"
        for name, field in Settings.model_fields.items()
        if HOST_ONLY not in field.metadata
    ]


def settings() -> Settings:
    """The settings as the environment has them now (cheap: read on each call, never stale)."""
    return Settings()
