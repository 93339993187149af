"""Where an in-process ingest's threads wait: on a core, on the GIL, or on each other.

    python benchmarks/ingest_stalls.py --upstream DIR [--warehouse DIR] [--every 0.004]

Runs a plain `kindex_etl.ingest()` (no Prefect) as `ingest_memory.py` does, and prints:

* per pipeline thread (the CSV reader, the normalizing main thread, the builder, the writer):
  wall seconds, CPU seconds and seconds waiting for a core (`/proc/.../schedstat`), seconds
  blocked handing work on or waiting for it (`queue.Queue` put and get, timed), and the rest:
  asleep for another reason, which for these threads is mostly the GIL;
* how many of the four were runnable (state R) at samples every `--every` seconds, and the
  commonest thread states when fewer than two were (`Sput`: asleep in a queue's put, `Sget`:
  in a get, `S`: asleep elsewhere, `R`: running or waiting for a core).

On two cores, fewer than two runnable threads is a core left idle. Stop 25 found with it that
a third of a 5M-row ingest's samples had one runnable thread, the writer alone (the others
waiting to hand it their next batch) or the builder alone: what `KINDEX_WRITE_AHEAD` is for
(docs/performance.md, stop 25). The queue timing wraps `queue.Queue` for the whole process,
so the ingest is a little slower under it than under `ingest_memory.py`.
"""

from __future__ import annotations

import argparse
import collections
import json
import queue
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PIPELINE = ("kindex-reader", "MainThread", "kindex-builder", "kindex-writer")

_waits: collections.Counter[str] = collections.Counter()
_in_queue: dict[str, str] = {}


def _timed(method: Any, what: str) -> Any:
    def wrapper(self: queue.Queue[Any], *args: Any, **kwargs: Any) -> Any:
        name = threading.current_thread().name
        _in_queue[name] = what
        start = time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            _waits[name] += time.perf_counter() - start
            _in_queue[name] = ""

    return wrapper


def _schedstat() -> tuple[float, float]:
    """(seconds on a core, seconds waiting for one) of the calling thread."""
    with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as fh:
        on_cpu, waiting, _ = (int(x) for x in fh.read().split())
    return on_cpu / 1e9, waiting / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--warehouse", default=None, help="default: a temporary folder")
    parser.add_argument("--every", type=float, default=0.004, help="state sample interval (s)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "benchmarks"))
    import ingest_memory

    queue.Queue.put = _timed(queue.Queue.put, "put")  # type: ignore[method-assign]
    queue.Queue.get = _timed(queue.Queue.get, "get")  # type: ignore[method-assign]
    sched: dict[str, tuple[float, float, float]] = {}
    run = threading.Thread.run

    def measured_run(self: threading.Thread) -> None:
        start, (cpu0, wait0) = time.perf_counter(), _schedstat()
        try:
            run(self)
        finally:
            cpu, wait = _schedstat()
            sched[self.name] = (time.perf_counter() - start, cpu - cpu0, wait - wait0)

    threading.Thread.run = measured_run  # type: ignore[method-assign]
    runnable: collections.Counter[int] = collections.Counter()
    idle_states: collections.Counter[str] = collections.Counter()
    done = threading.Event()

    def sample() -> None:
        while not done.wait(args.every):
            ids = {t.native_id: t.name for t in threading.enumerate() if t.name in PIPELINE}
            if len(ids) < len(PIPELINE):
                continue  # before the pipeline started, or after it ended
            states = {}
            for tid, name in ids.items():
                try:
                    with open(f"/proc/self/task/{tid}/stat") as fh:
                        states[name] = fh.read().rsplit(")", 1)[1].split()[0]
                except OSError:
                    continue
            running = sum(1 for s in states.values() if s == "R")
            runnable[running] += 1
            if running < 2:
                idle_states[
                    " ".join(f"{n}:{s}{_in_queue.get(n, '')}" for n, s in sorted(states.items()))
                ] += 1

    threading.Thread(target=sample, name="stall-sampler", daemon=True).start()
    with tempfile.TemporaryDirectory(prefix="kindex-stalls-") as tmp:
        warehouse = args.warehouse or str(Path(tmp, "warehouse"))
        start, (cpu0, wait0) = time.perf_counter(), _schedstat()
        result = ingest_memory.run_ingest(args.upstream, warehouse)
        cpu, wait = _schedstat()
        sched["MainThread"] = (time.perf_counter() - start, cpu - cpu0, wait - wait0)
    done.set()
    threads = {}
    for name in PIPELINE:
        wall, on_cpu, for_core = sched.get(name, (0.0, 0.0, 0.0))
        queued = _waits[name]
        threads[name] = {
            "wall_s": round(wall, 2),
            "cpu_s": round(on_cpu, 2),
            "waiting_for_core_s": round(for_core, 2),
            "in_queue_s": round(queued, 2),
            "other_s": round(wall - on_cpu - for_core - queued, 2),
        }
    total = sum(runnable.values()) or 1
    print(
        json.dumps(
            {
                "seconds": result["seconds"],
                "cpu_seconds": result["cpu_seconds"],
                "threads": threads,
                "runnable_share": {n: round(c / total, 3) for n, c in sorted(runnable.items())},
                "fewer_than_two_runnable": [
                    [round(c / total, 3), states] for states, c in idle_states.most_common(5)
                ],
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
