"""Flow tests run on Prefect's real engine: one `prefect_test_harness` for the whole session.

The harness (a temporary Prefect server on SQLite, about 7.5 s to start) is session scoped and
lives here, so only tests under tests/flows/ pay for it.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import SAMPLE_CSV, write_csv

# Before prefect is imported anywhere in this session: offline and quiet.
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
# The server stores events in batches at most this far apart (5 s by default): an announcement
# waits for its events to be stored, so a short interval keeps these tests quick.
os.environ.setdefault("PREFECT_SERVER_SERVICES_EVENT_PERSISTER_FLUSH_INTERVAL", "0.5")

REPO = Path(__file__).resolve().parents[2]
# Real upstream rows: the committed sample. Point KINDEX_TEST_SAMPLE_CSV elsewhere (e.g.
# /nonexistent) to run on generated rows only.
REAL_SAMPLE = Path(os.environ.get("KINDEX_TEST_SAMPLE_CSV", SAMPLE_CSV))


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Prefect's test harness for the session (its own PREFECT_HOME and database)."""
    home = tmp_path_factory.mktemp("prefect-home")
    before = os.environ.get("PREFECT_HOME")
    os.environ["PREFECT_HOME"] = str(home)
    from prefect.testing.utilities import prefect_test_harness

    try:
        with prefect_test_harness(server_startup_timeout=60):
            yield
    finally:
        if before is None:
            os.environ.pop("PREFECT_HOME", None)
        else:
            os.environ["PREFECT_HOME"] = before


def upstream_rows() -> list[dict[str, str]]:
    """Real upstream rows (the sample's newest four versions), else generated."""
    if REAL_SAMPLE.is_file():
        from packaging.version import Version

        with REAL_SAMPLE.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
        newest = sorted({r["liger_version"] for r in rows}, key=Version)[-4:]
        return [r for r in rows if r["liger_version"] in newest]
    from kindex_etl.demo import sample_rows

    # The generated sample has two releases; two more, re-measured later, make four.
    rows = sample_rows()
    last = [r for r in rows if r["liger_version"] == rows[-1]["liger_version"]]
    for i, version in enumerate(("0.8.2", "0.8.3"), 1):
        rows += [
            {**r, "liger_version": version, "timestamp": f"2026-08-0{i} 09:00:00"} for r in last
        ]
    return rows


@dataclass
class Upstream:
    root: Path
    entries: list[str]  # commits.txt lines, in order
    versions: list[str]  # tagged versions, in order
    rows_by_folder: dict[str, int]

    def key(self, entry: str) -> str:
        return f"benchmarks/{entry}/benchmark.csv"


def build_upstream(root: Path) -> Upstream:
    """Upstream as Liger-Kernel publishes it: the cumulative file, one folder per commit.

    One tagged folder `<sha>-v<version>` per version (that version's rows), and after the first
    release one untagged dev commit `<sha>` re-publishing part of its rows.
    """
    from packaging.version import Version

    rows = upstream_rows()
    write_csv(root / "benchmark" / "data" / "all_benchmark_data.csv", rows)
    versions = sorted({r["liger_version"] for r in rows}, key=Version)
    entries: list[str] = []
    counts: dict[str, int] = {}
    for i, version in enumerate(versions):
        mine = [r for r in rows if r["liger_version"] == version]
        entry = f"{0xA000000 + i * 0x111:07x}-v{version}"
        write_csv(root / "benchmarks" / entry / "benchmark.csv", mine)
        entries.append(entry)
        counts[entry] = len(mine)
        if i == 0:
            dev = f"{0xD000000 + i:07x}"
            half = mine[: len(mine) // 2]
            write_csv(root / "benchmarks" / dev / "benchmark.csv", half)
            entries.append(dev)
            counts[dev] = len(half)
    (root / "benchmarks" / "commits.txt").write_text("\n".join(entries) + "\n")
    return Upstream(root=root, entries=entries, versions=versions, rows_by_folder=counts)


@pytest.fixture
def upstream(tmp_path: Path) -> Upstream:
    return build_upstream(tmp_path / "upstream")


def load_deploy_module(name: str) -> Any:
    """deploy/<name>.py as a module (deploy/ is not a package)."""
    import importlib.util
    import sys

    key = f"kindex_deploy_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, REPO / "deploy" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
    return module


def flow_run_artifacts(state: Any) -> dict[str, Any]:
    """The artifacts of the flow run that ended in `state`, by key, read through the client."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    flow_run_id = state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
        )
    return {str(a.key): a for a in artifacts}
