"""Peak memory of a plain `kindex_etl.ingest()` (no Prefect), and where it is held.

    python benchmarks/ingest_memory.py --upstream DIR [--warehouse DIR]
    python benchmarks/ingest_memory.py --upstream DIR --memray /tmp/ingest.bin [--top 25]
    python benchmarks/ingest_memory.py --upstream DIR --trace 15

Prints one JSON line: seconds, CPU seconds (user + system; system alone; minor page faults),
CPU seconds per thread (`thread_cpu_seconds`: the reader, the normalizing main thread, the
builder, the writer), peak RSS of the process (`getrusage`), the peak of Arrow's memory pool,
the runs written, and the cyclic collector's work (`collector`: per generation, collections
and seconds, from `gc.callbacks`). Settings
come from the environment as usual, so `KINDEX_DESCRIPTOR_CAP=32768` or
`KINDEX_MALLOC_MMAP_THRESHOLD=0` compare variants.

`--trace SECONDS` also prints, every SECONDS, where the resident memory is: RSS, Arrow's pool,
Python's allocated blocks, glibc's heap and mmapped bytes (`mallinfo2`), the run index's runs,
the descriptors held, and the runs waiting for their release's next row group, in rows and
releases: one JSON line per sample, before the summary.

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
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _glibc_mib() -> dict[str, float]:
    """glibc's heap (arena), mmapped bytes (hblkhd) and in-use heap bytes (uordblks), MiB."""
    import ctypes

    fields = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in fields.split()]

    try:
        mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):  # not glibc, or glibc before 2.33
        return {}
    mallinfo2.restype = MallInfo2
    info = mallinfo2()
    return {
        "glibc_heap_mib": round(info.arena / 2**20, 1),
        "glibc_mmapped_mib": round(info.hblkhd / 2**20, 1),
        "glibc_in_use_mib": round(info.uordblks / 2**20, 1),
    }


def _remember(cls: Any, method: str) -> list[Any]:
    """Instances of `cls` made from now on, recorded by wrapping its `method` (`__init__`, or a
    dataclass's `__post_init__`): the Ingestor (run index, descriptors) and the RunsWriter
    (rows waiting for a row group) the trace reports."""
    made: list[Any] = []
    real = getattr(cls, method)

    def remember(self: Any, *args: Any, **kwargs: Any) -> None:
        real(self, *args, **kwargs)
        made.append(self)

    setattr(cls, method, remember)
    return made


def _trace(every: float, done: threading.Event, made: list[Any], runs: list[Any]) -> None:
    import pyarrow as pa

    start = time.perf_counter()
    page = os.sysconf("SC_PAGE_SIZE")
    while not done.wait(every):
        with open("/proc/self/statm") as fh:
            rss = int(fh.read().split()[1]) * page
        ingestor = made[-1] if made else None
        writer = runs[-1] if runs else None
        print(json.dumps({
            "t_s": round(time.perf_counter() - start),
            "rss_mib": round(rss / 2**20, 1),
            "arrow_mib": round(pa.total_allocated_bytes() / 2**20, 1),
            "python_blocks": sys.getallocatedblocks(),
            **_glibc_mib(),
            "index_runs": len(ingestor.index) if ingestor else 0,
            "descriptors": len(ingestor.normalizer.table.descriptors) if ingestor else 0,
            "buffered_rows": writer.buffered_rows if writer else 0,
            "buffered_releases": len(writer._pending) if writer else 0,
        }), flush=True)  # fmt: skip


class _Collections:
    """Collections and their seconds per generation, from `gc.callbacks` (any thread)."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation = info["generation"]
        self.count[generation] += 1
        self.seconds[generation] += time.perf_counter() - self._started

    def report(self) -> dict[str, list[float]]:
        return {f"gen{g}": [self.count[g], round(self.seconds[g], 2)] for g in range(3)}


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _ThreadCpu:
    """CPU seconds per thread (user + system, `/proc/self/task`), by the thread's name: the
    last reading before each thread ended, taken every `every` seconds. Threads Python did not
    start (Arrow's pool, jemalloc) are named by their id."""

    def __init__(self, every: float = 0.2) -> None:
        self._every = every
        self._done = threading.Event()
        self._cpu: dict[int, float] = {}
        self._names: dict[int, str] = {}
        self._tick = os.sysconf("SC_CLK_TCK")
        self._thread = threading.Thread(target=self._run, daemon=True, name="thread-cpu")
        self._thread.start()

    def _read(self) -> None:
        for thread in threading.enumerate():
            if thread.native_id is not None:
                self._names[thread.native_id] = thread.name
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue  # ended meanwhile
            self._cpu[int(tid)] = (int(fields[11]) + int(fields[12])) / self._tick

    def _run(self) -> None:
        while not self._done.wait(self._every):
            self._read()

    def stop(self) -> dict[str, float]:
        self._done.set()
        self._thread.join()
        self._read()
        named: dict[str, float] = collections.defaultdict(float)
        for tid, seconds in self._cpu.items():
            named[self._names.get(tid, str(tid))] += seconds
        return {name: round(sec, 2) for name, sec in sorted(named.items(), key=lambda kv: -kv[1])}


def run_ingest(upstream: str, warehouse: str, trace: float | None = None) -> dict[str, Any]:
    import gc

    import pyarrow as pa

    from kindex_etl import IngestOptions, ingest

    shutil.rmtree(warehouse, ignore_errors=True)
    done = threading.Event()
    if trace:
        from kindex_etl.ingestion.batch import Ingestor
        from kindex_etl.load.writers import RunsWriter

        made, runs = _remember(Ingestor, "__init__"), _remember(RunsWriter, "__post_init__")
        threading.Thread(target=_trace, args=(trace, done, made, runs), daemon=True).start()
    collections_ = _Collections()
    gc.callbacks.append(collections_)
    threads = _ThreadCpu()
    before = resource.getrusage(resource.RUSAGE_SELF)
    start, cpu = time.perf_counter(), _cpu_seconds()
    try:
        summary = ingest(upstream, warehouse, IngestOptions(trigger=False))
    finally:
        done.set()
        gc.callbacks.remove(collections_)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "seconds": round(time.perf_counter() - start, 2),
        "cpu_seconds": round(_cpu_seconds() - cpu, 2),
        "system_cpu_seconds": round(after.ru_stime - before.ru_stime, 2),
        "page_faults": after.ru_minflt - before.ru_minflt,
        "thread_cpu_seconds": threads.stop(),
        "collector": collections_.report(),
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
    parser.add_argument("--trace", type=float, default=None, metavar="SECONDS")
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
        print(json.dumps(run_ingest(args.upstream, warehouse, args.trace)), flush=True)


if __name__ == "__main__":
    main()
