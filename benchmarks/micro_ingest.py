"""Micro-benchmarks behind the choices in the ingest's hot paths (CPU seconds, best of 3).

    python benchmarks/micro_ingest.py                       # index lookups, line-break check
    python benchmarks/micro_ingest.py --warehouse DIR       # also Parquet statistics and zstd
                                                            # levels on that warehouse's runs

* `searchsorted`: 1M run keys looked up in 2M, in their own order and sorted (why
  `RunIndex.classify` looks up in key order).
* `line_break`: the reader's check of 40 MB of value bytes: two comparisons, or one `min()`
  first (`extract.read._may_break`).
* With `--warehouse`: 1M runs of the warehouse written with statistics on every column, on all
  but `external_id` and `name`, and on none; the same runs in 64k-row groups with zstd-1
  (ours), lz4 and snappy (time and size); and 400 MB of its run documents compressed at zstd
  levels 1, -1, -3, -5 (time and size).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def _best(fn: Callable[[], object], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return round(min(times), 4)


def searchsorted() -> dict[str, float]:
    rng = np.random.default_rng(1)

    def keys(n: int) -> np.ndarray:
        series = rng.integers(0, 50_000, n).astype(np.uint64) << np.uint64(32)
        return series | rng.integers(1_600_000_000, 1_800_000_000, n).astype(np.uint64)

    index, queries = np.unique(keys(2_000_000)), keys(1_000_000)
    ordered = np.sort(queries)
    return {
        "unsorted_s": _best(lambda: np.searchsorted(index, queries)),
        "sorted_s": _best(lambda: np.searchsorted(index, ordered)),
        "argsort_s": _best(lambda: np.argsort(queries, kind="stable")),
    }


def line_break() -> dict[str, float]:
    raw = np.random.default_rng(0).integers(32, 127, 40_000_000).astype(np.uint8)
    return {
        "two_comparisons_s": _best(lambda: bool((raw == 10).any() or (raw == 13).any())),
        "min_s": _best(lambda: raw.min() > 13),
    }


def _million_runs(warehouse: Path) -> Any:
    """The first 1M runs of the warehouse's run files, as written (RUN_WRITE_SCHEMA)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kindex_etl.contracts.tables import RUN_WRITE_SCHEMA

    files = sorted((warehouse / "benchmark_runs").rglob("*.parquet"))[:40]
    runs = pa.concat_tables(pq.read_table(f, schema=RUN_WRITE_SCHEMA) for f in files)
    return runs.slice(0, 1_000_000)


def parquet_statistics(warehouse: Path) -> dict[str, float]:
    import pyarrow.parquet as pq

    from kindex_etl.contracts.tables import RUN_WRITE_SCHEMA
    from kindex_etl.load.writers import PARQUET_OPTIONS, _dictionary_columns, statistics_columns

    runs = _million_runs(warehouse)
    variants: dict[str, bool | list[str]] = {
        "all": True,
        # What the writer does: none on long ids, digests and descriptors (contracts.tables).
        "ours": statistics_columns(RUN_WRITE_SCHEMA),
        "all_but_id_and_name": [
            f.name for f in RUN_WRITE_SCHEMA if f.name not in ("external_id", "name")
        ],
        "none": False,
    }
    out: dict[str, float] = {"runs": runs.num_rows}
    with tempfile.TemporaryDirectory() as tmp:
        for name, stats in variants.items():

            def write(stats: bool | list[str] = stats) -> None:
                options = {**PARQUET_OPTIONS, "write_statistics": stats}
                with pq.ParquetWriter(
                    Path(tmp) / "runs.parquet", RUN_WRITE_SCHEMA,
                    use_dictionary=_dictionary_columns(RUN_WRITE_SCHEMA), **options,
                ) as writer:  # fmt: skip
                    writer.write_table(runs, row_group_size=1 << 20)

            out[f"statistics_{name}_s"] = _best(write)
    return out


def parquet_codecs(warehouse: Path) -> dict[str, float]:
    import pyarrow.parquet as pq

    from kindex_etl.contracts.tables import RUN_WRITE_SCHEMA
    from kindex_etl.load.writers import PARQUET_OPTIONS, ROW_GROUP_ROWS, _dictionary_columns

    runs = _million_runs(warehouse)
    # Row groups as the writer makes them: each with its own unified dictionaries.
    groups = [
        runs.slice(i, ROW_GROUP_ROWS).combine_chunks().unify_dictionaries()
        for i in range(0, runs.num_rows, ROW_GROUP_ROWS)
    ]
    out: dict[str, float] = {"runs": runs.num_rows}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runs.parquet"
        for codec in ("zstd", "lz4", "snappy"):
            options = {**PARQUET_OPTIONS, "compression": codec}
            if codec != "zstd":
                options.pop("compression_level")

            def write(options: dict[str, object] = options) -> None:
                with pq.ParquetWriter(
                    path, RUN_WRITE_SCHEMA, use_dictionary=_dictionary_columns(RUN_WRITE_SCHEMA),
                    **options,
                ) as writer:  # fmt: skip
                    for group in groups:
                        writer.write_table(group, row_group_size=1 << 20)

            out[f"{codec}_s"] = _best(write)
            out[f"{codec}_mb"] = round(path.stat().st_size / 1e6, 1)
    return out


def zstd_levels(warehouse: Path) -> dict[str, float]:
    import pyarrow as pa

    documents = next((warehouse / "documents" / "benchmark_runs").glob("*.jsonl.zst"))
    with pa.input_stream(str(documents), compression="zstd") as stream:
        raw = pa.py_buffer(stream.read(400_000_000))
    chunks = [raw.slice(i, 8_000_000) for i in range(0, raw.size, 8_000_000)]
    out: dict[str, float] = {"documents_mb": round(raw.size / 1e6, 1)}
    for level in (1, -1, -3, -5):
        codec = pa.Codec("zstd", compression_level=level)
        out[f"level_{level}_s"] = _best(lambda c=codec: [c.compress(x) for x in chunks])
        size = sum(codec.compress(x, asbytes=False).size for x in chunks)
        out[f"level_{level}_mb"] = round(size / 1e6, 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--warehouse", type=Path, default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    print(json.dumps({"searchsorted": searchsorted()}), flush=True)
    print(json.dumps({"line_break": line_break()}), flush=True)
    if args.warehouse is not None:
        print(json.dumps({"parquet_statistics": parquet_statistics(args.warehouse)}), flush=True)
        print(json.dumps({"parquet_codecs": parquet_codecs(args.warehouse)}), flush=True)
        print(json.dumps({"zstd_levels": zstd_levels(args.warehouse)}), flush=True)


if __name__ == "__main__":
    main()
