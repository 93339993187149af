"""Gate: Arrow's CSV reader kept a few blocks ahead, never stuck, and safe to drop."""

from __future__ import annotations

import io
import threading
import time

import pyarrow as pa
import pyarrow.csv as pcsv

from kindex_etl.extract.readahead import Gate

BLOCK = 4096


class _Counting(io.BytesIO):
    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.reads = 0

    def read(self, size: int | None = -1) -> bytes:
        self.reads += 1
        return super().read(size)


def _csv(rows: int, width: int = 60) -> bytes:
    return b"a,b\n" + b"".join(b"%d,%s\n" % (i, b"x" * width) for i in range(rows))


def _options() -> pcsv.ReadOptions:
    return pcsv.ReadOptions(use_threads=False, block_size=BLOCK)


def _open(gate: Gate) -> pcsv.CSVStreamingReader:
    with gate.taking():
        return pcsv.open_csv(gate, read_options=_options())


def _column(gate: Gate, reader: pcsv.CSVStreamingReader, name: str) -> list[object]:
    values: list[object] = []
    while True:
        try:
            with gate.taking():
                batch: pa.RecordBatch = reader.read_next_batch()
        except StopIteration:
            return values
        values.extend(batch.column(name).to_pylist())


def test_arrow_reads_far_ahead_without_the_gate_and_a_few_blocks_with_it() -> None:
    data = _csv(20_000)  # ~330 blocks of 4 KiB
    bare = _Counting(data)
    reader = pcsv.open_csv(bare, read_options=_options())
    reader.read_next_batch()
    time.sleep(0.3)
    assert bare.reads > 20  # what the gate is for: Arrow's own queue of up to 32 blocks

    gated = _Counting(data)
    gate = Gate(gated, blocks=3)
    reader = _open(gate)
    with gate.taking():
        first = reader.read_next_batch().column("a").to_pylist()
    time.sleep(0.3)
    assert gated.reads <= 2 + 3  # the opening's block, the batch's, three ahead
    assert first + _column(gate, reader, "a") == list(range(20_000))
    gate.close()


def test_a_batch_that_needs_reads_past_the_bound_still_comes() -> None:
    # One block allowed ahead, and the first row straddles into the next block: the batch
    # needs a read the bound holds, which goes through once it has waited `patience`.
    long_row = b"1," + b"y" * (BLOCK + BLOCK // 2) + b"\n"
    gate = Gate(io.BytesIO(b"a,b\n" + long_row + b"2,z\n" * 3000), blocks=1, patience=0.01)
    assert _column(gate, _open(gate), "a") == [1] + [2] * 3000


def test_close_releases_a_waiting_read_with_the_end_of_the_stream() -> None:
    gate = Gate(io.BytesIO(b"0123456789" * 10), blocks=1, patience=10)
    assert gate.read(10) == b"0123456789"
    result: list[bytes] = []
    waiter = threading.Thread(target=lambda: result.append(gate.read(10)))
    waiter.start()
    time.sleep(0.1)
    assert waiter.is_alive()  # one read ahead of no batch taken: held
    gate.close()
    waiter.join(timeout=5)
    assert result == [b""]


class _Slow(io.BytesIO):
    """A stream whose reads wait for `go`: a read in progress, as on a slow network."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.go = threading.Event()

    def read(self, size: int | None = -1) -> bytes:
        self.go.wait(10)
        return super().read(size)


def test_close_waits_for_a_read_in_progress() -> None:
    # Arrow's thread, left inside a call into Python when the interpreter exits, ends the
    # process (std::terminate): once close() returns, no read may still be running.
    stream = _Slow(b"x" * 100)
    gate = Gate(stream, blocks=5)
    reader = threading.Thread(target=gate.read, args=(10,))
    reader.start()
    time.sleep(0.05)
    closer = threading.Thread(target=gate.close)
    closer.start()
    closer.join(0.3)
    assert closer.is_alive()  # the read is still in the stream
    stream.go.set()
    closer.join(5)
    reader.join(5)
    assert not closer.is_alive() and not reader.is_alive()
    assert gate.read(10) == b""  # closed: the end of the stream
