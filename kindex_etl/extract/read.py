"""Stream one upstream CSV as Arrow record batches of strings, with exact line numbers.

Whole-object problems (a key that is not safe, compressed or UTF-16 bytes, a header that is not
upstream's, a line too long to parse, bytes that are not UTF-8) raise `BadFile` with a stable
reason; the caller rejects that object alone. Line numbers are physical lines of the object
(the header is line 1), so a row after a blank line or after a quoted field with an embedded
newline says where it really is.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from kindex_etl.contracts.upstream import DEVICE_TIME_COLUMNS, UPSTREAM_COLUMNS
from kindex_etl.errors import BadFile, NotFound, UnsafeKey
from kindex_etl.extract.readahead import Gate
from kindex_etl.storage import ObjectStore

BLOCK_SIZE = 6 << 20
# Blocks Arrow's reading thread may read ahead of the batches taken (`readahead.Gate`).
READ_AHEAD_BLOCKS = 3
# The header is read and checked before Arrow sees the object; upstream's is ~230 bytes.
HEADER_LIMIT = 1 << 20

# Leading bytes of containers that are not CSV text (gzip, zstd, bzip2, xz, zip).
_COMPRESSED = {
    b"\x1f\x8b": "gzip",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"PK\x03\x04": "zip",
}
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_UTF8_BOM = b"\xef\xbb\xbf"


@dataclass
class Malformed:
    line: int
    text: str
    detail: str


@dataclass
class RowBatch:
    batch: pa.RecordBatch
    lines: np.ndarray  # 1-based physical line of each row (the header is line 1)
    malformed: list[Malformed] = field(default_factory=list)
    offset: int = 0  # bytes of the object read so far (for progress; block-granular)


@dataclass
class _Pending:
    """A row Arrow skipped as malformed, by its record ordinal (header = 1), not yet placed."""

    ordinal: int
    text: str
    detail: str


class _Replayed(io.RawIOBase):
    """The bytes already read for the header check, then the rest of the stream."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        super().__init__()
        self._head = memoryview(head)
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self._head.nbytes:
            n = min(self._head.nbytes, view.nbytes)
            view[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._rest.read(view.nbytes)
        view[: len(data)] = data
        return len(data)


def _rewound(head: bytes, stream: BinaryIO) -> BinaryIO:
    """The stream from its first byte again: a seek where it can (a file), else a replay."""
    try:
        if stream.seekable():
            stream.seek(0)
            return stream
    except (OSError, ValueError):
        pass
    return io.BufferedReader(_Replayed(head, stream), buffer_size=1 << 20)


def _read_head(stream: BinaryIO, limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    while size < limit:
        chunk = stream.read(limit - size)
        if not chunk:
            break
        parts.append(chunk)
        size += len(chunk)
    return b"".join(parts)


def check_header(head: bytes, *, limit: int = HEADER_LIMIT) -> list[str]:
    """The header's column names, or BadFile saying why these bytes are no upstream CSV."""
    if not head:
        raise BadFile("empty_file", "the object is empty")
    for magic, kind in _COMPRESSED.items():
        if head.startswith(magic):
            raise BadFile("compressed_file", f"{kind}-compressed data, not CSV text")
    if head.startswith(_UTF16_BOMS):
        raise BadFile("bad_encoding", "UTF-16 text (byte-order mark); upstream CSVs are UTF-8")
    head = head.removeprefix(_UTF8_BOM)
    end = min((i for i in (head.find(b"\n"), head.find(b"\r")) if i >= 0), default=-1)
    if end < 0 and len(head) >= limit - len(_UTF8_BOM):
        raise BadFile(
            "bad_header", f"the first line is longer than {limit} bytes: not an upstream header"
        )
    line = head if end < 0 else head[:end]
    if b"\x00" in line:
        raise BadFile("bad_encoding", "NUL bytes in the header: UTF-16/32 or binary data")
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadFile("bad_encoding", f"the header is not UTF-8: {exc}") from None
    names = next(csv.reader([text]), [])
    seen: set[str] = set()
    duplicated: set[str] = set()
    for name in names:
        (duplicated if name in seen else seen).add(name)
    if duplicated:
        # Which of two same-named columns holds the data is a guess: refuse the object.
        raise BadFile("bad_header", f"duplicated header columns {sorted(duplicated)}")
    missing = [c for c in UPSTREAM_COLUMNS if c not in seen]
    if missing:
        raise BadFile("bad_header", f"not an upstream benchmark CSV: missing columns {missing[:5]}")
    return names


def count_lines(store: ObjectStore, key: str, *, chunk: int = 1 << 20) -> int:
    """Physical lines of an object (at least 1): what a file rejected whole counts as read."""
    try:
        stream = store.open_read(key)
    except (UnsafeKey, NotFound):
        return 1
    breaks, last = 0, b""
    with stream:
        while data := stream.read(chunk):
            breaks += data.count(b"\n")
            last = data[-1:]
    return max(1, breaks + (1 if last not in (b"", b"\n") else 0))


def _may_break(column: pa.Array) -> bool:
    """Whether any value might hold a line break: one vectorized look at the value bytes."""
    data = column.buffers()[2]
    if data is None:
        return False
    raw = np.frombuffer(data, dtype=np.uint8)
    # A minimum is one pass with no temporary (a tenth of two comparisons' time on 40 MB,
    # benchmarks/micro_ingest.py, in git history): nothing below 14, no \n (10) or \r (13).
    # Tabs and the like fall to the exact look.
    if not len(raw) or raw.min() > 13:
        return False
    return bool((raw == 10).any() or (raw == 13).any())


def _breaks(column: pa.Array) -> np.ndarray:
    """Line breaks inside each value (\\r\\n, \\n or \\r): rows that span several lines."""
    n = pc.count_substring(column, "\n").to_numpy(zero_copy_only=False).astype(np.int64)
    r = pc.count_substring(column, "\r").to_numpy(zero_copy_only=False)
    crlf = pc.count_substring(column, "\r\n").to_numpy(zero_copy_only=False)
    return n + r - crlf


def _text_breaks(text: str) -> int:
    return text.count("\n") + text.count("\r") - text.count("\r\n")


def read_batches(
    store: ObjectStore, key: str, *, block_size: int = BLOCK_SIZE
) -> Iterator[RowBatch]:
    """Yield the rows of `key`; rows with the wrong number of fields come back as Malformed.

    Parsing is single-threaded on purpose: only then does pyarrow report the record ordinal of
    a malformed row, and set-aside rows must say exactly where they came from. Arrow reports a
    malformed row while parsing ahead, so it is placed (given its physical line) only once the
    rows before it have been seen. Blank lines (no field holds anything) are not rows.
    """
    try:
        stream = store.open_read(key)
    except UnsafeKey as exc:
        raise BadFile("unsafe_key", str(exc)) from None
    except NotFound:
        raise BadFile("unreadable", "the object vanished between listing and reading") from None
    except (PermissionError, IsADirectoryError) as exc:
        raise BadFile("unreadable", f"cannot open the object: {exc.strerror}") from None
    pending: list[_Pending] = []

    def on_invalid(row: pcsv.InvalidRow) -> str:
        pending.append(
            _Pending(
                ordinal=int(row.number or 0),
                text=row.text,
                detail=f"expected {row.expected_columns} fields, found {row.actual_columns}",
            )
        )
        return "skip"

    gate: Gate | None = None
    try:
        head = _read_head(stream, HEADER_LIMIT)
        names = check_header(head)
        gate = Gate(_rewound(head, stream), READ_AHEAD_BLOCKS)
        try:
            with gate.taking():
                reader = pcsv.open_csv(
                    gate,
                    read_options=pcsv.ReadOptions(use_threads=False, block_size=block_size),
                    parse_options=pcsv.ParseOptions(
                        invalid_row_handler=on_invalid,
                        newlines_in_values=True,
                        # Blank lines come back as rows of empty fields: they keep the record
                        # ordinals Arrow reports equal to ours, and are dropped below.
                        ignore_empty_lines=False,
                    ),
                    convert_options=pcsv.ConvertOptions(
                        # Every column as text, extra ones too: their embedded newlines count.
                        column_types={name: pa.string() for name in names},
                        strings_can_be_null=False,
                    ),
                )
        except (pa.ArrowException, UnicodeDecodeError) as exc:
            raise _bad_file(exc) from None
        yield from _batches(reader, pending, stream, gate)
    finally:
        if gate is not None:
            gate.close()
        stream.close()


def _tell(stream: BinaryIO) -> int:
    try:
        return stream.tell()
    except (OSError, ValueError):
        return 0


def _batches(
    reader: pcsv.CSVStreamingReader, pending: list[_Pending], stream: BinaryIO, gate: Gate
) -> Iterator[RowBatch]:
    next_ordinal = 2  # the header is record 1
    carry = 0  # line breaks inside the values of every record placed so far
    while True:
        try:
            with gate.taking():
                batch = reader.read_next_batch()
        except StopIteration:
            break
        except (pa.ArrowException, UnicodeDecodeError) as exc:
            raise _bad_file(exc) from None
        n = batch.num_rows
        if n == 0:
            continue
        pending.sort(key=lambda p: p.ordinal)
        skipped = [p.ordinal for p in pending if p.ordinal >= next_ordinal]
        ordinals = _ordinals(next_ordinal, n, skipped)
        last = int(ordinals[-1])
        placed = [p for p in pending if p.ordinal < last]
        pending[:] = [p for p in pending if p.ordinal >= last]
        breaks = np.zeros(n, dtype=np.int64)
        for column in batch.columns:
            if _may_break(column):  # rare: counting per value costs three passes
                breaks += _breaks(column)
        lines, malformed, carry = _place(ordinals, breaks, placed, carry)
        next_ordinal = last + 1
        # Upstream's columns, and a device-time CSV's own where it has them (contracts.upstream).
        rows = batch.select(
            [*UPSTREAM_COLUMNS, *(c for c in DEVICE_TIME_COLUMNS if c in batch.schema.names)]
        )
        blank = _blank(batch)
        if blank is not None:
            rows = rows.filter(pa.array(~blank))
            lines = lines[~blank]
        yield RowBatch(batch=rows, lines=lines, malformed=malformed, offset=_tell(stream))
    if pending:
        pending.sort(key=lambda p: p.ordinal)
        _, malformed, carry = _place(np.empty(0, np.int64), np.empty(0, np.int64), pending, carry)
        empty = pa.RecordBatch.from_pydict(
            {name: pa.array([], pa.string()) for name in UPSTREAM_COLUMNS}
        )
        yield RowBatch(batch=empty, lines=np.empty(0, np.int64), malformed=malformed)


def _blank(batch: pa.RecordBatch) -> np.ndarray | None:
    """Rows whose every field is empty (blank lines), or None when there are none."""
    blank: np.ndarray | None = None
    for column in batch.columns:
        empty = pc.equal(pc.binary_length(column), 0)
        if blank is None:
            if not pc.any(empty).as_py():
                return None  # the usual case: decided by the first column alone
            blank = empty.to_numpy(zero_copy_only=False)
        else:
            blank &= empty.to_numpy(zero_copy_only=False)
    return blank if blank is not None and blank.any() else None


def _ordinals(start: int, count: int, skipped: list[int]) -> np.ndarray:
    """Record ordinals of `count` parsed rows from `start`, around the malformed ones."""
    if not skipped:
        return np.arange(start, start + count, dtype=np.int64)
    span = np.arange(start, start + count + len(skipped), dtype=np.int64)
    return span[~np.isin(span, np.asarray(skipped, dtype=np.int64))][:count]


def _place(
    ordinals: np.ndarray, breaks: np.ndarray, placed: list[_Pending], carry: int
) -> tuple[np.ndarray, list[Malformed], int]:
    """Physical lines of parsed and malformed records: each starts after the breaks before it."""
    bad_ord = np.asarray([p.ordinal for p in placed], dtype=np.int64)
    bad_breaks = np.asarray([_text_breaks(p.text) for p in placed], dtype=np.int64)
    all_ord = np.concatenate([ordinals, bad_ord])
    all_breaks = np.concatenate([breaks, bad_breaks])
    order = np.argsort(all_ord, kind="stable")
    before = np.empty(len(order), dtype=np.int64)
    before[order] = np.cumsum(all_breaks[order]) - all_breaks[order]
    physical = all_ord + carry + before
    k = len(ordinals)
    malformed = [
        Malformed(line=int(physical[k + i]), text=p.text, detail=p.detail)
        for i, p in enumerate(placed)
    ]
    return physical[:k], malformed, carry + int(all_breaks.sum())


def _bad_file(exc: Exception) -> BadFile:
    text = str(exc)
    # A malformed row that is not UTF-8 either: pyarrow fails to decode it for the handler
    # and reports a parse error quoting it with U+FFFD.
    malformed_bytes = "CSV parse error" in text and "\ufffd" in text
    if (
        isinstance(exc, UnicodeDecodeError)
        or malformed_bytes
        or "UTF8" in text
        or "utf8" in text.lower()
    ):
        return BadFile("bad_encoding", f"not UTF-8 text: {text[:300]}")
    if "straddl" in text:
        return BadFile(
            "line_too_long", "a line longer than the CSV block size (6 MiB) cannot be parsed"
        )
    if "Empty CSV" in text:
        return BadFile("empty_file", "the object holds no CSV records")
    if "No column named" in text or "Column" in text:
        return BadFile("bad_header", f"not an upstream benchmark CSV: {text[:300]}")
    return BadFile("unreadable", text[:300])
