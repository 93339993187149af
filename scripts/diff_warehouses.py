#!/usr/bin/env python
"""Compare what two warehouses hold, whatever their batches and file names.

    python scripts/diff_warehouses.py WAREHOUSE_A WAREHOUSE_B [--ignore-column COL ...]

Reads each warehouse the way a consumer does (the files `_kindex/snapshot.json` lists, with
pyarrow), then compares every table as a multiset of rows and every document kind as a
multiset of JSON lines. Prints one line per table and exits 1 when anything differs. Used to
show that a refactor, a compaction or a reprocess left the content as it should be.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kindex_etl.contracts.tables import millisecond_timestamps
from kindex_etl.load import layout
from kindex_etl.storage import ObjectStore, open_store


def snapshot_tables(store: ObjectStore) -> dict[str, list[str]]:
    snap = json.loads(store.get_bytes(layout.SNAPSHOT))
    tables: dict[str, list[str]] = snap["tables"]
    return tables


def read_parquet(store: ObjectStore, keys: list[str], ignore: set[str]) -> pa.Table | None:
    parts = [pq.read_table(io.BytesIO(store.get_bytes(k))) for k in keys]
    if not parts:
        return None
    # Timestamps in one unit: files delta-rs compacted hold Delta's microseconds.
    table = millisecond_timestamps(pa.concat_tables(parts, promote_options="permissive"))
    table = table.drop_columns([c for c in table.column_names if c in ignore])
    names = sorted(table.column_names)
    # Nested columns (lists, structs) cannot be sorted on: compare them as their JSON text.
    table = pa.table(
        {
            n: pa.array(
                [json.dumps(v, sort_keys=True, default=str) for v in table[n].to_pylist()],
                pa.string(),
            )
            if pa.types.is_nested(table.schema.field(n).type)
            else table[n]
            for n in names
        }
    )
    return table.sort_by([(n, "ascending") for n in names]) if table.num_rows else table


def read_lines(store: ObjectStore, keys: list[str]) -> Counter[str]:
    lines: Counter[str] = Counter()
    for key in keys:
        raw = store.get_bytes(key)
        with pa.CompressedInputStream(pa.BufferReader(raw), "zstd") as stream:
            lines.update(line for line in stream.read().decode().splitlines() if line)
    return lines


def compare(a_url: str, b_url: str, ignore: set[str]) -> list[str]:
    a, b = open_store(a_url), open_store(b_url)
    ta, tb = snapshot_tables(a), snapshot_tables(b)
    problems = []
    for table in sorted(set(ta) | set(tb)):
        ka, kb = ta.get(table, []), tb.get(table, [])
        if table.startswith("documents/"):
            la, lb = read_lines(a, ka), read_lines(b, kb)
            same = la == lb
            detail = f"{sum(la.values())} vs {sum(lb.values())} documents"
        else:
            pa_, pb = read_parquet(a, ka, ignore), read_parquet(b, kb, ignore)
            same = (pa_ is None and pb is None) or (
                pa_ is not None and pb is not None and pa_.equals(pb)
            )
            rows = [t.num_rows if t is not None else 0 for t in (pa_, pb)]
            detail = f"{rows[0]} vs {rows[1]} rows"
            if not same and pa_ is not None and pb is not None and pa_.num_rows == pb.num_rows:
                differing = [
                    c
                    for c in pa_.column_names
                    if c not in pb.column_names or not pc.all(pc.equal(pa_[c], pb[c])).as_py()
                ]
                detail += f", columns differ: {differing}"
        print(f"{'same' if same else 'DIFFERENT':9} {table}: {detail}")
        if not same:
            problems.append(table)
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="a warehouse (directory or s3://)")
    parser.add_argument("b", help="the other warehouse")
    parser.add_argument(
        "--ignore-column", action="append", default=[], help="leave this column out (repeatable)"
    )
    args = parser.parse_args()
    problems = compare(args.a, args.b, set(args.ignore_column))
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
