"""The analysis's bucket spills under each IPC codec and buffer: split and read-back time, size.

    python benchmarks/spill_codecs.py --warehouse /tmp/kb39/warehouse [--codec lz4 none zstd]
        [--processes 8 1]

Splits the warehouse's runs into bucket spill files exactly as a full analysis does
(`RunSource.split`, one process), once per codec and `--processes` (the split waits for the
buffer one of that many splitting processes gets, `series.spill_budget`: 8 gives 64 MiB, 1 or
2 give 256 MiB), then reads every file back (`read_bucket`), and prints one JSON line each,
with that case's peak RSS: each case runs in a fresh process. The spill folder is the temp
folder's. Make the warehouse with `bench_ingest.py --keep`; the machine is shared, so compare
within one run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow.ipc as ipc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--warehouse", required=True)
    p.add_argument("--codec", nargs="+", default=["lz4", "none", "zstd"])
    p.add_argument("--processes", nargs="+", type=int, default=[1])
    args = p.parse_args(argv)

    # One process per case, so that each peak is its own (ru_maxrss never goes down).
    spawn = multiprocessing.get_context("spawn")
    for codec, processes in [(c, n) for c in args.codec for n in args.processes]:
        with ProcessPoolExecutor(1, mp_context=spawn) as pool:
            print(json.dumps(pool.submit(_case, args.warehouse, codec, processes).result()))
    return 0


def _case(warehouse: str, codec: str, processes: int) -> dict[str, Any]:
    from kindex_etl.analysis import series
    from kindex_etl.analysis.series import RUN_COLUMNS, RunSource, read_bucket
    from kindex_etl.storage import open_store

    source = RunSource.open(open_store(warehouse))
    files = source.run_files
    digits = source.bucket_digits(source.file_rows(files))
    series._SPILL_OPTIONS = ipc.IpcWriteOptions(compression=None if codec == "none" else codec)
    folder = Path(tempfile.mkdtemp(prefix="spill-codecs-"))
    try:
        start = time.perf_counter()
        paths = source.split(files, RUN_COLUMNS, digits, folder, processes=processes)
        split_s = time.perf_counter() - start
        start = time.perf_counter()
        rows = sum(read_bucket(path).num_rows for path in paths)
        read_s = time.perf_counter() - start
        size = sum(path.stat().st_size for path in paths)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"codec": codec, "buffer_mib": series.spill_budget(processes) >> 20,
            "buckets": len(paths), "rows": rows, "split_s": round(split_s, 2),
            "read_s": round(read_s, 2), "mib": round(size / 2**20),
            "peak_rss_mib": round(peak)}  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
