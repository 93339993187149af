"""Held-back rows and files: the quarantine table, with where each came from and why.

Rows keep their raw upstream columns verbatim so `replay` can run them again after a catalog
fix; entries without a parsed row (a bad file, a malformed line) keep their line and detail.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from kindex_etl.contracts.tables import QUARANTINE_SCHEMA
from kindex_etl.contracts.upstream import DEVICE_TIME_COLUMNS, UPSTREAM_COLUMNS

# Reasons a replay cannot change: the row has no fields to re-read, or the file was rejected.
FILE_LEVEL_REASONS = frozenset(
    {
        "bad_header",
        "empty_file",
        "bad_encoding",
        "compressed_file",
        "line_too_long",
        "unsafe_key",
        "unreadable",
        "malformed_row",
    }
)


def quarantine_table(
    batch: pa.RecordBatch,
    idx: np.ndarray,
    reasons: Sequence[str],
    details: Sequence[str],
    source_key: str,
    source_etag: str,
    lines: np.ndarray,
    software: str,
) -> pa.Table:
    """Rows `idx` of `batch`, verbatim, with where they came from and why they are held back."""
    n = len(idx)
    cols: dict[str, Any] = {
        "source_key": pa.array([source_key] * n, pa.string()),
        "source_etag": pa.array([source_etag] * n, pa.string()),
        "source_row": pa.array(lines[idx], pa.int64()),
        "reason": pa.array(reasons, pa.string()),
        "detail": pa.array(details, pa.string()),
        "software": pa.array([software] * n, pa.string()),
    }
    taken = batch.take(pa.array(idx, pa.int64()))
    for name in UPSTREAM_COLUMNS:
        cols[name] = taken.column(name)
    for name in DEVICE_TIME_COLUMNS:  # a device-time CSV's own, kept for its replay
        have = name in taken.schema.names
        cols[name] = taken.column(name) if have else pa.array([""] * n, pa.string())
    return pa.table(cols, schema=QUARANTINE_SCHEMA)


def held_back_without_row(
    key: str, etag: str, software: str, lines: list[int | None], reason: str, details: list[str]
) -> pa.Table:
    """Entries that have no parsed row to keep (a bad file, a malformed line)."""
    n = len(lines)
    return pa.table(
        {
            "source_key": [key] * n,
            "source_etag": [etag] * n,
            "source_row": pa.array(lines, pa.int64()),
            "reason": [reason] * n,
            "detail": details,
            "software": [software] * n,
            **{
                name: pa.array([""] * n, pa.string())
                for name in (*UPSTREAM_COLUMNS, *DEVICE_TIME_COLUMNS)
            },
        },
        schema=QUARANTINE_SCHEMA,
    )
