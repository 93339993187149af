"""Micro-benchmarks behind the choices in the ingest's hot paths (CPU seconds, best of 3).

    python benchmarks/micro_ingest.py                       # index lookups, line-break check
    python benchmarks/micro_ingest.py --warehouse DIR       # also Parquet statistics and zstd
                                                            # levels on that warehouse's runs

* `searchsorted`: 1M run keys looked up in 2M, in their own order and sorted (why
  `RunIndex.classify` looks up in key order).
* `line_break`: the reader's check of 40 MB of value bytes: two comparisons, or one `min()`
  first (`extract.read._may_break`).
* `block_sorts`: per 20k-row block (ms, 5,000 distinct keys), what the normalizing thread did
  before stop 26 and does now: grouping rows (`np.unique` / `columnar._groups`), the run
  index's argsort (stable / not), per-descriptor arrays (made from a list / kept), the block's
  descriptor ids (`np.unique` / `np.bincount`).
* `csv_read_ahead`: reads of 6 MiB blocks Arrow's CSV reader has made one second after its
  first batch, on 300 MB of CSV, without and with `extract.readahead.Gate`.
* `spill_peak`: MiB allocated at the peak (tracemalloc) while the run index spills a frozen
  chunk of `FROZEN_RUNS` keys: its Bloom filter built over every key at once (before stop 27)
  and slice by slice (`dedup._Spilled`).
* `parquet_writer_memory`: what an open `pyarrow.parquet.ParquetWriter` holds. Its footer:
  glibc's heap in use (`mallinfo2`) after 1,000 row groups of 21 string columns (why
  held-back rows are gathered into row groups, `writers.RowGroupWriter`). Its last row group:
  Arrow's pool after one row group of a column with a 32k-entry dictionary, and after an
  empty row group ends it.
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


def block_sorts() -> dict[str, float]:
    import pyarrow as pa  # noqa: F401  (imported before timing: _groups uses it)

    from kindex_etl.normalize.columnar import _groups

    rng = np.random.default_rng(0)
    n, per_block = 20_000, 100
    combined = rng.integers(0, 10**12, 5_000)[rng.integers(0, 5_000, n)]
    keys = rng.integers(0, 2**63, n).astype(np.uint64)
    as_list = list(range(49_152))
    as_array = np.asarray(as_list, dtype=np.uint64)
    ids = rng.integers(0, 49_152, n)

    def ms(fn: Callable[[], object]) -> float:
        return round(_best(lambda: [fn() for _ in range(per_block)]) / per_block * 1000, 3)

    return {
        "group_unique_ms": ms(lambda: np.unique(combined, return_index=True, return_inverse=True)),
        "group_hash_ms": ms(lambda: _groups(combined)),
        "argsort_stable_ms": ms(lambda: np.argsort(keys, kind="stable")),
        "argsort_ms": ms(lambda: np.argsort(keys)),
        "series_from_list_ms": ms(lambda: np.asarray(as_list, dtype=np.uint64)[ids]),
        "series_from_array_ms": ms(lambda: as_array[ids]),
        "ids_unique_ms": ms(lambda: np.unique(ids).tolist()),
        "ids_bincount_ms": ms(lambda: np.flatnonzero(np.bincount(ids)).tolist()),
    }


class _CountingReads:
    def __init__(self, path: Path) -> None:
        self._fh = path.open("rb")
        self.reads = 0

    def read(self, size: int = -1) -> bytes:
        self.reads += 1
        return self._fh.read(size)

    def close(self) -> None:
        self._fh.close()

    @property
    def closed(self) -> bool:
        return self._fh.closed


def csv_read_ahead() -> dict[str, int]:
    import pyarrow.csv as pcsv

    from kindex_etl.extract.read import BLOCK_SIZE, READ_AHEAD_BLOCKS
    from kindex_etl.extract.readahead import Gate

    options = pcsv.ReadOptions(use_threads=False, block_size=BLOCK_SIZE)
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.csv"
        with path.open("wb") as fh:
            fh.write(b"a,b\n")
            line = b"%d," + b"x" * 90 + b"\n"
            for start in range(0, 3_000_000, 100_000):
                fh.write(b"".join(line % i for i in range(start, start + 100_000)))
        bare = _CountingReads(path)
        pcsv.open_csv(bare, read_options=options).read_next_batch()
        time.sleep(1)
        result["reads_without_gate"] = bare.reads
        gated = _CountingReads(path)
        gate = Gate(gated, READ_AHEAD_BLOCKS)  # type: ignore[arg-type]
        with gate.taking():
            reader = pcsv.open_csv(gate, read_options=options)
        with gate.taking():
            reader.read_next_batch()
        time.sleep(1)
        result["reads_with_gate"] = gated.reads
        gate.close()
    return result


def spill_peak() -> dict[str, float]:
    import tracemalloc

    from kindex_etl.normalize import dedup

    rng = np.random.default_rng(3)
    keys = np.sort(rng.integers(0, 1 << 62, dedup.FROZEN_RUNS, dtype=np.uint64))
    fps = np.zeros(len(keys), dtype=np.uint32)

    def whole() -> None:
        hashed, bits = dedup._hashed(keys)
        words = np.zeros(len(keys) * dedup._BLOOM_BITS_PER_RUN // 64, dtype=np.uint64)
        word = ((hashed >> np.uint64(32)) * np.uint64(len(words))) >> np.uint64(32)
        np.bitwise_or.at(words, word, bits)

    def peak(fn: Callable[[], object]) -> float:
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        top = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return round((top - base) / 2**20, 1)

    return {"whole_mib": peak(whole), "sliced_mib": peak(lambda: dedup._Spilled(keys, fps))}


def parquet_writer_memory() -> dict[str, float]:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from ingest_memory import _glibc_mib  # this folder: the script's own

    from kindex_etl.load.writers import PARQUET_OPTIONS

    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        n = 2_500
        small = pa.table({f"s{i}": [f"v{i}-{k}-" + "z" * 30 for k in range(n)] for i in range(21)})
        writer = pq.ParquetWriter(Path(tmp, "f.parquet"), small.schema, **PARQUET_OPTIONS)
        before = _glibc_mib()["glibc_in_use_mib"]
        for _ in range(1_000):
            writer.write_table(small, row_group_size=1 << 20)
        result["footer_1000_row_groups_mib"] = round(_glibc_mib()["glibc_in_use_mib"] - before, 1)
        writer.close()

        rng = np.random.default_rng(0)
        words = pa.array([f"value-{i}-" + "y" * 60 for i in range(32_768)])
        column = pa.DictionaryArray.from_arrays(pa.array(rng.integers(0, 32_768, 65_536)), words)
        table = pa.table({"d": column})
        writer = pq.ParquetWriter(Path(tmp, "g.parquet"), table.schema, **PARQUET_OPTIONS)
        before = pa.total_allocated_bytes()
        writer.write_table(table, row_group_size=1 << 20)
        result["last_row_group_mib"] = round((pa.total_allocated_bytes() - before) / 2**20, 1)
        writer.write_table(table.slice(0, 0), row_group_size=1 << 20)
        result["after_empty_row_group_mib"] = round(
            (pa.total_allocated_bytes() - before) / 2**20, 1
        )
        writer.close()
    return result


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
    print(json.dumps({"block_sorts": block_sorts()}), flush=True)
    print(json.dumps({"csv_read_ahead": csv_read_ahead()}), flush=True)
    print(json.dumps({"spill_peak": spill_peak()}), flush=True)
    print(json.dumps({"parquet_writer_memory": parquet_writer_memory()}), flush=True)
    if args.warehouse is not None:
        print(json.dumps({"parquet_statistics": parquet_statistics(args.warehouse)}), flush=True)
        print(json.dumps({"parquet_codecs": parquet_codecs(args.warehouse)}), flush=True)
        print(json.dumps({"zstd_levels": zstd_levels(args.warehouse)}), flush=True)


if __name__ == "__main__":
    main()
