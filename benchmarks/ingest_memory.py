"""Peak memory of a plain `kindex_etl.ingest()` (no Prefect), and where it is held.

    python benchmarks/ingest_memory.py --upstream DIR [--warehouse DIR]
    python benchmarks/ingest_memory.py --upstream DIR --memray /tmp/ingest.bin [--top 25]

Prints one JSON line: seconds, peak RSS of the process (`getrusage`), the peak of Arrow's
memory pool and the runs written. Settings come from the environment as usual, so
`KINDEX_DESCRIPTOR_CAP=32768` or `KINDEX_MALLOC_MMAP_THRESHOLD=0` compare variants.

`--memray FILE` (needs `pip install memray`) runs the same ingest under memray's tracker with
Arrow on the system allocator (`ARROW_DEFAULT_MEMORY_POOL=system`: memray sees malloc, not
mimalloc's arenas), then prints the allocations live at the high-water mark, grouped by the
first kindex_etl frame of their stack. The tracker's peak is what was allocated; the gap to
peak RSS is the allocator's (fragments, pages not yet returned).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_ingest(upstream: str, warehouse: str) -> dict[str, float]:
    import pyarrow as pa

    from kindex_etl import IngestOptions, ingest

    shutil.rmtree(warehouse, ignore_errors=True)
    start = time.perf_counter()
    summary = ingest(upstream, warehouse, IngestOptions(trigger=False))
    return {
        "seconds": round(time.perf_counter() - start, 2),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "arrow_pool_peak_mib": round(pa.default_memory_pool().max_memory() / 2**20, 1),
        "arrow_pool": pa.default_memory_pool().backend_name,
        "runs_written": summary.runs_written,
    }


def high_water_sites(capture: str, top: int) -> list[tuple[float, str]]:
    from memray import FileReader

    sizes: collections.Counter[str] = collections.Counter()
    for record in FileReader(capture).get_high_watermark_allocation_records(merge_threads=True):
        frames = record.stack_trace()
        site = next(
            (
                f"{fn} {file.split('kindex_etl/', 1)[1]}:{line}"
                for fn, file, line in frames
                if "/kindex_etl/" in file
            ),
            "(outside kindex_etl, or no Python frame)",
        )
        sizes[site] += record.size
    return [(size / 2**20, site) for site, size in sizes.most_common(top)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--warehouse", default=None, help="default: a temporary folder")
    parser.add_argument("--memray", default=None, metavar="FILE", help="profile into FILE")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--in-tracker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    with tempfile.TemporaryDirectory(prefix="kindex-mem-") as tmp:
        warehouse = args.warehouse or str(Path(tmp, "warehouse"))
        if args.memray and not args.in_tracker:
            Path(args.memray).unlink(missing_ok=True)
            env = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": "system"}
            subprocess.run(
                [sys.executable, "-m", "memray", "run", "-q", "-o", args.memray, __file__,
                 "--upstream", args.upstream, "--warehouse", warehouse, "--in-tracker"],
                env=env, check=True,
            )  # fmt: skip
            from memray import FileReader

            peak = FileReader(args.memray).metadata.peak_memory / 2**20
            print(json.dumps({"tracked_peak_mib": round(peak, 1)}))
            for size, site in high_water_sites(args.memray, args.top):
                print(f"{size:8.1f} MiB  {site}")
            return
        print(json.dumps(run_ingest(args.upstream, warehouse)), flush=True)


if __name__ == "__main__":
    main()
