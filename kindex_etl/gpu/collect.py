"""Select the rows a re-run produced from the harness's cumulative data file.

The shipped scripts upsert into `benchmark/data/all_benchmark_data.csv` of the extracted sdist,
beside the rows the release shipped with (other GPUs, older versions, perhaps an upstream H200).
A row is ours when all of these hold:

1. it is not byte-for-byte one of the rows the file held before the run (diff with a snapshot);
2. its `timestamp` is at or after the run's start (the scripts write `time.strftime`, and the
   runner sets TZ=UTC for them, so the start is compared in UTC, floored to the second);
3. its `liger_version` is the version under test, and its `gpu_name` is the GPU the probe saw
   (when the probe saw one).

Rows come out in the upstream column order, as the CSV the ingest reads.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from kindex_etl.contracts.upstream import CUMULATIVE_FILE, TIMESTAMP_FORMAT, UPSTREAM_COLUMNS


def read_rows(data: bytes) -> list[dict[str, str]]:
    if not data:
        return []
    return list(csv.DictReader(io.StringIO(data.decode("utf-8"))))


def _key(row: dict[str, str]) -> tuple[str, ...]:
    return tuple(row.get(c, "") or "" for c in UPSTREAM_COLUMNS)


def new_rows(
    before: bytes,
    after: bytes,
    *,
    started: datetime,
    version: str,
    gpu_name: str | None,
) -> list[dict[str, str]]:
    """Rows of `after` that this run wrote (see the module doc for the rule)."""
    shipped = {_key(r) for r in read_rows(before)}
    since = started.astimezone(UTC).replace(microsecond=0, tzinfo=None).strftime(TIMESTAMP_FORMAT)
    out = []
    for row in read_rows(after):
        if _key(row) in shipped:
            continue
        if (row.get("timestamp") or "") < since:  # fixed-width: text order = time order
            continue
        if row.get("liger_version") != version:
            continue
        if gpu_name and row.get("gpu_name") != gpu_name:
            continue
        out.append(row)
    return out


def to_csv(rows: Iterable[dict[str, str]]) -> bytes:
    buf = io.StringIO()
    writer = csv.DictWriter(
        buf, fieldnames=list(UPSTREAM_COLUMNS), extrasaction="ignore", lineterminator="\n"
    )
    writer.writeheader()
    for row in rows:
        writer.writerow({c: row.get(c, "") for c in UPSTREAM_COLUMNS})
    return buf.getvalue().encode("utf-8")


def data_file(sdist_root: Path) -> Path:
    return sdist_root / CUMULATIVE_FILE
