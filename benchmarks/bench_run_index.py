"""A writer's start-up with and without the checkpoint's run index, on the same warehouse.

    python benchmarks/bench_run_index.py --rows 650000 --sdist-dir /tmp/sd [--workdir DIR]

Writes a realistic upstream file (`benchmarks/realistic.py`), ingests it in-process (no
Prefect), writes a checkpoint with its run index, copies the warehouse and deletes the index in
the copy, then times `Ingestor._rebuild_index` (every committed run's key, what a writer needs
before its first batch) on both, `--repeat` times each, from a fresh `Ingestor` every time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def rebuild_seconds(url: str) -> tuple[int, float]:
    from kindex_etl.catalog import default_catalog
    from kindex_etl.ingestion.batch import Ingestor
    from kindex_etl.load.warehouse import open_warehouse

    warehouse = open_warehouse(url)
    warehouse.refresh()
    ingestor = Ingestor(warehouse, default_catalog())
    start = time.perf_counter()
    ingestor._rebuild_index()
    return len(ingestor.index), time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=650_000)
    ap.add_argument("--sdist-dir", default=None, help="liger-kernel sdists (see realistic.py)")
    ap.add_argument("--workdir", default="/tmp/kindex-runindex")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

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
    print(json.dumps(out))


if __name__ == "__main__":
    main()
