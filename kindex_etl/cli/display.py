"""Progress of an ingest where the person (or the log collector) is.

On a terminal: a rich progress bar (objects, rows, rows/s, ETA), redrawn as CSV blocks are read.
Not a terminal (cron, CI, a pipe): one plain line per commit batch on stderr. `--quiet`: none.
Stdout stays for results (`--json`), so progress never mixes with them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from kindex_etl.ingestion import progress
from kindex_etl.ingestion.progress import Event, Progress


class Lines:
    """One line per commit batch: greppable, and cheap for log collectors."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def __call__(self, event: Event, p: Progress) -> None:
        if event == "planned":
            print(
                f"kindex-etl: {p.objects_total} object(s), {p.bytes_total:,} bytes "
                f"in {p.batches_total} batch(es)",
                file=self.stream,
                flush=True,
            )
        elif event == "batch":
            print(f"kindex-etl: {p.describe()}", file=self.stream, flush=True)
        elif event == "stage":
            print(f"kindex-etl: {p.stage}", file=self.stream, flush=True)


class Bar:
    """A rich progress display; the bar advances by bytes, the text says objects and rows."""

    def __init__(self, stream: IO[str]) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from rich.progress import (
            Progress as RichProgress,
        )

        self.console = Console(file=stream, stderr=stream is sys.stderr)
        self.bar = RichProgress(
            TextColumn("[bold]ingest[/]"),
            BarColumn(),
            TextColumn("{task.fields[objects]}"),
            TextColumn("{task.fields[rows]}"),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
        )
        self.task: Any = None

    def __call__(self, event: Event, p: Progress) -> None:
        if event == "stage":
            self.close()  # the bar is done: say what runs now instead of sitting at 100 %
            self.console.print(f"kindex-etl: {p.stage}")
            return
        fields: dict[str, Any] = {
            "objects": f"{p.objects_done}/{p.objects_total} objects",
            "rows": f"{p.rows_read:,} rows",
            "rate": f"{p.rows_per_s:,.0f} rows/s",
        }
        if self.task is None:
            self.bar.start()
            self.task = self.bar.add_task("ingest", total=max(p.bytes_total, 1), **fields)
        self.bar.update(self.task, completed=p.bytes_seen, **fields)

    def close(self) -> None:
        if self.task is not None:
            self.bar.stop()
            self.task = None


@contextmanager
def showing(quiet: bool, verbose: bool, stream: IO[str] | None = None) -> Iterator[None]:
    if quiet:
        yield
        return
    stream = stream or sys.stderr  # looked up now: sys.stderr may have been replaced since import
    watcher: Bar | Lines = Bar(stream) if stream.isatty() and not verbose else Lines(stream)
    try:
        with progress.watching(watcher):
            yield
    finally:
        if isinstance(watcher, Bar):
            watcher.close()
