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
from dataclasses import dataclass
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
    """Write the demo upstream folder; returns, truthfully, what its data is."""
    real = None if offline else fetch_upstream_csv()
    cumulative = upstream / CUMULATIVE_FILE
    if real is not None:
        cumulative.parent.mkdir(parents=True, exist_ok=True)
        cumulative.write_bytes(real)
        rows = list(csv.DictReader(io.StringIO(real.decode("utf-8"))))
        source = f"the data file shipped in the liger-kernel {DEMO_VERSION} sdist from PyPI"
    else:
        rows = sample_rows()
        _write_csv(cumulative, rows)
        source = "a generated sample (offline), not real measurements"
    versions = sorted({r["liger_version"] for r in rows}, key=_version_key)
    # Per-commit files, as upstream publishes them: the newest two versions, one folder each.
    commits = []
    for i, version in enumerate(versions[-2:]):
        sha = f"{i + 1:07x}"
        commits.append(f"{sha}-v{version}")
        _write_csv(
            upstream / "benchmarks" / f"{sha}-v{version}" / "benchmark.csv",
            [r for r in rows if r["liger_version"] == version],
        )
    (upstream / COMMITS_LIST).write_text("\n".join(commits) + "\n")
    span = versions[0] if len(versions) == 1 else f"{versions[0]} .. {versions[-1]}"
    return f"{source}: {len(rows):,} rows measured with liger {span}"


def _version_key(v: str) -> tuple[int, Any]:
    from packaging.version import InvalidVersion, Version

    try:
        return (0, Version(v))
    except InvalidVersion:
        return (1, v)


@dataclass(frozen=True)
class Comparison:
    """liger against its baseline on one kernel, GPU and release: what the demo shows."""

    kernel: str
    baseline: str
    gpu: str
    version: str
    x_name: str
    table: Any  # pandas DataFrame: x, liger_us, <baseline>_us, speedup


def compare(warehouse: Path) -> Comparison | None:
    """The kernel with the most points where liger and one other provider measured the same
    workload (full pass, the newest release that has such points); None when none has.

    Chosen from the data, not a list: the kernel the catalog knows that was compared with a
    baseline in the most releases, its most-compared GPU, and that baseline.
    """
    from deltalake import DeltaTable

    # Through the pyarrow dataset: deltalake's to_pandas() goes through to_pyarrow_table(),
    # which can abort the interpreter at exit (docs/reading.md).
    runs = DeltaTable(str(warehouse / "benchmark_runs")).to_pyarrow_dataset().to_table(
        columns=["kernel", "provider", "gpu_name", "metric", "operation_mode", "known_kernel",
                 "liger_version", "release_key", "x_name", "x_value_number", "workload_digest",
                 "latency_ns_median"],
    ).to_pandas()  # fmt: skip
    for column in ("kernel", "provider", "gpu_name", "liger_version", "x_name", "release_key"):
        runs[column] = runs[column].astype(str)
    speed = runs[(runs.metric == "speed") & (runs.operation_mode == "full") & runs.known_kernel]
    speed = speed.dropna(subset=["latency_ns_median"])
    if speed.empty:
        return None
    keys = ["liger_version", "kernel", "gpu_name", "workload_digest"]
    ours = speed.provider.str.startswith("liger")  # liger and its variants (liger_in_place)
    liger = speed[speed.provider == "liger"][keys].drop_duplicates()
    others = speed[~ours].merge(liger, on=keys)
    if others.empty:
        return None
    # The best-known comparison: the kernel compared with a baseline in the most releases;
    # then its newest such release, and there the GPU and baseline with the most points.
    kernel = (
        others.groupby("kernel")["liger_version"].nunique().reset_index()
        .sort_values(["liger_version", "kernel"], ascending=[False, True]).iloc[0].kernel
    )  # fmt: skip
    others = others[others.kernel == kernel]
    newest = others.loc[others.release_key.idxmax(), "liger_version"]
    others = others[others.liger_version == newest]
    speed = speed[speed.liger_version == newest]
    pairs = others.groupby(["gpu_name", "provider"]).size().reset_index(name="n")
    best = pairs.sort_values(["n", "gpu_name", "provider"],
                             ascending=[False, True, True]).iloc[0]  # fmt: skip
    gpu, baseline = best.gpu_name, best.provider
    chosen = speed[(speed.kernel == kernel) & (speed.gpu_name == gpu)
                   & speed.provider.isin(["liger", baseline])]  # fmt: skip
    table = (
        chosen.groupby(["x_value_number", "provider"])["latency_ns_median"]
        .median()
        .div(1e3)
        .round(1)
        .unstack()
        .dropna()
        .rename(columns={"liger": "liger_us", baseline: f"{baseline}_us"})
        .reset_index()
        .rename(columns={"x_value_number": chosen.x_name.iloc[0]})
    )
    table["speedup"] = (table[f"{baseline}_us"] / table["liger_us"]).round(2)
    return Comparison(kernel, baseline, gpu, newest, chosen.x_name.iloc[0], table)


def query_to_copy(warehouse: Path, c: Comparison) -> str:
    """The same comparison in DuckDB over the Delta table, for the reader to paste into Python
    (needs duckdb and deltalake, not kindex-etl)."""
    # Printed for a person, never executed here; the values come from our own warehouse.
    sql = f"""\
SELECT x_value_number AS {c.x_name},
       round(median(latency_ns_median) FILTER (provider = 'liger') / 1e3, 1) AS liger_us,
       round(median(latency_ns_median) FILTER (provider = '{c.baseline}') / 1e3, 1)
           AS {c.baseline}_us
FROM runs
WHERE metric = 'speed' AND operation_mode = 'full' AND kernel = '{c.kernel}'
  AND gpu_name = '{c.gpu}' AND liger_version = '{c.version}'
GROUP BY ALL ORDER BY 1"""  # noqa: S608
    return f"""\
import duckdb
from deltalake import DeltaTable

runs = DeltaTable("{warehouse}/benchmark_runs").to_pyarrow_dataset()
print(duckdb.sql(\"\"\"
{sql}\"\"\").fetchall())"""


def run_demo(workdir: str, *, offline: bool = False) -> int:
    from flows.ingest import run_ingest_flow

    root = Path(workdir).resolve()
    upstream, warehouse = root / "upstream", root / "warehouse"
    offline = offline or settings().offline
    origin = lay_out_upstream(upstream, offline=offline)
    print(f"upstream: {upstream}\n  {origin}")
    summary = run_ingest_flow(upstream=str(upstream), warehouse=str(warehouse))
    print(
        f"warehouse: {warehouse}\n"
        f"  {summary['objects_ingested']} objects, {summary['rows_read']} rows -> "
        f"{summary['runs_written']} runs ({summary['duplicate_rows']} duplicate rows across "
        f"objects, {summary['quarantined_rows']} quarantined)"
    )
    for table in ("benchmark_runs", "benchmark_protocols", "execution_environments", "documents"):
        files = sorted(
            p for p in (warehouse / table).rglob("*") if p.is_file() and "_delta_log" not in p.parts
        )
        print(f"  {table}/: {len(files)} file(s)")
    from kindex_etl.analysis.run import demo_report

    print(f"  report (regressions, comparisons, plots): open {demo_report(str(warehouse))}")
    c = compare(warehouse)
    if c is None:
        print("no kernel has liger and another provider on the same workload: nothing to compare")
        return 0
    print(
        f"\n{c.kernel}: liger against {c.baseline}, full pass, median latency (µs), "
        f"{c.gpu}, liger {c.version} (its newest release with both):"
    )
    print(c.table.to_string(index=False))
    print(f"\nthe same with DuckDB over the Delta table (copy it into Python):\n"
          f"{query_to_copy(warehouse, c)}")  # fmt: skip
    return 0
