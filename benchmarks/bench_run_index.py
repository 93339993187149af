"""A writer's start-up with and without the checkpoint's run index, on the same warehouse.

    python benchmarks/bench_run_index.py --rows 650000 --sdist-dir /tmp/sd [--workdir DIR]

Writes a realistic upstream file (`benchmarks/realistic.py`), ingests it in-process (no
Prefect), writes a checkpoint with its run index, copies the warehouse and deletes the index in
the copy, then times `Ingestor._rebuild_index` (every committed run's key, what a writer needs
before its first batch) on both, `--repeat` times each, from a fresh `Ingestor` every time.
Then, in a fresh process per warehouse, the peak RSS of that start-up: `*_rss_mib` is
[after opening the warehouse, peak after the rebuild]. Above a frozen chunk (2M runs) the
index spills to the temp folder (`KINDEX_INDEX_SPILL`), which is part of what this measures.

    python benchmarks/bench_run_index.py --rebuild-only URL   # one fresh process's figures
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _fresh_ingestor(url: str) -> Any:
    """A new `Ingestor` on the warehouse at its head, its run index not built yet."""
    from kindex_etl.catalog import default_catalog
    from kindex_etl.ingestion.batch import Ingestor
    from kindex_etl.load.warehouse import open_warehouse

    warehouse = open_warehouse(url)
    warehouse.refresh()
    return Ingestor(warehouse, default_catalog())


def _timed_rebuild(ingestor: Any) -> tuple[int, float]:
    start = time.perf_counter()
    ingestor._rebuild_index()
    return len(ingestor.index), time.perf_counter() - start


def rebuild_seconds(url: str) -> tuple[int, float]:
    return _timed_rebuild(_fresh_ingestor(url))


def _peak_mib() -> float:
    # VmHWM, not getrusage: a child's ru_maxrss keeps the RSS its parent had when it forked.
    with open("/proc/self/status") as fh:
        line = next(line for line in fh if line.startswith("VmHWM:"))
    return round(int(line.split()[1]) / 1024, 1)


def _rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return round(int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def rebuild_only(url: str) -> None:
    """One start-up in this (fresh) process: [RSS once the warehouse is open, peak after]."""
    ingestor = _fresh_ingestor(url)
    opened = _rss_mib()
    runs, seconds = _timed_rebuild(ingestor)
    print(json.dumps({"runs": runs, "seconds": round(seconds, 3),
                      "rss_mib": [opened, _peak_mib()]}))  # fmt: skip


def fresh_rebuild(url: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, __file__, "--rebuild-only", str(url)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return dict(json.loads(done.stdout.splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=650_000)
    ap.add_argument("--sdist-dir", default=None, help="liger-kernel sdists (see realistic.py)")
    ap.add_argument("--workdir", default="/tmp/kindex-runindex")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rebuild-only", default=None, metavar="URL", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rebuild_only:
        rebuild_only(args.rebuild_only)
        return

    from benchmarks import realistic
    from kindex_etl import IngestOptions, ingest
    from kindex_etl.load import layout
    from kindex_etl.load.warehouse import open_warehouse

    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    csv = work / "up" / "benchmark" / "data" / "all_benchmark_data.csv"
    realistic.write(csv, args.rows, Path(args.sdist_dir) if args.sdist_dir else None)
    with_index, without = work / "wh", work / "wh-no-index"
    runs = ingest(str(work / "up"), str(with_index), IngestOptions(trigger=False)).runs_written
    warehouse = open_warehouse(str(with_index))
    warehouse.refresh()
    seq = warehouse.maybe_checkpoint(interval=1)
    assert seq is not None
    shutil.copytree(with_index, without)
    os.remove(without / layout.run_index_key(seq))
    out: dict[str, object] = {"rows": args.rows, "runs": runs, "load": os.getloadavg()[0]}
    for name, url in (("with_index_s", with_index), ("without_index_s", without)):
        times = []
        for _ in range(args.repeat):
            keys, seconds = rebuild_seconds(str(url))
            assert keys == runs, (keys, runs)
            times.append(round(seconds, 3))
        out[name] = times
    for name, url in (("with_index_rss_mib", with_index), ("without_index_rss_mib", without)):
        fresh = fresh_rebuild(url)
        assert fresh["runs"] == runs, (fresh, runs)
        out[name] = fresh["rss_mib"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
