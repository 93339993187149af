"""A bound on how far Arrow's CSV reader reads ahead of the rows taken from it.

`pyarrow.csv.open_csv` reads its input on an I/O thread of its own, into a queue of up to 32
blocks that it refills once half of them are parsed: with 6 MiB blocks, 28 to 35 reads (up
to ~200 MiB of raw CSV) were ahead of the first batch, the largest single item of an
ingest's memory. `Gate` wraps the stream that reader reads and holds each read until fewer
than `blocks` reads are ahead of the batches taken.

Holding reads must not hold up a batch: Arrow needs the next block for a row that straddles
a block boundary (it refuses a row longer than a block), and its internals may ask for more.
So a read that has waited `patience` seconds while a batch was awaited goes through anyway.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

# Arrow's thread, once the reader is dropped, must not be left inside a call into Python: at
# the interpreter's exit that ends the process (std::terminate). `close` waits this long at
# most for a read in progress to return.
_CLOSE_WAIT_S = 5.0


class Gate(io.RawIOBase):
    """A readable stream over `stream` that Arrow's reading thread cannot run far ahead on."""

    def __init__(self, stream: BinaryIO, blocks: int, *, patience: float = 0.25) -> None:
        super().__init__()
        self._stream = stream
        self._blocks = blocks
        self._patience = patience
        self._reads = 0
        self._taken = 0
        self._waiting = False  # a batch is being awaited
        self._open = True
        self._inside = 0  # reads in progress
        self._cond = threading.Condition()

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        with self._cond:
            self._inside += 1
            while self._open and self._reads - self._taken >= self._blocks:
                if not self._cond.wait(self._patience) and self._waiting:
                    break
            self._reads += 1
            closed = not self._open
        data = b""
        try:
            if not closed:
                data = self._stream.read(-1 if size is None else size)
        finally:
            with self._cond:
                self._inside -= 1
                self._cond.notify_all()
        return data

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    @contextmanager
    def taking(self) -> Iterator[None]:
        """Around each `read_next_batch` (and the reader's opening, which reads the first
        block): one more read may be ahead after it."""
        with self._cond:
            self._waiting = True
        try:
            yield
        finally:
            with self._cond:
                self._waiting = False
                self._taken += 1
                self._cond.notify_all()

    def close(self) -> None:
        """Let a waiting read go, with the end of the stream (so Arrow's thread stops), and
        wait until it has returned. The stream is the caller's to close."""
        if self.closed:
            return
        with self._cond:
            self._open = False
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._inside == 0, _CLOSE_WAIT_S)
        super().close()
