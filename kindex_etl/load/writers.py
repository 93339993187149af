"""Writers for one commit batch: Parquet per table, JSON lines compressed with zstd.

Everything is written to a local work folder first, then staged into the warehouse as whole
files (a rename on a local warehouse, a multipart upload on S3).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kindex_etl.contracts.tables import has_statistics
from kindex_etl.load import layout

# store_schema=False: readers see plain strings, not the dictionary types we write with
# (Parquet's dictionary pages are an encoding detail; pandas would turn them into categoricals).
PARQUET_OPTIONS = {
    "compression": "zstd",
    "compression_level": 1,
    "store_schema": False,
}
_ZSTD = pa.Codec("zstd", compression_level=1)


@dataclass
class WrittenFile:
    key: str
    path: Path
    rows: int


@dataclass
class ParquetTableWriter:
    """One Parquet file; each `write` is one row group (up to a million rows)."""

    workdir: Path
    key: str
    schema: pa.Schema
    rows: int = 0
    row_groups: int = 0
    _writer: pq.ParquetWriter | None = None

    @property
    def path(self) -> Path:
        return self.workdir / self.key

    def write(self, table: pa.Table) -> None:
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(
                self.path, self.schema, use_dictionary=_dictionary_columns(self.schema),
                write_statistics=statistics_columns(self.schema), **PARQUET_OPTIONS,
            )  # fmt: skip
        self._writer.write_table(table.cast(self.schema), row_group_size=1 << 20)
        self.rows += table.num_rows
        self.row_groups += 1

    def close(self) -> WrittenFile | None:
        if self._writer is None:
            return None
        self._writer.close()
        return WrittenFile(self.key, self.path, self.rows)


def statistics_columns(schema: pa.Schema) -> list[str] | bool:
    """The columns written with Parquet statistics: all but those the schema marks
    (`contracts.tables.has_statistics`)."""
    names = [f.name for f in schema if has_statistics(f)]
    return True if len(names) == len(schema) else names


def _dictionary_columns(schema: pa.Schema) -> list[str] | bool:
    """Parquet dictionary pages for the columns the schema writes as Arrow dictionaries only.

    Where a schema names its repeated columns, the rest (run names, external ids, values) are
    distinct per row: a dictionary for them is hashed, overflows its page limit and is thrown
    away, which took half the runs table's write time and left larger files.
    """
    names = [f.name for f in schema if pa.types.is_dictionary(f.type)]
    return names or True


@dataclass
class JsonLinesWriter:
    """Each write() appends one zstd frame; concatenated frames are one valid zstd stream."""

    workdir: Path
    key: str
    rows: int = 0
    _fh: object | None = None

    @property
    def path(self) -> Path:
        return self.workdir / self.key

    def write_lines(self, lines: pa.Array) -> None:
        """`lines` is a string array whose every value already ends in a newline."""
        if len(lines) == 0:
            return
        lines = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
        offsets = lines.buffers()[1]
        data = lines.buffers()[2]
        assert offsets is not None and data is not None
        start, end = _offset(offsets, lines.offset), _offset(offsets, lines.offset + len(lines))
        self._write(data.slice(start, end - start))
        self.rows += len(lines)

    def write_bytes(self, payload: bytes, rows: int) -> None:
        self._write(pa.py_buffer(payload))
        self.rows += rows

    def _write(self, buffer: pa.Buffer) -> None:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = self.path.open("wb")
        self._fh.write(_ZSTD.compress(buffer, asbytes=False))  # type: ignore[attr-defined]

    def close(self) -> WrittenFile | None:
        if self._fh is None:
            return None
        self._fh.close()  # type: ignore[attr-defined]
        return WrittenFile(self.key, self.path, self.rows)


def _offset(offsets: pa.Buffer, index: int) -> int:
    return int(np.frombuffer(offsets, dtype=np.int32, count=1, offset=index * 4)[0])


ROW_GROUP_ROWS = 64 * 1024
MAX_BUFFERED_ROWS = 128 * 1024
# A release that got no rows in this many writes (CSV blocks) has most likely ended: upstream's
# history moves through releases (a per-commit file holds one, the cumulative file is in time
# order), and the rows it left short of a row group would otherwise wait, with every other
# ended release's, until MAX_BUFFERED_ROWS forces them out: at 20M realistic rows the buffers
# grew from ~2 releases and ~80 MiB to ~8 and ~160 MiB (docs/performance.md, stop 27).
IDLE_WRITES = 4
# An open Parquet file holds its footer in memory until it is closed, about 1 KB per column
# chunk (glibc's heap, not Arrow's pool): a runs file of 48 columns, 15 MiB at 300 row groups.
# A release's file rolls over to its next part at this many row groups (2M runs, ~130 MB on
# real history), so what an ingest holds for footers stops growing with its input.
ROW_GROUPS_PER_FILE = 32


@dataclass
class _Waiting:
    """Tables waiting to go out as one row group."""

    tables: list[pa.Table] = field(default_factory=list)
    rows: int = 0
    nbytes: int = 0

    def add(self, table: pa.Table) -> None:
        self.tables.append(table)
        self.rows += table.num_rows
        self.nbytes += table.nbytes

    def row_group(self) -> pa.Table:
        # One dictionary per column for the row group: each batch brings its own, and Parquet's
        # writer, meeting a dictionary other than the row group's first, falls back to plain
        # pages for the rest of it (on varied data every descriptor column, 20x the bytes).
        return pa.concat_tables(self.tables).unify_dictionaries()


@dataclass
class RowGroupWriter:
    """One Parquet file written in row groups of at least `rows` rows or `max_bytes` bytes,
    whatever the size of the tables handed to `write`.

    A row group per small write (the quarantine's: a few thousand held-back rows a CSV block)
    leaves readers a thousand tiny row groups at 20M rows, and its writer a footer that grows
    with them (see ROW_GROUPS_PER_FILE). `max_bytes` bounds what waits in memory where rows
    are wide.
    """

    file: ParquetTableWriter
    rows: int = ROW_GROUP_ROWS
    max_bytes: int | None = None
    _waiting: _Waiting = field(default_factory=_Waiting)

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        self._waiting.add(table)
        if self._waiting.rows >= self.rows or (
            self.max_bytes is not None and self._waiting.nbytes >= self.max_bytes
        ):
            self._flush()

    def _flush(self) -> None:
        if self._waiting.tables:
            self.file.write(self._waiting.row_group())
        self._waiting = _Waiting()

    def close(self) -> WrittenFile | None:
        self._flush()
        return self.file.close()


def groups_by_code(codes: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(code, the positions holding it, in their order) for each code present, by code: one
    stable sort, where a filter per code would pass over every row once per code."""
    order = np.argsort(codes, kind="stable")
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    for start, end in zip([0, *bounds.tolist()], [*bounds.tolist(), len(order)], strict=True):
        if start < end:
            yield int(codes[order[start]]), order[start:end]


def take_compact(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """`table.take(rows)`, each dictionary column's dictionary cut to the values those rows use.

    A take keeps the whole dictionary of its source. A rare release's buffer collects a few
    rows of every block, and each would pin its block's descriptor dictionaries (about half
    as many entries as the block has rows, on real history) until that release flushes.
    The normalizer's descriptor columns share one index array: their indices are taken and
    remapped once, not once per column.
    """
    picked = pa.array(rows, pa.int64())
    remapped: dict[tuple[int, int, int, int], tuple[pa.Array, pa.Array]] = {}
    columns = []
    for column in table.columns:
        if not pa.types.is_dictionary(column.type):
            columns.append(column.take(picked))
            continue
        if column.num_chunks != 1:
            taken = pa.table({"c": column.take(picked)})
            columns.append(compact_dictionaries(taken).column(0))
            continue
        chunk = column.chunk(0)
        validity, data = chunk.indices.buffers()
        assert data is not None
        same = (data.address, validity.address if validity else 0, chunk.offset, len(chunk))
        if same not in remapped:
            remapped[same] = _remap(chunk.indices.take(picked))
        indices, used = remapped[same]
        whole = len(used) == len(chunk.dictionary)
        dictionary = chunk.dictionary if whole else chunk.dictionary.take(used)
        columns.append(pa.chunked_array([pa.DictionaryArray.from_arrays(indices, dictionary)]))
    return pa.Table.from_arrays(columns, schema=table.schema)


def _remap(indices: pa.Array) -> tuple[pa.Array, pa.Array]:
    """(indices into the used entries only, the used entries' old positions)."""
    used = np.unique(pc.drop_null(indices).to_numpy(zero_copy_only=False))
    filler = int(used[0]) if len(used) else 0
    dense = pc.fill_null(indices, filler).to_numpy(zero_copy_only=False)
    nulls = indices.is_null().to_numpy(zero_copy_only=False) if indices.null_count else None
    new = pa.array(np.searchsorted(used, dense), type=indices.type, mask=nulls)
    return new, pa.array(used, pa.int64())


def compact_dictionaries(table: pa.Table) -> pa.Table:
    """The table with each dictionary column's dictionary cut down to the values it uses."""
    columns = []
    for column in table.columns:
        if not pa.types.is_dictionary(column.type):
            columns.append(column)
            continue
        chunks = []
        for chunk in column.chunks:
            indices, used = _remap(chunk.indices)
            if len(used) == len(chunk.dictionary):
                chunks.append(chunk)
                continue
            chunks.append(pa.DictionaryArray.from_arrays(indices, chunk.dictionary.take(used)))
        columns.append(pa.chunked_array(chunks, column.type))
    return pa.Table.from_arrays(columns, schema=table.schema)


@dataclass
class RunsWriter:
    """Runs partitioned by liger_version: one Parquet file per release per batch, and one
    more each ROW_GROUPS_PER_FILE row groups (`part-<batch>-<n>`).

    Input batches are small (a CSV block) and may mix releases (the cumulative file), so rows
    are buffered per release and written in row groups of ROW_GROUP_ROWS; a release's rows go
    out short of that once it has had none for IDLE_WRITES writes, and at most
    MAX_BUFFERED_ROWS wait in memory, the largest buffer going out first.
    """

    workdir: Path
    batch: str
    schema: pa.Schema
    _parts: dict[str, ParquetTableWriter] = field(default_factory=dict)
    _closed: list[WrittenFile] = field(default_factory=list)
    _next_part: dict[str, int] = field(default_factory=dict)
    _pending: dict[str, _Waiting] = field(default_factory=dict)
    _writes: int = 0
    _last_write: dict[str, int] = field(default_factory=dict)
    json: JsonLinesWriter | None = None

    def __post_init__(self) -> None:
        self.json = JsonLinesWriter(self.workdir, layout.documents_key(layout.RUNS, self.batch))

    def write(self, runs: pa.Table, json_lines: pa.Array) -> None:
        if runs.num_rows == 0:
            return
        assert self.json is not None
        self.json.write_lines(json_lines)
        self._writes += 1
        # One sort by release, then one take per release: no per-release filter of the batch,
        # and compact copies (a slice would pin the whole batch until its release flushes).
        versions = runs.column("liger_version").cast(pa.string()).combine_chunks()
        encoded = versions.dictionary_encode()
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        if len(encoded.dictionary) == 1:
            self._buffer(encoded.dictionary[0].as_py(), runs)
        else:
            for code, rows in groups_by_code(codes):
                self._buffer(encoded.dictionary[code].as_py(), take_compact(runs, rows))
        for version in [
            v for v in self._pending if self._writes - self._last_write[v] >= IDLE_WRITES
        ]:
            self._flush(version)
        while self.buffered_rows > MAX_BUFFERED_ROWS:
            self._flush(max(self._pending, key=lambda v: self._pending[v].rows))

    @property
    def buffered_rows(self) -> int:
        """Rows waiting in memory for their release's next row group."""
        return sum(w.rows for w in self._pending.values())

    def _buffer(self, version: str, table: pa.Table) -> None:
        self._last_write[version] = self._writes
        waiting = self._pending.setdefault(version, _Waiting())
        waiting.add(table)
        if waiting.rows >= ROW_GROUP_ROWS:
            self._flush(version)

    def _flush(self, version: str) -> None:
        waiting = self._pending.pop(version, None)
        if waiting is None:
            return
        writer = self._parts.get(version)
        if writer is None:
            part = self._next_part.get(version, 0)
            self._next_part[version] = part + 1
            key = layout.runs_key(self.batch, version, part)
            writer = self._parts[version] = ParquetTableWriter(self.workdir, key, self.schema)
        writer.write(waiting.row_group())
        if writer.row_groups >= ROW_GROUPS_PER_FILE:
            closed = writer.close()
            assert closed is not None
            self._closed.append(closed)
            del self._parts[version]

    def close(self) -> list[WrittenFile]:
        for version in list(self._pending):
            self._flush(version)
        files = [*self._closed, *(w.close() for w in self._parts.values())]
        assert self.json is not None
        files.append(self.json.close())
        return [f for f in files if f is not None]
