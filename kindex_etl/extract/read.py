"""Stream one upstream CSV as Arrow record batches of strings, with exact line numbers."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

from kindex_etl.contracts.upstream import UPSTREAM_COLUMNS
from kindex_etl.errors import BadFile
from kindex_etl.storage import ObjectStore

BLOCK_SIZE = 6 << 20


@dataclass
class Malformed:
    line: int
    text: str
    detail: str


@dataclass
class RowBatch:
    batch: pa.RecordBatch
    lines: np.ndarray  # 1-based line number of each row (the header is line 1)
    malformed: list[Malformed] = field(default_factory=list)


def read_batches(
    store: ObjectStore, key: str, *, block_size: int = BLOCK_SIZE
) -> Iterator[RowBatch]:
    """Yield the rows of `key`; rows with the wrong number of fields come back as Malformed.

    Parsing is single-threaded on purpose: only then does pyarrow report the line number of a
    malformed row, and set-aside rows must say exactly where they came from.
    """
    malformed: list[Malformed] = []

    def on_invalid(row: pcsv.InvalidRow) -> str:
        malformed.append(
            Malformed(
                line=int(row.number or 0),
                text=row.text,
                detail=f"expected {row.expected_columns} fields, found {row.actual_columns}",
            )
        )
        return "skip"

    stream = store.open_read(key)
    try:
        try:
            reader = pcsv.open_csv(
                stream,
                read_options=pcsv.ReadOptions(use_threads=False, block_size=block_size),
                parse_options=pcsv.ParseOptions(invalid_row_handler=on_invalid),
                convert_options=pcsv.ConvertOptions(
                    column_types={name: pa.string() for name in UPSTREAM_COLUMNS},
                    strings_can_be_null=False,
                    include_columns=list(UPSTREAM_COLUMNS),
                ),
            )
        except (pa.ArrowInvalid, pa.ArrowKeyError) as exc:
            raise _bad_file(exc) from None
        next_line = 2
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                break
            except (pa.ArrowInvalid, pa.ArrowKeyError) as exc:
                raise _bad_file(exc) from None
            bad = sorted(m.line for m in malformed)
            lines = _line_numbers(next_line, batch.num_rows, bad)
            yield RowBatch(batch=batch, lines=lines, malformed=list(malformed))
            if batch.num_rows:
                next_line = int(lines[-1]) + 1
            next_line = max([next_line, *(line + 1 for line in bad)])
            malformed.clear()
        if malformed:
            empty = pa.RecordBatch.from_pydict(
                {name: pa.array([], pa.string()) for name in UPSTREAM_COLUMNS}
            )
            yield RowBatch(batch=empty, lines=np.empty(0, np.int64), malformed=list(malformed))
    finally:
        stream.close()


def _line_numbers(start: int, count: int, skipped: list[int]) -> np.ndarray:
    if not skipped:
        return np.arange(start, start + count, dtype=np.int64)
    span = np.arange(start, start + count + len(skipped), dtype=np.int64)
    return span[~np.isin(span, np.asarray(skipped, dtype=np.int64))][:count]


def _bad_file(exc: Exception) -> BadFile:
    text = str(exc)
    if "include_columns" in text or "No column named" in text or "Column" in text:
        return BadFile("bad_header", f"not an upstream benchmark CSV: {text}")
    if "Empty CSV" in text:
        return BadFile("empty_file", "the object is empty")
    if "UTF8" in text or "utf8" in text.lower():
        return BadFile("bad_encoding", text)
    return BadFile("unreadable", text)
