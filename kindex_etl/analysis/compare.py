"""The comparisons people ask for, on release points (one per series and release).

Each comparison pairs points that differ in exactly one thing (the release, the provider, the
GPU) and agree on everything else that defines a series, then summarises the pairs of a group:
the geometric mean ratio B / A with a 95 % interval. Per pair, d = ln(B) - ln(A) with standard
error sqrt(sigma_A^2 + sigma_B^2) from the noise model; over n pairs the interval is a t
interval whose standard error is the larger of the pairs' spread and their own noise
(sqrt(var(d) / n) or sqrt(mean(se^2) / n)). A group whose interval holds 1, or whose ratio is
within the minimum effect of 1, is "no difference detectable". Memory is exact: its interval
is the spread of the pairs' ratios alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from ..catalog import Catalog, default_catalog
from .calibration import TIMER

SAME_SERIES = ["kernel", "operation_mode", "metric", "workload_digest", "protocol_digest"]
# The origin too: a contributor's row is never compared with a CI run as if one machine.
MACHINE = ["gpu_product", "gpu_form_factor", "software_class", "origin"]
NO_DIFFERENCE = "no difference detectable"


def _pairs(points: pd.DataFrame, side: str, a: Any, b: Any, match: Sequence[str]) -> pd.DataFrame:
    cols = [*match, "log_value", "sigma", "deterministic", "x_value", "workload_slug", "value"]
    left = points[points[side] == a][cols]
    right = points[points[side] == b][cols]
    return left.merge(right, on=list(match), suffixes=("_a", "_b"), how="inner")


def _summaries(pairs: pd.DataFrame, group: Sequence[str], min_effect: float) -> pd.DataFrame:
    """Per group of pairs: n, ratio, its interval and the verdict, all groups at once (one
    groupby, one t quantile per distinct n: per group in Python, this was a tenth of a 5M-run
    analysis)."""
    d = pairs["log_value_b"].to_numpy(float) - pairs["log_value_a"].to_numpy(float)
    se2 = pairs["sigma_a"].to_numpy(float) ** 2 + pairs["sigma_b"].to_numpy(float) ** 2
    exact_pair = pairs["deterministic_a"].to_numpy(bool) & pairs["deterministic_b"].to_numpy(bool)
    frame = pairs[list(group)].assign(_d=d, _se2=se2, _exact=exact_pair)
    agg = frame.groupby(list(group), dropna=False, sort=True, observed=True).agg(
        pairs=("_d", "size"),
        mean=("_d", "mean"),
        sd=("_d", "std"),
        se2=("_se2", "mean"),
        exact=("_exact", "all"),
    )
    n = agg["pairs"].to_numpy(np.int64)
    mean = agg["mean"].to_numpy(float)
    noise_se = np.sqrt(agg["se2"].to_numpy(float) / n)
    several = n >= 2
    spread_se = np.where(several, agg["sd"].to_numpy(float), 0.0) / np.sqrt(n)
    err = np.where(several, np.maximum(spread_se, noise_se), noise_se)
    quantile = {k: float(stats.t.ppf(0.975, k - 1)) for k in np.unique(n[several]).tolist()}
    q = np.array([quantile.get(k, 1.959963984540054) for k in n.tolist()], float)
    ratio = np.exp(mean)
    low, high = np.exp(mean - q * err), np.exp(mean + q * err)
    exact = agg["exact"].to_numpy(bool)
    single = exact & (n == 1)
    low, high = np.where(single, ratio, low), np.where(single, ratio, high)
    differs = ((low > 1) | (high < 1) | (exact & (ratio != 1))) & (
        exact | (np.abs(ratio - 1) >= min_effect)
    )
    verdict = np.where(differs, np.where(ratio > 1, "higher", "lower"), NO_DIFFERENCE)
    return pd.DataFrame(
        {"pairs": n, "ratio": ratio, "ratio_low": low, "ratio_high": high, "verdict": verdict},
        index=agg.index,
    )


def _compare(
    points: pd.DataFrame,
    side: str,
    a: Any,
    b: Any,
    match: Sequence[str],
    group: Sequence[str],
    min_effect: float,
) -> list[dict[str, Any]]:
    if points.empty:
        return []
    pairs = _pairs(points, side, a, b, match)
    if pairs.empty:
        return []
    out = []
    summaries = _summaries(pairs, group, min_effect)
    columns = [summaries[c].tolist() for c in summaries.columns]
    for key, *values in zip(summaries.index.tolist(), *columns, strict=True):
        row = dict(zip(group, key if isinstance(key, tuple) else (key,), strict=True))
        row = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
        summary = dict(zip(summaries.columns, values, strict=True))
        out.append({**row, side + "_a": a, side + "_b": b, **summary})
    return out


def _one_timer(points: pd.DataFrame) -> pd.DataFrame:
    """Upstream's timer's points only (release points' `timer`): pooled with our re-runs'
    device time, one summary would average two instruments' answers."""
    if points.empty or "timer" not in points:
        return points
    return points[points["timer"].fillna(TIMER) == TIMER]


def _per_release(points: pd.DataFrame) -> pd.DataFrame:
    """One point per series and release label. Points are commits where commits are known, and
    every commit on main between two tags carries the earlier tag's label: the release's own
    point is the first of its label in history order (the tagged commit)."""
    points = _one_timer(points)
    if points.empty or "release_rank" not in points or "series_key" not in points:
        return points
    ordered = points.sort_values("release_rank", kind="stable")
    return ordered.drop_duplicates(subset=["series_key", "liger_version"], keep="first")


def compare_releases(
    points: pd.DataFrame, a: str, b: str, *, min_effect: float = 0.05
) -> list[dict[str, Any]]:
    """Release b against release a, per kernel, GPU, pass, metric and provider."""
    match = [*SAME_SERIES, "provider", *MACHINE]
    group = ["kernel", *MACHINE, "metric", "operation_mode", "provider"]
    return _compare(_per_release(points), "liger_version", a, b, match, group, min_effect)


def compare_gpus(
    points: pd.DataFrame, release: str, a: str, b: str, *, min_effect: float = 0.05
) -> list[dict[str, Any]]:
    """GPU b against GPU a (gpu_name) for one release, per kernel, pass, metric, provider."""
    same = _per_release(points[points["liger_version"] == release])
    match = [*SAME_SERIES, "provider", "software_class"]
    group = ["kernel", "metric", "operation_mode", "provider"]
    return _compare(same, "gpu_name", a, b, match, group, min_effect)


def compare_baseline(
    points: pd.DataFrame, *, catalog: Catalog | None = None, min_effect: float = 0.05
) -> list[dict[str, Any]]:
    """Liger against its baseline provider (catalog data), same workload, release and machine.

    `ratio` is liger / baseline (below 1: liger is faster or smaller); `speedup` its inverse.
    """
    catalog = catalog or default_catalog()
    points = _one_timer(points)
    out: list[dict[str, Any]] = []
    # Liger and its baseline measured at the same commit (where commits are known).
    same_point = ["commit_sha"] if "commit_sha" in points else []
    match = [*SAME_SERIES, "liger_version", *same_point, *MACHINE]
    group = ["kernel", *MACHINE, "liger_version", "metric", "operation_mode"]
    for kernel, frame in points.groupby("kernel", sort=True):
        info = catalog.kernel(str(kernel))
        if info is None or not info.baseline:
            continue
        present = set(frame["provider"])
        for baseline in info.baseline:
            if baseline not in present or info.liger_provider not in present:
                continue
            for row in _compare(
                frame, "provider", baseline, info.liger_provider, match, group, min_effect
            ):
                row["baseline"] = baseline
                row["speedup"] = 1 / row["ratio"]
                out.append(row)
    return out
