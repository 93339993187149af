"""Worker processes for one analysis: its buckets, then its report's kernel pages.

Both are CPU-bound Python, NumPy and Arrow that one process runs on one core (a 5M-run
analysis kept one core busy for 47 s while the other idled). `Workers` is a process pool
started on first use and shut with the analysis; state every task needs (a warehouse
snapshot, the calibration, the catalog's history) is written once to a pickle file in the
pool's own folder (`share`) and loaded once per worker (`shared`), not sent with each task.

Processes are started with `spawn`: the parent may be running a Prefect flow's threads, and a
forked child of a threaded process can inherit a lock another thread held. As with any spawned
pool, a script that starts an analysis must guard its entry point with
`if __name__ == "__main__":` (the CLI, the flows' entry points and pytest do); or set
`KINDEX_ANALYSIS_WORKERS=1` (config.py).
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from functools import lru_cache
from multiprocessing import get_context
from pathlib import Path
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

from .scratch import ScratchDir

P = ParamSpec("P")
T = TypeVar("T")


def worker_count() -> int:
    """`KINDEX_ANALYSIS_WORKERS` where set (> 0), else the CPUs this process may use (at most
    8: past that the parent's own share, the commit and the index page, is the bound)."""
    from .config import settings

    configured = settings().analysis_workers
    if configured:
        return configured
    return max(1, min(available_cpus(), 8))


def available_cpus() -> int:
    """CPUs this process may use: its affinity (where the OS has one), within its cgroup's
    CPU quota (a container limited to 2 CPUs on a 64-CPU host gets 2 workers, not 8)."""
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS has no affinity call
        count = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        if quota != "max":
            count = min(count, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):
        pass  # no cgroup v2 quota here
    return count


class Workers:
    """`count` spawned processes, started by the first `submit`; with a count of 1, none."""

    def __init__(self, count: int | None = None) -> None:
        self.count = worker_count() if count is None else max(1, count)
        self._pool: ProcessPoolExecutor | None = None
        self._folder: ScratchDir | None = None
        self._shared = 0  # states written: each `share` gets a file of its own

    @property
    def parallel(self) -> bool:
        return self.count > 1

    @property
    def started(self) -> bool:
        """Whether processes run (a small analysis never starts them: not worth a spawn)."""
        return self._pool is not None

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        if self._pool is None:
            from .memory import worker_arrow_conf

            self._pool = ProcessPoolExecutor(
                self.count,
                mp_context=get_context("spawn"),
                initializer=_start_worker,
                initargs=(worker_arrow_conf(),),
            )
        return self._pool.submit(fn, *args, **kwargs)

    def folder(self) -> Path:
        """The pool's scratch folder (removed by `close`)."""
        if self._folder is None:
            self._folder = ScratchDir.create("workers")
        return self._folder.path

    def share(self, state: Any) -> str:
        """Write `state` for the workers; the handle `shared` loads it by."""
        path = self.folder() / f"state-{self._shared}.pickle"
        self._shared += 1
        with open(path, "wb") as fh:
            pickle.dump(state, fh, protocol=pickle.HIGHEST_PROTOCOL)
        return str(path)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._folder is not None:
            self._folder.remove()
            self._folder = None

    def __enter__(self) -> Workers:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@lru_cache(maxsize=4)
def shared(handle: str) -> Any:
    """In a worker: what `Workers.share` wrote (read once per worker; only our own pool's
    files, written by the parent a moment before, are ever unpickled)."""
    with open(handle, "rb") as fh:
        return pickle.load(fh)  # noqa: S301 (the parent's own file: see above)


def _start_worker(arrow_conf: str | None) -> None:
    """Each worker's allocators as an analysis process's (`run_regressions` sets its own).
    Runs before the tasks' modules import pyarrow."""
    from .memory import apply_arrow_conf, pin_mmap_threshold, use_bulk_arrow_pool

    apply_arrow_conf(arrow_conf)
    pin_mmap_threshold()
    use_bulk_arrow_pool()
