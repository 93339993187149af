"""A month as deployed, accelerated: the schedules' own flows and the operator's commands on one
warehouse (issue 32). `tests/flows/test_month_as_deployed.py` runs a short one in CI,
`benchmarks/bench_month.py` a longer one.

Upstream is real data split as upstream publishes it: the real upstream sample
(`tests/fixtures/upstream-sample`, 2,448 rows, 15 releases) one release folder
`benchmarks/<sha>-v<version>/` an hour, an untagged dev commit re-publishing half of the last
release every third hour, and the cumulative `benchmark/data/all_benchmark_data.csv` rewritten
each day with everything so far (all duplicates). Into that hours also bring the fixtures: the
52 rows main 5ae26c4 was given (one GPU the catalog cannot place, fixed later by a catalog
change and a replay), the ten 0.8.5-sdist rows (0.8.4, a release newer than the sample's: a
GPU re-run request) and our own H200 re-run of 0.8.5 (`reruns/...` with its environment). The
only rows made here are two series with a 30 % step (`tests.analysis.helpers`): the real data
holds no change the detector calls, and without changes the chained analysis would commit
nothing, which is what hid the compaction bug.

Every step is followed by `reader_sees`: the ONE place that reads the warehouse as a consumer
does (the documented route), so that a change of that route changes only it.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from kindex_etl.contracts.upstream import UPSTREAM_COLUMNS
from kindex_etl.load import delta, layout
from kindex_etl.storage import open_store
from tests.helpers import FIXTURES, REPO, SAMPLE_GZ
from tests.warehouse import put_objects

# Sample releases the made series span (so they trigger no re-run of their own).
SERIES_RELEASES = ("0.5.4", "0.5.8", "0.5.10", "0.6.0", "0.6.1", "0.6.3", "0.7.0", "0.8.0")
STEP = [0.1] * 4 + [0.13] * 4
HELD_GPU = "NVIDIA RTX 6000"  # the 5ae26c4 fixture's unplaceable GPU (its line 53)


def _csv(rows: list[dict[str, str]]) -> bytes:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(UPSTREAM_COLUMNS), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue().encode()


def sample_rows() -> list[dict[str, str]]:
    with gzip.open(SAMPLE_GZ, "rt", newline="") as fh:
        return list(csv.DictReader(fh))


def _fixture_objects() -> dict[str, dict[str, bytes]]:
    """The fixtures as upstream objects, by the name of the hour's event."""
    from tests.analysis.helpers import series_rows

    rerun = FIXTURES / "h200_rerun_0.8.5"
    folder = "reruns/0.8.5/20261130T1231Z-h200-0.8.5-r1"
    return {
        "5ae26c4": {
            "benchmarks/5ae26c4/benchmark.csv": (
                FIXTURES / "warehouse-main-5ae26c4/upstream/benchmark/data/all_benchmark_data.csv"
            ).read_bytes()
        },
        "series-a": {"benchmarks/5e41e5a/benchmark.csv": _csv(
            series_rows(STEP, releases=SERIES_RELEASES, x="2048"))},
        "series-b": {"benchmarks/5e41e5b/benchmark.csv": _csv(
            series_rows(STEP, releases=SERIES_RELEASES, x="4096", day=2))},
        "sdist": {
            "benchmarks/0a5d150-v0.8.4/benchmark.csv": (
                FIXTURES / "sdist-rows" / "all_benchmark_data.csv"
            ).read_bytes()
        },
        "h200-rerun": {
            f"{folder}/benchmark.csv": (rerun / "benchmark.csv").read_bytes(),
            f"{folder}/environment.json": (rerun / "environment.json").read_bytes(),
        },
    }  # fmt: skip


def schedule(hours: int) -> list[dict[str, bytes]]:
    """What upstream publishes in each hour (objects, new or overwritten), `hours` hours long.

    The releases come one an hour and wrap around (a later pass re-publishes a release folder
    under a new commit: all duplicates); the fixtures come at fixed hours of the first day.
    """
    from packaging.version import Version

    rows = sample_rows()
    versions = sorted({r["liger_version"] for r in rows}, key=Version)
    by_version = {v: [r for r in rows if r["liger_version"] == v] for v in versions}
    fixtures = _fixture_objects()
    at = {1: "series-a", 2: "series-b", 3: "5ae26c4", 4: "sdist", 6: "h200-rerun"}
    published: list[dict[str, str]] = []
    commits: list[str] = []
    out: list[dict[str, bytes]] = []
    for h in range(hours):
        objects: dict[str, bytes] = {}
        v = versions[h % len(versions)]
        sha = f"{0xC0000 + h:07x}"
        entry = f"{sha}-v{v}"
        objects[f"benchmarks/{entry}/benchmark.csv"] = _csv(by_version[v])
        commits.append(entry)
        published += by_version[v]
        if h % 3 == 2:
            dev = f"{0xD0000 + h:07x}"
            objects[f"benchmarks/{dev}/benchmark.csv"] = _csv(by_version[v][::2])
            commits.append(dev)
        if h % 4 == 3:  # now and then: the cumulative file rewritten with all so far
            objects["benchmark/data/all_benchmark_data.csv"] = _csv(published)
        objects.update(fixtures.get(at.get(h, ""), {}))
        objects["benchmarks/commits.txt"] = ("\n".join(commits) + "\n").encode()
        out.append(objects)
    return out


def fixed_catalog(directory: Path) -> Path:
    """The packaged GPU catalog plus the GPU the 5ae26c4 rows held back: the catalog fix."""
    gpus = json.loads((REPO / "kindex_etl" / "catalog" / "gpus.json").read_text())
    gpus["gpus"].append(
        {"match": HELD_GPU, "vendor": "nvidia", "product": HELD_GPU, "architecture": "sm_75",
         "family": "Turing", "segment": "workstation"}
    )  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "gpus.json").write_text(json.dumps(gpus))
    return directory


# -- the reader ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """What a consumer reading the warehouse sees: runs, their documents, held-back rows."""

    seq: int
    runs: tuple[str, ...]  # external ids, sorted
    run_documents: tuple[str, ...]  # the BenchmarkRun documents' external ids, sorted
    held: int
    tables: dict[str, int] = field(default_factory=dict)  # rows per table


def reader_sees(url: str) -> Seen:
    """The warehouse as a consumer reads it (docs/reading.md): every table through its Delta
    log, the documents through the files `document_files` lists. The one place that reads."""
    store = open_store(url)
    options = delta.storage_options(store)
    runs_table = delta.open_table(store, layout.RUNS, options)
    if runs_table is None:
        return Seen(0, (), (), 0)
    tables: dict[str, int] = {}
    for table in (*delta.PUBLISH_ORDER,):
        dt = delta.open_table(store, table, options)
        tables[table] = 0 if dt is None else dt.to_pyarrow_dataset().count_rows()
    runs = runs_table.to_pyarrow_table(columns=["external_id"]).column(0).to_pylist()
    listing = delta.open_table(store, delta.DOCUMENT_FILES, options)
    docs: list[str] = []
    for f in [] if listing is None else listing.to_pyarrow_table().to_pylist():
        with pa.CompressedInputStream(pa.BufferReader(store.get_bytes(f["path"])), "zstd") as s:
            lines = [json.loads(x) for x in s.read().decode().splitlines() if x]
        key = f"documents/{f['table']}"
        tables[key] = tables.get(key, 0) + len(lines)
        if f["table"] == layout.RUNS:
            docs += [d["spec"]["sourceNative"]["externalId"] for d in lines]
    seq = runs_table.transaction_version(delta.LOG_APP) or 0
    # The quarantine's Delta table holds what is held back now (a replay's settled files left).
    held = tables[layout.QUARANTINE]
    return Seen(seq, tuple(sorted(runs)), tuple(sorted(docs)), held, tables)


# -- the month -----------------------------------------------------------------------------


@dataclass
class Step:
    what: str
    seconds: float
    seen: Seen
    result: Any = None


@dataclass
class Month:
    """One warehouse's month: the URLs, the log of steps, and the checks after each."""

    upstream: str
    warehouse: str
    catalog_dir: Path
    steps: list[Step] = field(default_factory=list)
    committed_runs: int = 0  # what the commands said they committed (runs), summed

    def check(self, what: str, started: float, result: Any = None) -> Seen:
        seen = reader_sees(self.warehouse)
        self.steps.append(Step(what, time.perf_counter() - started, seen, result))
        # Exactly the committed runs, each once, each with its document.
        assert len(set(seen.runs)) == len(seen.runs), f"{what}: a run seen twice"
        assert seen.runs == seen.run_documents, f"{what}: runs and documents differ"
        assert len(seen.runs) == self.committed_runs, (what, len(seen.runs), self.committed_runs)
        return seen


def _head(url: str) -> int:
    from kindex_etl.load.warehouse import open_warehouse

    warehouse = open_warehouse(url, create=False)
    warehouse.refresh()
    return warehouse.head


def _runs_committed_since(url: str, seq: int) -> int:
    """Runs the log's ingest commits after `seq` added (what a crashed command committed)."""
    from kindex_etl.load.warehouse import open_warehouse

    warehouse = open_warehouse(url, create=False)
    warehouse.refresh()
    return sum(
        f.rows
        for r in warehouse.records
        if r.seq is not None and r.seq > seq and r.kind == "ingest"
        for f in r.files
        if layout.table_of(f.key) == layout.RUNS
    )


def run_month(
    month: Month,
    hours: int,
    *,
    day_hours: int,
    crash: Callable[[str], Any] | None = None,
    command: Callable[[list[str]], dict[str, Any]] | None = None,
    setenv: Callable[[str, str], None] | None = None,
) -> None:
    """Hours of ingests (each with its chained analysis), a maintenance run every `day_hours`,
    and the operator's steps at fixed hours: the catalog fix with a replay (hour 5), a
    reprocess (hour 6), crashes (`crash(point)`: hour 2's ingest, the first maintenance).

    `command(argv)` runs a `kindex-etl` command and returns its JSON; `crash(point)` runs the
    step that dies at `point`.
    """
    from flows.ingest import run_ingest_flow
    from flows.maintenance import maintenance_flow

    for h, objects in enumerate(schedule(hours)):
        put_objects(month.upstream, objects)
        if crash is not None and h == 2:
            before = month.committed_runs
            head = _head(month.warehouse)
            crash("after_publish")  # an hourly ingest killed mid-way: nothing half-visible
            # Its commit is in the log (the truth) but not yet in the snapshot: a reader sees
            # the state before it, whole, until the next run finishes the publish.
            month.committed_runs += _runs_committed_since(month.warehouse, head)
            assert month.committed_runs > before
            seen = reader_sees(month.warehouse)
            assert len(set(seen.runs)) == len(seen.runs) and seen.runs == seen.run_documents
            assert len(seen.runs) in (before, month.committed_runs)
            month.steps.append(Step("crash: ingest after_publish", 0.0, seen))
        started = time.perf_counter()
        summary = run_ingest_flow(upstream=month.upstream, warehouse=month.warehouse)
        month.committed_runs += summary["runs_written"]
        month.check(f"hour {h}: ingest", started, summary)
        if h == 5:
            # The fix is deployed as configuration: later ingests use it too.
            assert setenv is not None
            setenv("KINDEX_CATALOG_DIR", str(fixed_catalog(month.catalog_dir)))
            # Deployed, each flow run is a new process; here they share one, whose
            # `default_catalog()` is cached for the process's life.
            from kindex_etl.catalog import default_catalog

            default_catalog.cache_clear()
            started = time.perf_counter()
            out = command(["replay", "--warehouse", month.warehouse]) if command else {}
            month.committed_runs += out.get("runs_written", 0)
            month.check("replay after the catalog fix", started, out)
        if h == 6:
            started = time.perf_counter()
            out = command(["reprocess", "--warehouse", month.warehouse]) if command else {}
            month.committed_runs = out.get("runs_after", month.committed_runs)
            month.check("reprocess", started, out)
        if (h + 1) % day_hours == 0:
            if crash is not None and h + 1 == day_hours:
                crash("compact_after_commit")
                month.check("crash: compaction after its commit", time.perf_counter())
            started = time.perf_counter()
            out = maintenance_flow(warehouse=month.warehouse, retention_s=0.0)
            month.check(f"hour {h}: maintenance", started, out)
