"""The statistics a Delta add action carries, read from the Parquet file's own footer.

Delta readers skip a file whose `minValues`/`maxValues` rule a filter out (DuckDB's `delta`
extension, Polars and pyarrow through delta-rs, Spark, Trino); without them only the partition
prunes. The footer already holds each row group's min, max and null count, so a file's stats
cost one ranged read of its tail and no pass over the data: numRecords, then minValues,
maxValues and nullCount of the table's stats columns (its `delta.dataSkippingStatsColumns`).
Timestamps are ISO 8601 strings in UTC at milliseconds, the minimum rounded down and the maximum
up (exact for the ingest's millisecond files; never narrower than the data for finer ones).

The stats columns are those of the first 32 (the protocol's default, which delta-rs's own files
of a compaction follow) that the writers give Parquet statistics (`contracts.tables.
has_statistics`). Every file must carry min and max for each of them, or none at all: deltalake
1.6.6's `to_pyarrow_dataset()` turns a stats column missing from a file's stats into a bound
`>= null`, and then drops that file for any filter on the column (measured: `external_id == x`
read 0 rows of 1). A file short of one of them gets numRecords alone, which it reads as "no
bounds".
"""

from __future__ import annotations

import io
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kindex_etl.contracts.tables import has_statistics
from kindex_etl.errors import StorageError
from kindex_etl.storage import ObjectStore

INDEXED_COLUMNS = 32
# One read covers the footer of any file of ours (a few KiB); a larger one takes a second.
FOOTER_READ = 64 * 1024
_MAGIC = b"PAR1"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_PER_MS = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}


class _Tail(io.RawIOBase):
    """A file of `size` bytes of which only the last ones are at hand: all a footer reader
    asks for."""

    def __init__(self, size: int, tail: bytes) -> None:
        super().__init__()
        self._size, self._tail, self._pos = size, tail, 0
        self._start = size - len(tail)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def readinto(self, buffer: Any) -> int:
        if self._pos < self._start:
            raise OSError("read before the footer")
        view = memoryview(buffer).cast("B")
        chunk = self._tail[self._pos - self._start : self._pos - self._start + len(view)]
        view[: len(chunk)] = chunk
        self._pos += len(chunk)
        return len(chunk)


def footer(store: ObjectStore, key: str, size: int) -> pq.FileMetaData:
    """The Parquet footer of the object `key` of `size` bytes, read from its tail alone."""
    tail = store.read_tail(key, FOOTER_READ)
    if len(tail) < 12 or tail[-4:] != _MAGIC:
        raise StorageError(f"{key} is not a Parquet file: no footer")
    needed = int.from_bytes(tail[-8:-4], "little") + 8
    if needed > len(tail):
        tail = store.read_tail(key, needed)
    return pq.read_metadata(pa.PythonFile(_Tail(size, tail), mode="r"))


def stats_columns(schema: pa.Schema) -> list[str]:
    """The columns a table's files carry min/max for: of its first 32, those written with
    Parquet statistics whose type has a JSON form here."""
    return [f.name for f in list(schema)[:INDEXED_COLUMNS] if has_statistics(f) and _typed(f.type)]


def file_stats(store: ObjectStore, key: str, size: int, columns: list[str]) -> dict[str, Any]:
    """The Delta stats of the Parquet object `key` (of `size` bytes)."""
    return delta_stats(footer(store, key, size), columns)


def delta_stats(metadata: pq.FileMetaData, columns: list[str]) -> dict[str, Any]:
    """numRecords, and minValues, maxValues and nullCount of `columns`, from a file's footer;
    numRecords alone when the footer lacks bounds of one of them."""
    schema = metadata.schema.to_arrow_schema()
    leaves = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    groups = [metadata.row_group(i) for i in range(metadata.num_row_groups)]
    mins: dict[str, Any] = {}
    maxes: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name in columns if groups else ():
        leaf = leaves.get(name)
        chunks = [g.column(leaf).statistics for g in groups] if leaf is not None else []
        if not chunks or any(s is None or not s.has_null_count for s in chunks):
            return {"numRecords": metadata.num_rows}
        nulls[name] = sum(int(s.null_count) for s in chunks)
        if nulls[name] == metadata.num_rows:
            continue  # every value null: the null count says so, and readers take it
        bounds = _bounds(schema.field(name).type, chunks, [g.num_rows for g in groups])
        if bounds is None:
            return {"numRecords": metadata.num_rows}
        mins[name], maxes[name] = bounds
    stats: dict[str, Any] = {"numRecords": metadata.num_rows}
    if nulls:
        stats.update(minValues=mins, maxValues=maxes, nullCount=nulls)
    return stats


def _typed(type_: pa.DataType) -> bool:
    if pa.types.is_dictionary(type_):
        type_ = type_.value_type
    return (
        pa.types.is_timestamp(type_)
        or pa.types.is_date32(type_)
        or pa.types.is_date64(type_)
        or (pa.types.is_floating(type_) and not pa.types.is_float16(type_))
        or pa.types.is_integer(type_)
        or pa.types.is_boolean(type_)
        or pa.types.is_string(type_)
        or pa.types.is_large_string(type_)
    )


def _bounds(
    type_: pa.DataType, chunks: list[pq.Statistics], rows: list[int]
) -> tuple[Any, Any] | None:
    """The column's min and max over its row groups as Delta's JSON has them; None when a row
    group with values has no min/max, or the type has no JSON form here."""
    lows, highs = [], []
    for s, n in zip(chunks, rows, strict=True):
        if s.has_min_max:
            lows.append(s.min_raw if pa.types.is_timestamp(type_) else s.min)
            highs.append(s.max_raw if pa.types.is_timestamp(type_) else s.max)
        elif not (s.has_null_count and s.null_count == n):
            return None  # values, but no statistics for them
    if not lows:
        return None  # every value null: nullCount says it
    low, high = min(lows), max(highs)
    if pa.types.is_dictionary(type_):
        type_ = type_.value_type
    if pa.types.is_timestamp(type_):
        per_ms = _PER_MS[type_.unit]
        if per_ms is None:  # seconds
            return _iso(int(low) * 1000), _iso(int(high) * 1000)
        return _iso(int(low) // per_ms), _iso(-(-int(high) // per_ms))
    if pa.types.is_date32(type_) or pa.types.is_date64(type_):
        return low.isoformat(), high.isoformat()
    if pa.types.is_floating(type_):
        if pa.types.is_float16(type_) or not (math.isfinite(low) and math.isfinite(high)):
            return None  # JSON has no NaN or infinity
        return float(low), float(high)
    if pa.types.is_integer(type_) or pa.types.is_boolean(type_):
        return low, high
    if isinstance(low, str) and isinstance(high, str):  # strings (a dictionary's values too)
        return low, high
    return None  # binary, decimal and the rest: no stats (readers then read the file)


def _iso(ms: int) -> str:
    """Milliseconds since the epoch as Delta's stats write a timestamp (`...T21:01:42Z`,
    `...T21:01:42.120Z`), the form delta-rs writes."""
    at = _EPOCH + timedelta(milliseconds=ms)
    frac = f".{ms % 1000:03d}" if ms % 1000 else ""
    return at.strftime("%Y-%m-%dT%H:%M:%S") + frac + "Z"
