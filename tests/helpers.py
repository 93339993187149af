"""Helpers shared by the tests: upstream rows, CSV files, and reading a warehouse back."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from kindex_etl.contracts.upstream import UPSTREAM_COLUMNS

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# The real upstream sample, committed (tests/fixtures/upstream-sample/README.md): the tests
# need nothing outside the repository.
SAMPLE_GZ = FIXTURES / "upstream-sample" / "all_benchmark_data.csv.gz"


def _sample_csv() -> Path:
    """The committed sample as the plain CSV upstream publishes, written once per content."""
    data = gzip.decompress(SAMPLE_GZ.read_bytes())
    name = f"kindex-tests-sample-{hashlib.sha256(data).hexdigest()[:16]}.csv"
    path = Path(tempfile.gettempdir()) / name
    if not path.is_file() or path.stat().st_size != len(data):
        part = path.with_suffix(f".{os.getpid()}.part")
        part.write_bytes(data)
        os.replace(part, path)  # whole or absent, whichever test process reads it
    return path


SAMPLE_CSV = _sample_csv()

SEED_LINE = (
    "megatron_rms_norm,torch,full,speed,ms,H,hidden size,2048,0.10864000022411346,"
    '0.10764160007238388,0.1096000000834465,"{""S"": 4096, ""B"": 1}",NVIDIA H100 80GB HBM3,'
    "2026-06-10 21:03:42,0.8.0"
)


def seed_row() -> dict[str, str]:
    return dict(zip(UPSTREAM_COLUMNS, next(csv.reader(io.StringIO(SEED_LINE))), strict=True))


def golden_bundle() -> dict[str, Any]:
    return json.loads((FIXTURES / "golden-bundle.json").read_text())


def row(**overrides: str) -> dict[str, str]:
    """The seed row with some fields changed."""
    return {**seed_row(), **overrides}


def write_csv(
    path: Path, rows: Iterable[Mapping[str, str]], header: Iterable[str] = UPSTREAM_COLUMNS
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(header))
        writer.writeheader()
        writer.writerows(rows)
    return path


def read_jsonl_zst(path: Path) -> list[dict[str, Any]]:
    with pa.CompressedInputStream(pa.OSFile(str(path)), "zstd") as stream:
        data = stream.read()
    return [json.loads(line) for line in data.decode().splitlines() if line]


def documents(warehouse: Path, table: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted((warehouse / "documents" / table).glob("*.jsonl.zst")):
        out.extend(read_jsonl_zst(path))
    return out


def table(warehouse: Path, name: str) -> pa.Table:
    return ds.dataset(warehouse / name, format="parquet", partitioning="hive").to_table()


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under root with the sha256 of its bytes."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
