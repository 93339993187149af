"""`kindex-etl demo`: the main job end to end on local folders, offline-safe.

It lays out an upstream folder the way Liger-Kernel publishes (`benchmark/data/` cumulative
file plus `benchmarks/<sha>-<tag>/benchmark.csv` and `benchmarks/commits.txt`), ingests it
through the Prefect flow, and answers one query with pandas, reading the warehouse's Parquet.
"""

from __future__ import annotations

import csv
import io
import json
import tarfile
from pathlib import Path
from typing import Any

from kindex_etl.config import settings
from kindex_etl.contracts.upstream import COMMITS_LIST, CUMULATIVE_FILE, UPSTREAM_COLUMNS

DEMO_VERSION = "0.8.5"
SAMPLE_GPUS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB")
SAMPLE_RELEASES = (
    ("3f1c2ab", "0.8.0", "2026-06-10 21:03:42"),
    ("9d8e7f6", "0.8.1", "2026-07-02 10:15:00"),
)


def fetch_upstream_csv(version: str = DEMO_VERSION, timeout: float = 15.0) -> bytes | None:
    """`benchmark/data/all_benchmark_data.csv` from that release's sdist on PyPI, or None.

    The sdist comes through the GPU re-run's harness fetch: PyPI's Simple API, sha256-checked,
    cached.
    """
    from kindex_etl.gpu.harness import HarnessError, fetch_sdist

    try:
        sdist = fetch_sdist(version, timeout=timeout)
        with tarfile.open(sdist.path, mode="r:gz") as tar:
            for member in tar.getmembers():
                if member.name.endswith(CUMULATIVE_FILE) and member.isfile():
                    extracted = tar.extractfile(member)
                    return extracted.read() if extracted else None
    except (HarnessError, OSError, tarfile.TarError):
        return None
    return None


def sample_rows() -> list[dict[str, str]]:
    """A small generated upstream file: two kernels, three providers, two GPUs, two releases."""
    rows = []
    for _sha, version, ts in SAMPLE_RELEASES:
        for gpu_i, gpu in enumerate(SAMPLE_GPUS):
            for kernel, providers, config in (
                ("megatron_rms_norm", ("liger", "torch"), {"S": 4096, "B": 1}),
                (
                    "rms_norm",
                    ("liger", "huggingface"),
                    {"M": 2048, "dtype": "torch.bfloat16", "eps": 1e-06},
                ),
            ):
                for p_i, provider in enumerate(providers):
                    for mode_i, mode in enumerate(("forward", "backward", "full")):
                        for h in (1024, 2048, 4096, 8192):
                            base = h / 20000 * (1 + mode_i) * (1.6 if provider != "liger" else 1.0)
                            base *= 1.4 if gpu_i else 1.0
                            for metric, unit, y in (
                                ("speed", "ms", base),
                                ("memory", "MB", h / 64 * (2 + p_i)),
                            ):
                                rows.append(
                                    {
                                        "kernel_name": kernel,
                                        "kernel_provider": provider,
                                        "kernel_operation_mode": mode,
                                        "metric_name": metric,
                                        "metric_unit": unit,
                                        "x_name": "H",
                                        "x_label": "hidden size",
                                        "x_value": str(h),
                                        "y_value_50": repr(y),
                                        "y_value_20": repr(y * 0.99),
                                        "y_value_80": repr(y * 1.01),
                                        "extra_benchmark_config_str": json.dumps(config),
                                        "gpu_name": gpu,
                                        "timestamp": ts,
                                        "liger_version": version,
                                    }
                                )
    return rows


def _write_csv(path: Path, rows: list[dict[str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(UPSTREAM_COLUMNS))
        writer.writeheader()
        writer.writerows(rows)


def lay_out_upstream(upstream: Path, *, offline: bool) -> str:
    """Write the demo upstream folder; returns where its data came from."""
    real = None if offline else fetch_upstream_csv()
    cumulative = upstream / CUMULATIVE_FILE
    if real is not None:
        cumulative.parent.mkdir(parents=True, exist_ok=True)
        cumulative.write_bytes(real)
        rows = list(csv.DictReader(io.StringIO(real.decode("utf-8"))))
        origin = f"liger-kernel {DEMO_VERSION} sdist from PyPI"
    else:
        rows = sample_rows()
        _write_csv(cumulative, rows)
        origin = "generated sample (offline)"
    # Per-commit files, as upstream publishes them: the newest two versions, one folder each.
    versions = sorted({r["liger_version"] for r in rows}, key=_version_key)[-2:]
    commits = []
    for i, version in enumerate(versions):
        sha = f"{i + 1:07x}"
        commits.append(f"{sha}-v{version}")
        _write_csv(
            upstream / "benchmarks" / f"{sha}-v{version}" / "benchmark.csv",
            [r for r in rows if r["liger_version"] == version],
        )
    (upstream / COMMITS_LIST).write_text("\n".join(commits) + "\n")
    return origin


def _version_key(v: str) -> tuple[int, Any]:
    from packaging.version import InvalidVersion, Version

    try:
        return (0, Version(v))
    except InvalidVersion:
        return (1, v)


def example_query(warehouse: Path) -> str:
    """Median latency per provider for full passes on each GPU: plain pandas over Parquet."""
    import pandas as pd

    runs = pd.read_parquet(
        warehouse / "benchmark_runs",
        columns=[
            "kernel",
            "provider",
            "gpu_name",
            "metric",
            "operation_mode",
            "value_median",
            "liger_version",
        ],
    )
    speed = runs[(runs.metric == "speed") & (runs.operation_mode == "full")]
    newest = max(speed.liger_version.astype(str).unique(), key=_version_key)
    top = (
        speed[speed.liger_version.astype(str) == newest]
        .groupby(["kernel", "gpu_name", "provider"], observed=True)["value_median"]
        .median()
        .div(1e3)
        .round(1)
        .rename("median_us")
        .reset_index()
        .sort_values(["kernel", "gpu_name", "median_us"])
        .head(12)
    )
    return f"median latency (µs) of full passes, liger {newest}:\n{top.to_string(index=False)}"


def run_demo(workdir: str, *, offline: bool = False) -> int:
    from flows.ingest import ingest_flow

    root = Path(workdir).resolve()
    upstream, warehouse = root / "upstream", root / "warehouse"
    offline = offline or settings().offline
    origin = lay_out_upstream(upstream, offline=offline)
    print(f"upstream: {upstream} ({origin})")
    summary = ingest_flow(upstream=str(upstream), warehouse=str(warehouse))
    print(
        f"warehouse: {warehouse}\n"
        f"  {summary['objects_ingested']} objects, {summary['rows_read']} rows -> "
        f"{summary['runs_written']} runs ({summary['duplicate_rows']} duplicate rows across "
        f"objects, {summary['quarantined_rows']} quarantined)"
    )
    for table in ("benchmark_runs", "benchmark_protocols", "execution_environments", "documents"):
        files = sorted(p for p in (warehouse / table).rglob("*") if p.is_file())
        print(f"  {table}/: {len(files)} file(s)")
    print(example_query(warehouse))
    return 0
