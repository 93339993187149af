"""Change detection per series, over releases in PEP 440 order.

One point per release: the mean of the log medians of that release's runs (runs of one release
measure the same code; a change can only happen between releases). Per series:

1. Noise: sigma from the noise model (`noise`), or the pooled spread of repeated runs of one
   release where the series has them, whichever is larger; divided by sqrt(runs per release).
2. Change points: ruptures' penalized optimal segmentation (`KernelCPD` with the linear kernel:
   PELT over the l2 cost, in C) on the log points divided by that sigma, with penalty z^2: one
   split pays for itself only where sqrt(n1 n2 / n) |mean1 - mean2| exceeds z noise sigmas.
   That best single split is computed for all series at once (numpy) first, and only series
   where it reaches z reach the library (1.5 % of the calibration's A/A series).
3. Persistence: a single-point segment inside the series is a transient and is dropped; a
   change must hold for `persistence` releases before it is an alert (one point at the end of
   the series is `pending`).
4. Each remaining boundary is tested again with the segments' own residual spread (the larger
   of that and the model sigma): |z| >= z threshold and a ratio at least `min_effect` from 1,
   or it is merged away.

Memory is deterministic: every difference between consecutive releases is a change, one byte
included, with no persistence and no minimum effect.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from .noise import FloatArray, NoiseModel, within_sigma

IntArray = npt.NDArray[np.int64]
Z95 = 1.959963984540054
DETERMINISTIC_METRICS = frozenset({"memory"})


@dataclass(frozen=True)
class DetectorSettings:
    z_threshold: float = 4.0
    min_effect: float = 0.05
    persistence: int = 2
    noise: NoiseModel = field(default_factory=NoiseModel)

    @property
    def method(self) -> str:
        return (
            f"ruptures.KernelCPD(linear, pen=z^2) z={self.z_threshold} "
            f"min_effect={self.min_effect} "
            f"persistence={self.persistence} noise=k{self.noise.run_to_run}/f{self.noise.floor}"
        )


@dataclass(frozen=True)
class Segment:
    releases: list[int]  # indices into the series' release points


@dataclass
class Points:
    """A bucket of runs reduced to one point per (series, release), plus where things are."""

    table: pa.Table  # runs, sorted by series, release, time
    series_start: IntArray  # into releases
    release_start: IntArray  # into runs
    release_count: IntArray
    log_mean: FloatArray
    within: FloatArray
    vmin: IntArray
    vmax: IntArray
    log_runs: FloatArray
    release_of_run: IntArray

    @classmethod
    def of(cls, runs: pa.Table) -> Points:
        keys = runs.column("series_key").to_numpy(zero_copy_only=False)
        rank = runs.column("release_rank").to_numpy(zero_copy_only=False).astype(np.int64)
        med = runs.column("value_median").to_numpy(zero_copy_only=False).astype(np.int64)
        # Nullable integers come back as floats with NaN for nulls.
        p20 = runs.column("value_p20").to_numpy(zero_copy_only=False).astype(np.float64)
        p80 = runs.column("value_p80").to_numpy(zero_copy_only=False).astype(np.float64)
        n = len(med)
        new_series = np.r_[True, keys[1:] != keys[:-1]] if n else np.zeros(0, bool)
        new_release = new_series | (np.r_[True, rank[1:] != rank[:-1]] if n else new_series)
        release_start = np.flatnonzero(new_release)
        counts = np.diff(np.r_[release_start, n]).astype(np.int64)
        with np.errstate(divide="ignore"):
            logv = np.log(np.maximum(med, 1).astype(np.float64))
        log_mean = np.add.reduceat(logv, release_start) / counts if n else np.zeros(0)
        w = within_sigma(p20, p80)
        within = np.add.reduceat(w, release_start) / counts if n else np.zeros(0)
        vmin = np.minimum.reduceat(med, release_start) if n else np.zeros(0, np.int64)
        vmax = np.maximum.reduceat(med, release_start) if n else np.zeros(0, np.int64)
        series_start = np.flatnonzero(new_series[release_start]) if n else np.zeros(0, np.int64)
        release_of_run = np.repeat(np.arange(len(release_start)), counts)
        return cls(
            runs,
            series_start.astype(np.int64),
            release_start.astype(np.int64),
            counts,
            log_mean,
            within,
            vmin,
            vmax,
            logv,
            release_of_run.astype(np.int64),
        )

    @property
    def n_series(self) -> int:
        return len(self.series_start)

    def releases(self, s: int) -> tuple[int, int]:
        end = self.series_start[s + 1] if s + 1 < self.n_series else len(self.release_start)
        return int(self.series_start[s]), int(end)


def _series_sigma(p: Points, settings: DetectorSettings) -> FloatArray:
    """Per series: point sigma (log space) for its release means."""
    if not p.n_series:
        return np.zeros(0)
    run_sigma = settings.noise.run_sigma(p.within)
    n_rel = np.diff(np.r_[p.series_start, len(p.release_start)])
    model = np.add.reduceat(run_sigma, p.series_start) / n_rel
    # Repeats of one release: pooled deviation of runs from their release mean, per series.
    dev2 = (p.log_runs - p.log_mean[p.release_of_run]) ** 2
    run_series = np.repeat(np.arange(p.n_series), np.add.reduceat(p.release_count, p.series_start))
    ss = np.bincount(run_series, weights=dev2, minlength=p.n_series)
    dof = np.add.reduceat(p.release_count - 1, p.series_start)
    with np.errstate(invalid="ignore", divide="ignore"):
        rep = np.where(dof > 0, np.sqrt(ss / np.maximum(dof, 1)), 0.0)
    per_release = np.add.reduceat(p.release_count, p.series_start) / n_rel
    return np.maximum(model, rep) / np.sqrt(per_release)


def _screen(p: Points, sigma: FloatArray, settings: DetectorSettings) -> npt.NDArray[np.bool_]:
    """Series that can hold a change: the best single split's z reaches the threshold and
    the release means span at least the minimum effect (speed); any difference (memory)."""
    n_rel_total = len(p.release_start)
    if not p.n_series:
        return np.zeros(0, bool)
    n_rel = np.diff(np.r_[p.series_start, n_rel_total])
    series_of = np.repeat(np.arange(p.n_series), n_rel)
    y = p.log_mean
    start = p.series_start[series_of]
    length = n_rel[series_of]
    k = np.arange(n_rel_total) - start + 1  # points left of a split after this release
    csum = np.cumsum(y)
    before_start = np.where(start > 0, csum[np.maximum(start - 1, 0)], 0.0)
    left = csum - before_start
    total = csum[start + length - 1] - before_start
    right_n = length - k
    valid = right_n > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        diff = left / k - (total - left) / np.where(valid, right_n, 1)
        stat = np.abs(diff) * np.sqrt(k * right_n / length) / sigma[series_of]
    stat = np.where(valid & np.isfinite(stat), stat, 0.0)
    best = np.maximum.reduceat(stat, p.series_start)
    span = np.maximum.reduceat(y, p.series_start) - np.minimum.reduceat(y, p.series_start)
    speed = (best >= settings.z_threshold) & (span >= math.log1p(settings.min_effect))
    changed = np.r_[False, p.vmax[1:] != p.vmax[:-1]] & (series_of == np.r_[-1, series_of[:-1]])
    memory = np.bincount(series_of, weights=changed, minlength=p.n_series) > 0
    return np.where(n_rel >= 2, np.where(_deterministic(p), memory, speed), False)


def _deterministic(p: Points) -> npt.NDArray[np.bool_]:
    metric = p.table.column("metric").take(pa.array(p.release_start[p.series_start]))
    is_memory = np.isin(metric.to_numpy(zero_copy_only=False), list(DETERMINISTIC_METRICS))
    spread = np.maximum.reduceat((p.vmax != p.vmin).astype(np.int64), p.series_start) > 0
    # Memory whose repeats of one release disagree is not deterministic here: treat as speed.
    return is_memory & ~spread


def _segments(y: FloatArray, sigma: float, settings: DetectorSettings) -> list[Segment]:
    import ruptures as rpt

    if len(y) < 2 or sigma <= 0:
        return [Segment(list(range(len(y))))]
    algo = rpt.KernelCPD(kernel="linear", min_size=1, jump=1)
    ends = algo.fit((y / sigma).reshape(-1, 1)).predict(pen=settings.z_threshold**2)
    bounds = [0, *(int(e) for e in ends)]
    return [Segment(list(range(a, b))) for a, b in itertools.pairwise(bounds)]


# Series are a handful of points: plain Python beats numpy's per-call overhead here.
def _mean(y: list[float], idx: list[int]) -> float:
    return sum(y[i] for i in idx) / len(idx)


def _test(
    y: list[float], a: Segment, b: Segment, sigma: float, resid: float
) -> tuple[float, float, float]:
    """(log ratio, standard error, z) of segment b against segment a."""
    delta = _mean(y, b.releases) - _mean(y, a.releases)
    se = max(sigma, resid) * math.sqrt(1 / len(a.releases) + 1 / len(b.releases))
    return delta, se, (delta / se if se > 0 else math.inf)


def _residual(y: list[float], segments: list[Segment]) -> float:
    ss, dof = 0.0, 0
    for s in segments:
        m = _mean(y, s.releases)
        ss += sum((y[i] - m) ** 2 for i in s.releases)
        dof += len(s.releases) - 1
    return math.sqrt(ss / dof) if dof >= 2 else 0.0


def _settle(
    y: list[float], segments: list[Segment], sigma: float, settings: DetectorSettings
) -> list[Segment]:
    """Drop interior transients, then merge neighbours whose difference is not a change."""
    while True:
        kept = [
            s
            for i, s in enumerate(segments)
            if len(s.releases) > 1 or i == 0 or i == len(segments) - 1
        ]
        resid = _residual(y, kept)
        merged = False
        for i in range(len(kept) - 1):
            delta, _se, z = _test(y, kept[i], kept[i + 1], sigma, resid)
            if abs(z) < settings.z_threshold or abs(math.expm1(delta)) < settings.min_effect:
                kept[i : i + 2] = [Segment(kept[i].releases + kept[i + 1].releases)]
                merged = True
                break
        if not merged and len(kept) == len(segments):
            return kept
        segments = kept


@dataclass
class Change:
    series: int
    before: list[int]  # release indices (within the series) of the before segment
    after: list[int]
    log_ratio: float
    se: float
    z: float
    sigma: float
    deterministic: bool
    state: str


def _changes_of(
    p: Points, s: int, sigma: float, deterministic: bool, settings: DetectorSettings
) -> Iterator[Change]:
    r0, r1 = p.releases(s)
    if deterministic:
        v = p.vmax[r0:r1]
        for i in range(1, len(v)):
            if v[i] != v[i - 1]:
                ratio = float(v[i]) / float(v[i - 1]) if v[i - 1] else math.inf
                state = "alert" if v[i] > v[i - 1] else "improvement"
                yield Change(s, [i - 1], [i], math.log(ratio), 0.0, math.inf, 0.0, True, state)
        return
    y_arr = p.log_mean[r0:r1]
    y = y_arr.tolist()
    segments = _settle(y, _segments(y_arr, sigma, settings), sigma, settings)
    resid = _residual(y, segments)
    for i in range(len(segments) - 1):
        a, b = segments[i], segments[i + 1]
        delta, se, z = _test(y, a, b, sigma, resid)
        if len(b.releases) < settings.persistence and i + 1 == len(segments) - 1:
            state = "pending"
        else:
            state = "alert" if delta > 0 else "improvement"
        yield Change(s, a.releases, b.releases, delta, se, z, max(sigma, resid), False, state)


FalseAlarmRate = Callable[[str, str], float | None]


def detect(
    runs: pa.Table,
    settings: DetectorSettings,
    false_alarm_rate: FalseAlarmRate | None = None,
) -> list[dict[str, Any]]:
    """Every change in a bucket of whole series (as `with_series` returns), as table rows."""
    if runs.num_rows == 0:
        return []
    p = Points.of(runs)
    sigma = _series_sigma(p, settings)
    candidates = np.flatnonzero(_screen(p, sigma, settings))
    deterministic = _deterministic(p)
    changes = [
        change
        for s in candidates
        for change in _changes_of(p, int(s), float(sigma[s]), bool(deterministic[s]), settings)
    ]
    if not changes:
        return []
    first_runs = pa.array([int(p.release_start[p.series_start[c.series]]) for c in changes])
    metas = p.table.select(list(SERIES_META)).take(first_runs).to_pylist()
    cols = _Columns(
        p.table.column("external_id").to_pylist(),
        p.table.column("liger_version").to_pylist(),
        p.log_mean.tolist(),
        p.release_count.tolist(),
        p.release_start.tolist(),
        p.vmax.tolist(),
    )
    return [
        _row(p, c, meta, cols, settings, false_alarm_rate)
        for c, meta in zip(changes, metas, strict=True)
    ]


@dataclass(frozen=True)
class _Columns:
    external_id: list[str]
    liger_version: list[str]
    log_mean: list[float]
    release_count: list[int]
    release_start: list[int]
    vmax: list[int]


SERIES_META = (
    "series_key",
    "kernel",
    "operation_mode",
    "metric",
    "provider",
    "workload_digest",
    "workload_slug",
    "x_value",
    "protocol_digest",
    "gpu_product",
    "gpu_form_factor",
    "gpu_name",
    "software_class",
)


def _row(
    p: Points,
    c: Change,
    meta: dict[str, Any],
    cols: _Columns,
    settings: DetectorSettings,
    far: FalseAlarmRate | None,
) -> dict[str, Any]:
    r0, _ = p.releases(c.series)

    def runs_of(release: int) -> list[str]:
        start = cols.release_start[r0 + release]
        return cols.external_id[start : start + cols.release_count[r0 + release]]

    def version(release: int) -> str:
        return cols.liger_version[cols.release_start[r0 + release]]

    before_rel, after_rel = c.before[-1], c.after[0]
    if c.deterministic:
        before_value = float(cols.vmax[r0 + before_rel])
        after_value = float(cols.vmax[r0 + after_rel])
        ratio: float | None = after_value / before_value if before_value else None
        low = high = ratio
        p_value: float | None = 0.0
        score: float | None = None
    else:
        before_value = math.exp(_mean(cols.log_mean, [r0 + i for i in c.before]))
        after_value = math.exp(_mean(cols.log_mean, [r0 + i for i in c.after]))
        ratio = math.exp(c.log_ratio)
        low, high = math.exp(c.log_ratio - Z95 * c.se), math.exp(c.log_ratio + Z95 * c.se)
        p_value = math.erfc(abs(c.z) / math.sqrt(2))
        score = c.z
    larger = after_value > before_value
    direction = (
        ("larger" if larger else "smaller")
        if meta["metric"] in DETERMINISTIC_METRICS
        else ("slower" if larger else "faster")
    )
    after_version = version(after_rel)
    change_id = (
        "sha256:"
        + hashlib.sha256(f"{meta['series_key']}|{after_version}|{direction}".encode()).hexdigest()
    )
    series_class = f"{meta['metric']}/{meta['operation_mode']}"
    return {
        "change_id": change_id,
        **meta,
        "series_class": series_class,
        "before_release": version(before_rel),
        "after_release": after_version,
        "before_releases": len(c.before),
        "after_releases": len(c.after),
        "before_runs": sum(cols.release_count[r0 + i] for i in c.before),
        "after_runs": sum(cols.release_count[r0 + i] for i in c.after),
        "before_run_ids": runs_of(before_rel),
        "after_run_ids": runs_of(after_rel),
        "before_value": before_value,
        "after_value": after_value,
        "value_unit": "bytes" if meta["metric"] in DETERMINISTIC_METRICS else "ns",
        "ratio": ratio,
        "ratio_low": low,
        "ratio_high": high,
        "p_value": p_value,
        "score": score,
        "noise": c.sigma,
        "direction": direction,
        "state": c.state,
        "false_alarm_rate": far(meta["metric"], meta["operation_mode"]) if far else None,
        "detector": "exact" if c.deterministic else settings.method,
    }


POINT_COLUMNS = (*SERIES_META, "liger_version", "release_rank", "observed_at")  # first run's


def release_points(runs: pa.Table, settings: DetectorSettings) -> pa.Table:
    """One row per (series, release): the series fields, the release, the geometric mean of
    its runs' medians, p20 and p80, the run count and the point's noise sigma (log space)."""
    if runs.num_rows == 0:
        return pa.table({})
    p = Points.of(runs)
    sigma = _series_sigma(p, settings)
    n_rel = np.diff(np.r_[p.series_start, len(p.release_start)])
    per_release = np.add.reduceat(p.release_count, p.series_start) / n_rel
    series_of = np.repeat(np.arange(p.n_series), n_rel)
    # Point sigma for a release with m runs: the series' per-run sigma over sqrt(m).
    point_sigma = sigma[series_of] * np.sqrt(per_release[series_of] / p.release_count)
    p20 = runs.column("value_p20").to_numpy(zero_copy_only=False).astype(np.float64)
    p80 = runs.column("value_p80").to_numpy(zero_copy_only=False).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        l20 = np.add.reduceat(np.log(p20), p.release_start) / p.release_count
        l80 = np.add.reduceat(np.log(p80), p.release_start) / p.release_count
    meta = runs.select(list(POINT_COLUMNS)).take(pa.array(p.release_start))
    return (
        meta.append_column("value", pa.array(np.exp(p.log_mean)))
        .append_column("value_p20", pa.array(np.exp(l20)))
        .append_column("value_p80", pa.array(np.exp(l80)))
        .append_column("log_value", pa.array(p.log_mean))
        .append_column("runs", pa.array(p.release_count))
        .append_column("sigma", pa.array(point_sigma))
        .append_column("deterministic", pa.array(_deterministic(p)[series_of]))
    )
