#!/usr/bin/env python
"""A GPU re-run campaign, read back from a warehouse: per kernel, noise and difference.

    python scripts/campaign_report.py --warehouse W --campaign ID [--campaign ID2 ...] \
        --out docs/h200-campaign-0.8.5-vs-0.8.4

A campaign's uploads (`reruns/<version>/<campaign>-<version>-r<k>[-s<i>]/benchmark.csv`) give,
for every speed point (kernel, pass, provider, workload) and version, one median per repeat.
Per kernel it writes a page with:

- **A/A spread**: for each point and version, |r1 - r2| / mean of the two medians, in %: what
  the same code on the same GPU in the same hour differs by. Median and 90th percentile over
  points, and the share of points past 10 %.
- **A/B difference**: for each point, the ratio of the candidate's geometric-mean median to the
  baseline's (< 1: the candidate is faster); per provider the geometric mean of those ratios
  over the points, with a 95 % bootstrap interval over points (BOOTSTRAP resamples, fixed
  seed). Providers not named liger* run the same torch code in both versions: their ratio is
  the control, and an interval that excludes 1 for them says how far the host alone moves.
- **Host-bound points**: the time does not follow the work. In each sweep (kernel, pass,
  provider, fixed parameters; x growing), a point is host-bound when its median is within 25 %
  of the median at the sweep's smallest x while its x is at least twice that smallest x; the
  smallest x is host-bound too when the next point is. Such points time the launch path (the
  host's CPU and Python), not the kernel, and their ratios say little about the GPU.

Memory points are deterministic here: the page says how many agree exactly across repeats.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kindex_etl.load import layout
from kindex_etl.load.warehouse import open_warehouse

BOOTSTRAP = 2000
SEED = 20261201
HOST_BOUND_RATIO = 1.25
NOISY_PCT = 10.0
COLUMNS = [
    "kernel",
    "operation_mode",
    "provider",
    "metric",
    "workload_digest",
    "config",
    "x_value",
    "liger_version",
    "value_median",
    "status",
    "source_key",
    "environment_digest",
]
_RUN = re.compile(r"^reruns/(?P<version>[^/]+)/(?P<run>[^/]+)/benchmark\.csv$")
POINT = ["kernel", "operation_mode", "provider", "workload_digest"]


def load(warehouse: str, campaigns: list[str]) -> pd.DataFrame:
    wh = open_warehouse(warehouse, create=False)
    wh.refresh()
    table = wh.read_table(layout.RUNS, COLUMNS)
    if table is None:
        raise SystemExit(f"{warehouse}: no committed runs")
    runs = table.to_pandas()
    parts = runs["source_key"].str.extract(_RUN)
    runs["run_id"] = parts["run"]
    pattern = re.compile(r"^(?P<campaign>.+)-(?P<v>[^-]+)-r(?P<repeat>\d+)(?:-s(?P<shard>\d+))?$")
    meta = runs["run_id"].fillna("").str.extract(pattern)
    runs["campaign"] = meta["campaign"]
    runs["repeat"] = pd.to_numeric(meta["repeat"], errors="coerce")
    runs = runs[runs["campaign"].isin(campaigns) & (runs["status"] == "passed")]
    # Upstream's timer only: device-time runs (device_time.csv, also `speed`) are another
    # protocol, reported by scripts/device_time_report.py.
    runs = runs[~runs["source_key"].str.endswith("/device_time.csv")].copy()
    runs["x"] = pd.to_numeric(runs["x_value"], errors="coerce")
    runs["value"] = runs["value_median"].astype("float64")
    return runs


def _geomean(values: np.ndarray) -> float:
    return float(np.exp(np.mean(np.log(values))))


def aa_spread(speed: pd.DataFrame) -> pd.DataFrame:
    """One row per (campaign, point, version) measured twice or more: the relative spread."""
    g = speed.groupby(["campaign", *POINT, "x", "liger_version"])["value"]
    out = g.agg(["min", "max", "mean", "count"]).reset_index()
    out = out[out["count"] >= 2]
    out["aa_pct"] = (out["max"] - out["min"]) / out["mean"] * 100
    return out


def ab_ratios(speed: pd.DataFrame, candidate: str, baseline: str) -> pd.DataFrame:
    """One row per (campaign, point) both versions measured: candidate / baseline."""
    gm = (
        speed.groupby(["campaign", *POINT, "x", "liger_version"])["value"]
        .agg(lambda s: _geomean(s.to_numpy()))
        .unstack("liger_version")
    )
    if candidate not in gm or baseline not in gm:
        return pd.DataFrame(columns=["campaign", *POINT, "x", "ratio"])
    gm = gm.dropna(subset=[candidate, baseline])
    gm["ratio"] = gm[candidate] / gm[baseline]
    return gm.reset_index()[["campaign", *POINT, "x", "ratio"]]


def interval(ratios: np.ndarray, rng: np.random.Generator) -> tuple[float, float, float]:
    """(geometric mean, 2.5 %, 97.5 %) of the ratios, bootstrapped over points."""
    logs = np.sort(np.log(ratios))  # the interval must not depend on the order rows were read
    if len(logs) == 1:
        return float(ratios[0]), math.nan, math.nan
    draws = rng.choice(logs, size=(BOOTSTRAP, len(logs)), replace=True).mean(axis=1)
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return float(np.exp(logs.mean())), float(np.exp(lo)), float(np.exp(hi))


def host_bound(speed: pd.DataFrame) -> pd.DataFrame:
    """Points whose time does not follow the work (see the module doc), with the rule's inputs."""
    med = speed.groupby(["kernel", "operation_mode", "provider", "config", "x"])["value"].median()
    rows = []
    for (kernel, mode, provider, _), sweep in med.groupby(level=[0, 1, 2, 3]):
        s = sweep.droplevel([0, 1, 2, 3]).sort_index()
        if len(s) < 2:
            continue
        x0, t0 = float(s.index[0]), float(s.iloc[0])
        flags = [float(x) >= 2 * x0 and float(t) <= HOST_BOUND_RATIO * t0 for x, t in s.items()]
        flags[0] = flags[1]
        for (x, t), flag in zip(s.items(), flags, strict=True):
            rows.append(
                {"kernel": kernel, "operation_mode": mode, "provider": provider, "x": x,
                 "median_us": t / 1e3, "host_bound": flag}
            )  # fmt: skip
    return pd.DataFrame(rows)


def _f(v: float, digits: int = 3) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def _x(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


def kernel_page(
    kernel: str,
    runs: pd.DataFrame,
    candidate: str,
    baseline: str,
    rng: np.random.Generator,
) -> tuple[str, dict[str, object]]:
    mine = runs[runs["kernel"] == kernel]
    speed = mine[mine["metric"] == "speed"]
    aa = aa_spread(speed)
    ab = ab_ratios(speed, candidate, baseline)
    hb = host_bound(speed)
    lines = [
        f"# {kernel}: liger-kernel {candidate} against {baseline} on the H200",
        "",
        "*For: whoever weighs a liger release on our GPUs; one kernel's figures from the "
        "campaign.*",
        "",
        f"Campaigns {', '.join(sorted(mine['campaign'].unique()))}; "
        f"{len(speed)} speed runs, {int(mine['metric'].eq('memory').sum())} memory runs; "
        f"passes {', '.join(sorted(speed['operation_mode'].unique()))}. "
        "How these figures are made: [index](index.md).",
        "",
        "## A/A spread (same version, repeat 1 against repeat 2)",
        "",
        "| version | provider | points | median % | p90 % | share > 10 % |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for (version, provider), g in aa.groupby(["liger_version", "provider"]):
        p = g["aa_pct"]
        lines.append(
            f"| {version} | {provider} | {len(p)} | {p.median():.1f} | {p.quantile(0.9):.1f} "
            f"| {(p > NOISY_PCT).mean() * 100:.0f} % |"
        )
    lines += [
        "",
        f"## A/B difference ({candidate} / {baseline}, geometric mean over points, 95 % interval)",
        "",
        "| provider | role | points | ratio | interval | all points | host-bound left out |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    summary: dict[str, object] = {"kernel": kernel}
    bound = hb[hb["host_bound"]] if not hb.empty else hb
    bound_keys = {(r.operation_mode, r.provider, r.x) for r in bound.itertuples()}
    for provider, g in ab.groupby("provider"):
        role = "under test" if str(provider).startswith("liger") else "control"
        ratio, lo, hi = interval(g["ratio"].to_numpy(), rng)
        keep = g[
            [
                (m, provider, x) not in bound_keys
                for m, x in zip(g["operation_mode"], g["x"], strict=True)
            ]
        ]
        gpu_only = interval(keep["ratio"].to_numpy(), rng) if len(keep) else (math.nan,) * 3
        lines.append(
            f"| {provider} | {role} | {len(g)} | {_f(ratio)} | {_f(lo)} to {_f(hi)} "
            f"| {_f(g['ratio'].min())} to {_f(g['ratio'].max())} "
            f"| {_f(gpu_only[0])} ({_f(gpu_only[1])} to {_f(gpu_only[2])}, {len(keep)} points) |"
        )
        if role == "under test" and "ratio" not in summary:
            summary.update(ratio=ratio, lo=lo, hi=hi, provider=provider)
    aa_median = float(aa["aa_pct"].median()) if len(aa) else math.nan
    summary["aa_median_pct"] = aa_median
    summary["aa_share_noisy"] = float((aa["aa_pct"] > NOISY_PCT).mean()) if len(aa) else math.nan
    summary["host_bound"] = int(bound.shape[0]) if not hb.empty else 0
    summary["speed_points"] = int(hb.shape[0]) if not hb.empty else 0
    lines += [
        "",
        "## Host-bound points (time within 25 % of the smallest x's while x grew 2x or more)",
        "",
    ]
    if bound.empty:
        lines.append("None: every sweep's time grows with its work.")
    else:
        lines += ["| pass | provider | x | median µs |", "| --- | --- | --- | --- |"]
        for r in bound.sort_values(["operation_mode", "provider", "x"]).itertuples():
            lines.append(f"| {r.operation_mode} | {r.provider} | {_x(r.x)} | {r.median_us:.1f} |")
    memory = mine[mine["metric"] == "memory"]
    if len(memory):
        per = memory.groupby(["campaign", *POINT, "x", "liger_version"])["value"].nunique()
        lines += [
            "",
            f"Memory: {int((per == 1).sum())} of {len(per)} (point, version) pairs give the same "
            "peak bytes in every repeat.",
        ]
    return "\n".join(lines) + "\n", summary


def index_page(summaries: list[dict[str, object]], candidate: str, baseline: str) -> str:
    lines = [
        f"# liger-kernel {candidate} against {baseline} on the lent H200: the campaign",
        "",
        "*For: whoever weighs a liger release on our GPUs: the campaign's figures, per kernel.*",
        "",
        "Made by `scripts/campaign_report.py` from the warehouse that "
        "`tests/fixtures/h200_campaign_0.8.5_vs_0.8.4/upstream` ingests into (the test "
        "`tests/gpu/test_campaign_fixture.py` regenerates these pages and compares). "
        "How it was run, the rules behind each column, and what it cost: "
        "[docs/reruns.md](../reruns.md#the-h200-campaign-of-085-against-084).",
        "",
        "| kernel | liger ratio | 95 % interval | A/A median % | A/A share > 10 % "
        "| host-bound points |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for s in summaries:
        k = s["kernel"]
        lines.append(
            f"| [{k}]({k}.md) | {_f(s.get('ratio'))} | {_f(s.get('lo'))} to {_f(s.get('hi'))} "
            f"| {_f(s['aa_median_pct'], 1)} | {_f(100 * s['aa_share_noisy'], 0)} % "  # type: ignore[operator]
            f"| {s['host_bound']} of {s['speed_points']} |"
        )
    return "\n".join(lines) + "\n"


def write_pages(runs: pd.DataFrame, out: Path, candidate: str, baseline: str) -> dict[str, str]:
    """{file name: markdown} for the index and each kernel; written under `out`."""
    pages: dict[str, str] = {}
    summaries = []
    for kernel in sorted(runs["kernel"].unique()):
        # One generator per kernel, seeded by its name: a page does not depend on the others.
        rng = np.random.default_rng([SEED, *kernel.encode()])
        text, summary = kernel_page(kernel, runs, candidate, baseline, rng)
        pages[f"{kernel}.md"] = text
        summaries.append(summary)
    pages["index.md"] = index_page(summaries, candidate, baseline)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in pages.items():
        (out / name).write_text(text, encoding="utf-8")
    return pages


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--warehouse", required=True)
    p.add_argument("--campaign", action="append", required=True, help="repeatable")
    p.add_argument("--candidate", default="0.8.5")
    p.add_argument("--baseline", default="0.8.4")
    p.add_argument("--out", required=True, help="folder for index.md and <kernel>.md")
    args = p.parse_args(argv)
    runs = load(args.warehouse, args.campaign)
    if runs.empty:
        raise SystemExit(f"no runs of campaigns {args.campaign}")
    pages = write_pages(runs, Path(args.out), args.candidate, args.baseline)
    sys.stdout.write(pages["index.md"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
