#!/usr/bin/env python
"""Set our GPU re-run's numbers beside upstream's for the same workloads, from a warehouse.

    python scripts/compare_rerun.py --warehouse WAREHOUSE \
        [--kernel megatron_rms_norm] [--gpu "NVIDIA H200"] [--version 0.8.5] \
        [--base-gpu "NVIDIA H100 80GB HBM3"] [--base-version 0.8.0] [--csv out.csv]

"Ours" are runs whose ExecutionEnvironment records software (what our re-runs upload);
"base" are upstream runs (software `{}`). Rows pair up on kernel, timed pass, provider, metric
and workload digest (same kernel, shape and dtype), so only identical workloads are compared.
When the warehouse holds several re-runs of ours, the newest is "ours" and `repeat` gives each
earlier run's median over the newest one's (run-to-run drift).

Columns: medians (speed in ms, memory in MiB), the p20-p80 spread as % of the median, the
ratio ours/base (< 1: ours faster or smaller), and `noisy` when a spread or the run-to-run
drift passes --noisy-pct (default 10 %): such points are launch-bound or host-bound and their
ratio says little about the GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kindex_etl.ingestion.run import open_warehouse
from kindex_etl.load import layout

KEY = ["kernel", "operation_mode", "provider", "metric", "workload_digest"]
RUN_COLUMNS = [
    *KEY,
    "x_value",
    "gpu_name",
    "liger_version",
    "observed_at",
    "value_unit",
    "value_median",
    "value_p20",
    "value_p80",
    "environment_digest",
    "status",
]
SCALE = {"ns": 1e6, "bytes": 2**20}  # shown as ms and MiB, as upstream writes them
SHOWN_UNIT = {"ns": "ms", "bytes": "MiB"}


def load(warehouse: str) -> tuple[pd.DataFrame, dict[str, dict[str, str]]]:
    wh = open_warehouse(warehouse)
    wh.refresh()
    runs = wh.read_table(layout.RUNS, RUN_COLUMNS)
    envs = wh.read_table(layout.ENVIRONMENTS, ["digest", "software"])
    if runs is None or envs is None:
        raise SystemExit(f"{warehouse}: no committed runs")
    software = {
        d: json.loads(s) if s else {}
        for d, s in zip(
            envs.column("digest").to_pylist(), envs.column("software").to_pylist(), strict=True
        )
    }
    return runs.to_pandas(), software


def compare(
    runs: pd.DataFrame,
    software: dict[str, dict[str, str]],
    *,
    kernels: list[str] | None,
    gpu: str,
    version: str,
    base_gpu: str,
    base_version: str,
    noisy_pct: float,
) -> pd.DataFrame:
    runs = runs[runs["status"] == "passed"].copy()
    if kernels:
        runs = runs[runs["kernel"].isin(kernels)]
    runs["ours_env"] = runs["environment_digest"].map(lambda d: bool(software.get(d)))
    scale = runs["value_unit"].map(SCALE).fillna(1.0)
    for col in ("value_median", "value_p20", "value_p80"):
        runs[col] = runs[col].astype("float64") / scale
    runs["spread_pct"] = (runs["value_p80"] - runs["value_p20"]) / runs["value_median"] * 100

    ours = runs[runs["ours_env"] & (runs["gpu_name"] == gpu) & (runs["liger_version"] == version)]
    base = runs[
        ~runs["ours_env"] & (runs["gpu_name"] == base_gpu) & (runs["liger_version"] == base_version)
    ]
    if ours.empty:
        raise SystemExit(f"no re-run rows of {version} on {gpu} (with software recorded)")
    ours = ours.sort_values("observed_at")
    latest = ours.groupby(KEY, as_index=False).last()
    earlier = ours.merge(
        latest[[*KEY, "observed_at", "value_median"]], on=KEY, suffixes=("", "_new")
    )
    earlier = earlier[earlier["observed_at"] < earlier["observed_at_new"]]
    earlier["drift"] = earlier["value_median"] / earlier["value_median_new"]
    repeat = (
        earlier.groupby(KEY)["drift"]
        .agg(lambda s: " ".join(f"{v:.2f}" for v in s))
        .rename("repeat")
        .reset_index()
    )
    base = base.sort_values("observed_at").groupby(KEY, as_index=False).last()
    table = latest.merge(base, on=KEY, how="left", suffixes=("", "_base"))
    table = table.merge(repeat, on=KEY, how="left")
    table["ratio"] = table["value_median"] / table["value_median_base"]
    max_drift = earlier.groupby(KEY)["drift"].agg(lambda s: (s - 1).abs().max() * 100)
    table = table.merge(max_drift.rename("drift_pct").reset_index(), on=KEY, how="left")
    table["noisy"] = (
        (table["spread_pct"] > noisy_pct)
        | (table["spread_pct_base"] > noisy_pct)
        | (table["drift_pct"].fillna(0) > noisy_pct)
    )
    table["unit"] = table["value_unit"].map(SHOWN_UNIT).fillna(table["value_unit"])
    table["x"] = pd.to_numeric(table["x_value"], errors="coerce")
    table = table.sort_values(["kernel", "metric", "operation_mode", "provider", "x"])
    return table


def markdown(table: pd.DataFrame, *, gpu: str, base_gpu: str) -> str:
    def f(v: float, digits: int = 4) -> str:
        return "" if pd.isna(v) else f"{v:.{digits}g}"

    def pct(v: float) -> str:
        return "" if pd.isna(v) else f"{v:.1f}"

    head = (
        f"| kernel | pass | provider | metric | x | {base_gpu} | spread % | {gpu} | spread % "
        "| ratio | repeat | noisy |"
    )
    lines = [head, "|" + " --- |" * 12]
    for r in table.itertuples():
        lines.append(
            f"| {r.kernel} | {r.operation_mode} | {r.provider} | {r.metric} ({r.unit}) "
            f"| {r.x_value} | {f(r.value_median_base)} | {pct(r.spread_pct_base)} "
            f"| {f(r.value_median)} | {pct(r.spread_pct)} | {f(r.ratio, 3)} "
            f"| {r.repeat if isinstance(r.repeat, str) else ''} | {'yes' if r.noisy else ''} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--warehouse", required=True)
    p.add_argument("--kernel", action="append", help="repeatable; default: every kernel")
    p.add_argument("--gpu", default="NVIDIA H200")
    p.add_argument("--version", default="0.8.5")
    p.add_argument("--base-gpu", default="NVIDIA H100 80GB HBM3")
    p.add_argument("--base-version", default="0.8.0")
    p.add_argument("--noisy-pct", type=float, default=10.0)
    p.add_argument("--only-matched", action="store_true", help="drop rows with no base figure")
    p.add_argument("--csv", default=None, help="also write the table as CSV")
    args = p.parse_args(argv)
    runs, software = load(args.warehouse)
    table = compare(
        runs,
        software,
        kernels=args.kernel,
        gpu=args.gpu,
        version=args.version,
        base_gpu=args.base_gpu,
        base_version=args.base_version,
        noisy_pct=args.noisy_pct,
    )
    if args.only_matched:
        table = table[table["value_median_base"].notna()]
    if args.csv:
        table.drop(columns=["x"]).to_csv(args.csv, index=False)
    sys.stdout.write(markdown(table, gpu=args.gpu, base_gpu=args.base_gpu))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
