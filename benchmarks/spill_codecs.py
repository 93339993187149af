"""The analysis's bucket spills under each IPC codec: split time, read-back time, size.

    python benchmarks/spill_codecs.py --warehouse /tmp/kb39/warehouse [--codec lz4 none zstd]

Splits the warehouse's runs into bucket spill files exactly as a full analysis does
(`RunSource.split`, one process), once per codec, then reads every file back (`read_bucket`),
and prints one JSON line per codec. The spill folder is the temp folder's. Make the warehouse
with `bench_ingest.py --keep`; the machine is shared, so compare codecs within one run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.ipc as ipc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--warehouse", required=True)
    p.add_argument("--codec", nargs="+", default=["lz4", "none", "zstd"])
    args = p.parse_args(argv)

    from kindex_etl.analysis import series
    from kindex_etl.analysis.series import RUN_COLUMNS, RunSource, read_bucket
    from kindex_etl.storage import open_store

    source = RunSource.open(open_store(args.warehouse))
    files = source.run_files
    digits = source.bucket_digits(source.file_rows(files))
    for codec in args.codec:
        series._SPILL_OPTIONS = ipc.IpcWriteOptions(compression=None if codec == "none" else codec)
        folder = Path(tempfile.mkdtemp(prefix="spill-codecs-"))
        try:
            start = time.perf_counter()
            paths = source.split(files, RUN_COLUMNS, digits, folder)
            split_s = time.perf_counter() - start
            start = time.perf_counter()
            rows = sum(read_bucket(path).num_rows for path in paths)
            read_s = time.perf_counter() - start
            size = sum(path.stat().st_size for path in paths)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        print(json.dumps({"codec": codec, "buckets": len(paths), "rows": rows,
                          "split_s": round(split_s, 2), "read_s": round(read_s, 2),
                          "mib": round(size / 2**20)}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
