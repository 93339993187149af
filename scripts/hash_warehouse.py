"""Order-independent content hashes of a local warehouse's snapshot, in little memory.

    python scripts/hash_warehouse.py WAREHOUSE_DIR [--ignore-column source_etag]

One line per table and document kind: rows and a sum of per-row hashes (DuckDB's `hash` of
the row for Parquet tables, blake2b of each line for JSON documents), so two warehouses that
hold the same rows in other files, batches or orders print the same lines. For warehouses
too large for `diff_warehouses.py`, which holds both in memory.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import duckdb
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kindex_etl.load import layout

_MOD = 1 << 64


def _line_hash(line: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(line, digest_size=8).digest(), "little")


def documents_hash(files: list[str]) -> tuple[int, int]:
    total = count = 0
    for name in files:
        with pa.CompressedInputStream(pa.OSFile(name), "zstd") as stream:
            rest = b""
            while chunk := stream.read(1 << 26):
                lines = (rest + chunk).split(b"\n")
                rest = lines.pop()
                for line in filter(None, lines):
                    total, count = (total + _line_hash(line)) % _MOD, count + 1
            if rest:
                total, count = (total + _line_hash(rest)) % _MOD, count + 1
    return count, total


def table_hash(files: list[str], ignore: set[str]) -> tuple[int, int]:
    rows = duckdb.connect().read_parquet(files, union_by_name=True)
    kept = ", ".join(f'"{n}"' for n in rows.columns if n not in ignore)
    count, total = rows.aggregate(f"count(*), sum(hash({kept})::hugeint)").fetchall()[0]
    return int(count), int(total or 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("warehouse")
    parser.add_argument("--ignore-column", action="append", default=[])
    args = parser.parse_args()
    root = Path(args.warehouse)
    snapshot = json.loads((root / layout.SNAPSHOT).read_bytes())
    for table, keys in sorted(snapshot["tables"].items()):
        files = [str(root / k) for k in keys]
        if table.startswith("documents/"):
            count, total = documents_hash(files)
        else:
            count, total = table_hash(files, set(args.ignore_column))
        print(table, count, total)


if __name__ == "__main__":
    main()
