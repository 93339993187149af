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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from ..extract.history import History, default_history
from .noise import FloatArray, NoiseModel, within_sigma
from .rules import (
    OPEN_STATES,
    ClassRule,
    SeriesEvidence,
    is_liger,
    judge_series,
    unconfirmed,
)

IntArray = npt.NDArray[np.int64]
Z95 = 1.959963984540054
DETERMINISTIC_METRICS = frozenset({"memory"})


@dataclass(frozen=True)
class DetectorSettings:
    z_threshold: float = 4.0
    min_effect: float = 0.05
    persistence: int = 2
    noise: NoiseModel = field(default_factory=NoiseModel)
    # Memory: the smallest relative change that is one (docs/regressions.md, "Memory"); the
    # largest same-series A/A memory difference measured upstream was 0.026 %.
    memory_min_effect: float = 0.005
    # This many kernels or more stepping the same way at one commit, on one kind of machine:
    # an environment change, not a kernel change (docs/regressions.md, "Controls").
    environment_kernels: int = 5
    # Count those kernels whatever they moved (time or memory, either way): an environment
    # change moves kernels both ways (`controls.mark_shared_steps`).
    environment_across: bool = True
    # A speed step of the `full` pass that neither `forward` nor `backward` of the same
    # provider and workload takes (by `min_effect`, the same way, over the same points) is
    # not the kernel's code: `rules.judge_series`.
    full_needs_pass: bool = True
    # At a shared step, a change is `environment` only within this many spreads of its
    # class's level, with this many other kernels in the class (`rules.judge_shared_step`);
    # speed steps of runs under `launch_bound_ns` are compared with launch-bound ones only.
    class_tolerance: float = 3.0
    class_min_peers: int = 2
    launch_bound_ns: float = 100_000.0
    # Points after a change that must hold it before it is announced (`pending` until then).
    confirm_points: int = 2
    memory_confirm_points: int = 1
    # A speed change is found at `z_threshold` and announced at this z (hysteresis): below it,
    # `pending` (`rules.unconfirmed`).
    announce_z: float = 5.5
    # A series' sigma (`_series_sigma`): a point's modelled noise counts up to this many times
    # the series' upper quartile; repeats set it only with this many degrees of freedom.
    noise_cap: float = 3.0
    repeat_min_dof: int = 2
    # And at least the sigma its own successive points show, from this many points on.
    jump_min_points: int = 5

    @property
    def class_rule(self) -> ClassRule:
        return ClassRule(
            self.environment_kernels,
            self.class_tolerance,
            self.class_min_peers,
            self.launch_bound_ns,
            self.min_effect,
            self.memory_min_effect,
        )

    @property
    def method(self) -> str:
        return (
            f"ruptures.KernelCPD(linear, pen=z^2) z={self.z_threshold} "
            f"min_effect={self.min_effect} "
            f"persistence={self.persistence} noise=k{self.noise.run_to_run}/f{self.noise.floor}"
        )

    @property
    def memory_method(self) -> str:
        return f"exact min_effect={self.memory_min_effect}"


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
        # The detector's unit: the part of a series between two harness revisions.
        group = "segment_key" if "segment_key" in runs.column_names else "series_key"
        keys = runs.column(group).to_numpy(zero_copy_only=False)
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
    # One wild run does not set a series' noise: each point counts up to `noise_cap` times the
    # series' upper quartile. distill_jsd_loss full at 4c32ab6 (p20-p80 over 2x) otherwise
    # doubled its series' sigma and dissolved #862's step, an alert already announced. The
    # quartile, not the median: a series noisy at a third of its points stays noisy.
    cap = settings.noise_cap * np.repeat(_upper_quartile(run_sigma, n_rel), n_rel)
    model = np.add.reduceat(np.minimum(run_sigma, cap), p.series_start) / n_rel
    # Repeats of one release: pooled deviation of runs from their release mean, per series.
    dev2 = (p.log_runs - p.log_mean[p.release_of_run]) ** 2
    run_series = np.repeat(np.arange(p.n_series), np.add.reduceat(p.release_count, p.series_start))
    ss = np.bincount(run_series, weights=dev2, minlength=p.n_series)
    dof = np.add.reduceat(p.release_count - 1, p.series_start)
    # Too few repeats say little about the noise: one pair of runs days apart (0a62700,
    # measured twice) is a chi-square of one degree of freedom, and set a series' sigma 6x.
    with np.errstate(invalid="ignore", divide="ignore"):
        rep = np.where(dof >= settings.repeat_min_dof, np.sqrt(ss / np.maximum(dof, 1)), 0.0)
    per_release = np.add.reduceat(p.release_count, p.series_start) / n_rel
    jumps = _jumpiness(p, n_rel, settings.jump_min_points)
    return np.maximum(np.maximum(model, rep) / np.sqrt(per_release), jumps)


def _jumpiness(p: Points, n_rel: npt.NDArray[np.int64], min_points: int) -> FloatArray:
    """Per series of at least `min_points` points: the point sigma its own neighbours show,
    robust to its steps and to a wild point (the MAD of successive differences, / sqrt 2);
    0 for shorter series, where one step is too large a share of the differences.

    What the runs' spread and a pair of repeats cannot see: a series that jumps between
    levels from commit to commit (layer_norm's backward on the H100: 128, 190, 255, 173 ms)
    with narrow bands inside each run."""
    diffs = np.abs(np.diff(p.log_mean))
    # The differences within each series: drop the one across each boundary between series.
    inner = np.delete(diffs, p.series_start[1:] - 1) if p.n_series > 1 else diffs
    sizes = n_rel - 1
    out = np.zeros(p.n_series)
    long = n_rel >= min_points
    if long.any():
        keep = np.repeat(long, sizes)
        out[long] = 1.4826 * _group_median(inner[keep], sizes[long]) / math.sqrt(2)
    return out


def _sorted_groups(
    values: FloatArray, sizes: npt.NDArray[np.int64]
) -> tuple[FloatArray, npt.NDArray[np.int64]]:
    """`values` sorted within each consecutive group (`sizes`: each group's length, >= 1),
    and where each group starts."""
    group = np.repeat(np.arange(len(sizes)), sizes)
    return values[np.lexsort((values, group))], np.r_[0, np.cumsum(sizes)[:-1]]


def _group_median(values: FloatArray, sizes: npt.NDArray[np.int64]) -> FloatArray:
    ordered, starts = _sorted_groups(values, sizes)
    return (ordered[starts + (sizes - 1) // 2] + ordered[starts + sizes // 2]) / 2


def _upper_quartile(values: FloatArray, sizes: npt.NDArray[np.int64]) -> FloatArray:
    """Per group: the value at rank ceil(0.75 (n - 1)), from 0."""
    ordered, starts = _sorted_groups(values, sizes)
    return ordered[starts + (3 * (sizes - 1) + 3) // 4]


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
    # A step across a harness revision: whether the later part holds it long enough to be
    # announced should liger's own code be suspected (rule 6, `rules.unconfirmed`).
    settled: bool = True


def _changes_of(
    p: Points, s: int, sigma: float, deterministic: bool, settings: DetectorSettings
) -> Iterator[Change]:
    r0, r1 = p.releases(s)
    if deterministic:
        # Against the level the series last settled at (not the previous point): a drift of
        # small steps adds up to a change, and is reported where it crosses the minimum.
        v = p.vmax[r0:r1]
        level = 0
        for i in range(1, len(v)):
            base = float(v[level])
            if v[i] == v[level]:
                continue
            ratio = float(v[i]) / base if base else math.inf
            if abs(ratio - 1.0) < settings.memory_min_effect:
                continue
            state = "alert" if v[i] > v[level] else "improvement"
            held = 1
            while i + held < len(v) and v[i + held] == v[i]:
                held += 1
            if unconfirmed(held, i + held == len(v), settings.memory_confirm_points):
                state = "pending"
            yield Change(
                s, list(range(level, i)), [i], math.log(ratio), 0.0, math.inf, 0.0, True, state
            )
            level = i
        return
    y_arr = p.log_mean[r0:r1]
    y = y_arr.tolist()
    segments = _settle(y, _segments(y_arr, sigma, settings), sigma, settings)
    resid = _residual(y, segments)
    for i in range(len(segments) - 1):
        a, b = segments[i], segments[i + 1]
        delta, se, z = _test(y, a, b, sigma, resid)
        last = i + 1 == len(segments) - 1
        need = max(settings.persistence, settings.confirm_points)
        if unconfirmed(len(b.releases), last, need) or abs(_held_z(y, b, delta, se)) < (
            settings.announce_z
        ):
            state = "pending"
        else:
            state = "alert" if delta > 0 else "improvement"
        yield Change(s, a.releases, b.releases, delta, se, z, max(sigma, resid), False, state)


def _held_z(y: list[float], b: Segment, delta: float, se: float) -> float:
    """The z that announcing a change needs (rule 6): its step against the standard error of
    the points after it as they scatter about the new level, where that is the larger. Points
    that disagree with each other do not hold a level: layer_norm's backward on the H100 read
    190 then 255 ms after 141, an announced x1.6 step that the next point took back."""
    if len(b.releases) < 2:
        return delta / se if se > 0 else math.inf
    m = _mean(y, b.releases)
    spread = math.sqrt(sum((y[i] - m) ** 2 for i in b.releases) / (len(b.releases) - 1))
    held = max(se, spread / math.sqrt(len(b.releases)))
    return delta / held if held > 0 else math.inf


FalseAlarmRate = Callable[[str, str], float | None]


def _harness_changes(
    p: Points, sigma: FloatArray, deterministic: npt.NDArray[np.bool_], settings: DetectorSettings
) -> Iterator[Change]:
    """The step between two parts of one series split by a harness revision, where there is
    one: reported with state `harness`. The change is indexed from the earlier part: its
    `after` point (one past that part's last) is the later part's first, points being stored
    one part after the other."""
    if p.n_series < 2:
        return
    series = p.table.column("series_key").take(pa.array(p.release_start[p.series_start]))
    keys = series.to_pylist()
    for s in range(p.n_series - 1):
        if keys[s] != keys[s + 1]:
            continue
        r0, r1 = p.releases(s)
        n = r1 - r0
        later_start, later_end = p.releases(s + 1)
        at_end = s + 2 >= p.n_series or keys[s + 2] != keys[s + 1]
        held = later_end - later_start
        if deterministic[s] and deterministic[s + 1]:
            a, b = float(p.vmax[r1 - 1]), float(p.vmax[r1])
            if a == b or (a and abs(b / a - 1.0) < settings.memory_min_effect):
                continue
            ratio = b / a if a else math.inf
            settled = not unconfirmed(held, at_end, settings.memory_confirm_points)
            yield Change(s, [n - 1], [n], math.log(ratio), 0.0, math.inf, 0.0, True, "harness",
                         settled)  # fmt: skip
            continue
        delta = float(p.log_mean[r1] - p.log_mean[r1 - 1])
        sig = max(float(sigma[s]), float(sigma[s + 1]))
        se = sig * math.sqrt(2.0)
        z = delta / se if se > 0 else math.inf
        if abs(math.expm1(delta)) < settings.min_effect or abs(z) < settings.z_threshold:
            continue
        need = max(settings.persistence, settings.confirm_points)
        settled = not unconfirmed(held, at_end, need) and abs(z) >= settings.announce_z
        yield Change(s, [n - 1], [n], delta, se, z, sig, False, "harness", settled)


def detect(
    runs: pa.Table,
    settings: DetectorSettings,
    false_alarm_rate: FalseAlarmRate | None = None,
    history: History | None = None,
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
    if "segment_key" in runs.column_names:
        changes.extend(_harness_changes(p, sigma, deterministic, settings))
    if not changes:
        return []
    first_runs = pa.array([int(p.release_start[p.series_start[c.series]]) for c in changes])
    metas = _columns(p.table, SERIES_META).take(first_runs).to_pylist()
    at_points = _columns(p.table, POINT_FIELDS).take(pa.array(p.release_start))
    cols = _Columns(
        p.table.column("external_id"),
        {name: at_points.column(name).to_pylist() for name in POINT_FIELDS},
        p.log_mean.tolist(),
        p.release_count.tolist(),
        p.release_start.tolist(),
        p.vmax.tolist(),
    )
    controls = _Controls(p, cols, changes)
    hist = default_history() if history is None else history
    return [
        _row(p, c, meta, cols, settings, false_alarm_rate, controls, hist)
        for c, meta in zip(changes, metas, strict=True)
    ]


def _columns(table: pa.Table, names: tuple[str, ...]) -> pa.Table:
    """`names` of `table`, a column of nulls for each it lacks (runs made before it existed,
    the calibration's synthetic series)."""
    out = table.select([n for n in names if n in table.column_names])
    for n in names:
        if n not in out.column_names:
            out = out.append_column(n, pa.nulls(table.num_rows, _NULL_TYPES.get(n, pa.string())))
    return out.select(list(names))


# Per point (taken from its first run): the release label as upstream wrote it, the commit
# and its position, the harness revision, the point's rank (comparable across the series of
# one bucket).
POINT_FIELDS = (
    "kernel",
    "liger_version",
    "commit_sha",
    "commit_position",
    "harness_rev",
    "release_rank",
    "provider",
)
_NULL_TYPES = {"commit_position": pa.int64(), "release_rank": pa.int32()}


@dataclass(frozen=True)
class _Columns:
    external_id: pa.ChunkedArray  # the changes' runs are a fraction of a bucket's: sliced
    point: dict[str, list[Any]]  # POINT_FIELDS, one value per point
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
    "origin",
)
# What a series shares with its controls: everything but the provider.
CONTROL_FIELDS = tuple(f for f in SERIES_META if f not in ("series_key", "provider",
                                                           "workload_slug", "x_value",
                                                           "gpu_name"))  # fmt: skip


class _Controls:
    """The other providers measured in the same runs as a series: same kernel, pass, metric,
    workload, protocol, machine and origin (a bucket holds all of a workload's providers).
    Points are matched by rank: the same commit (or release, where no commit is known)."""

    def __init__(self, p: Points, cols: _Columns, changes: Sequence[Change] = ()) -> None:
        self.p, self.cols = p, cols
        # Per series: the (point rank, slower or larger) where its changes start.
        self.steps: dict[int, set[tuple[Any, bool]]] = {}
        for ch in changes:
            start, _ = p.releases(ch.series)
            rank = cols.point["release_rank"][start + ch.after[0]]
            self.steps.setdefault(ch.series, set()).add((rank, ch.log_ratio > 0))
        firsts = pa.array(p.release_start[p.series_start])
        meta = _columns(p.table, CONTROL_FIELDS).take(firsts)
        groups: dict[tuple[Any, ...], list[int]] = {}
        # The same provider's other passes of the same workload: the key without the pass
        # and its protocol (a digest per pass), with the provider.
        by_pass: dict[tuple[Any, ...], list[int]] = {}
        apart = [CONTROL_FIELDS.index(f) for f in ("operation_mode", "protocol_digest")]
        self.mode = meta.column("operation_mode").to_pylist()
        providers = cols.point["provider"]
        for s, key in enumerate(zip(*(meta.column(f).to_pylist() for f in CONTROL_FIELDS),
                                    strict=True)):  # fmt: skip
            # Without a workload (synthetic series) nothing says two series ran together.
            if key[CONTROL_FIELDS.index("workload_digest")] is not None:
                groups.setdefault(key, []).append(s)
                own = (
                    *(v for i, v in enumerate(key) if i not in apart),
                    providers[p.series_start[s]],
                )
                by_pass.setdefault(own, []).append(s)
        self.siblings = {s: members for members in groups.values() for s in members}
        self.passes_of = {s: members for members in by_pass.values() for s in members}
        self._levels: dict[int, dict[Any, float]] = {}

    def _level(self, s: int) -> dict[Any, float]:
        found = self._levels.get(s)
        if found is None:
            r0, r1 = self.p.releases(s)
            ranks = self.cols.point["release_rank"]
            found = self._levels[s] = {ranks[r]: self.cols.log_mean[r] for r in range(r0, r1)}
        return found

    def full_only(self, c: Change) -> bool:
        """Whether a step of the `full` pass is one that the same provider's `forward` and
        `backward` of that workload, measured on both sides of it, do not take: no change of
        theirs starts at the same point in the same direction. `full` times forward and
        backward in one region; the kernel's code runs in those passes, so a change to it
        shows in at least one of them where they are measured. False where no other pass was
        measured on both sides (nothing says)."""
        ranks = self.cols.point["release_rank"]
        r0, _ = self.p.releases(c.series)
        before, after = ranks[r0 + c.before[-1]], ranks[r0 + c.after[0]]
        measured = False
        for t in self.passes_of.get(c.series, []):
            if self.mode[t] == self.mode[c.series]:
                continue
            level = self._level(t)
            if before in level and after in level:
                measured = True
                if (after, c.log_ratio > 0) in self.steps.get(t, ()):
                    return False
        return measured

    def ratios(
        self, s: int, before: list[int], after: list[int], *, across: bool = False
    ) -> dict[str, float]:
        """Provider -> its ratio over the same step (the same before and after points).
        `across`: a step across a harness revision, `after` indexed into the next part of
        the series; each baseline is then read across its own parts too (a revision of
        shared code split them as well: whether they moved there is the evidence)."""
        ranks = self.cols.point["release_rank"]
        providers = self.cols.point["provider"]
        r0, _ = self.p.releases(s)
        own = providers[r0]
        b_ranks = [ranks[r0 + i] for i in before]
        a_ranks = [ranks[r0 + i] for i in after]
        levels: dict[tuple[str, int], dict[Any, float]] = {}
        kernels = self.cols.point["kernel"]
        liger = is_liger(kernels[r0], own)
        for t in self.siblings.get(s, []):
            t0, _ = self.p.releases(t)
            # A variant of Liger's own code (`liger-fp32-accum`, `liger_rms_norm` beside the
            # fused kernel) is no baseline of liger's: a change to shared code moves it too.
            if providers[t0] == own or (liger and is_liger(kernels[t0], providers[t0])):
                continue
            # Without `across`, each part of a baseline's series stands alone.
            key = (providers[t0], -1 if across else t)
            levels.setdefault(key, {}).update(self._level(t))
        out: dict[str, list[float]] = {}
        for (provider, _), level in levels.items():
            b = [level[r] for r in b_ranks if r in level]
            a = [level[r] for r in a_ranks if r in level]
            if a and b:
                out.setdefault(provider, []).append(sum(a) / len(a) - sum(b) / len(b))
        return {k: math.exp(sum(v) / len(v)) for k, v in sorted(out.items())}


def _release(tag: str | None) -> str | None:
    return tag[1:] if tag and tag[0] in "vV" and tag[1:2].isdigit() else tag


def _row(
    p: Points,
    c: Change,
    meta: dict[str, Any],
    cols: _Columns,
    settings: DetectorSettings,
    far: FalseAlarmRate | None,
    controls: _Controls,
    history: History,
) -> dict[str, Any]:
    r0, _ = p.releases(c.series)

    def runs_of(release: int) -> list[str]:
        start = cols.release_start[r0 + release]
        return cols.external_id.slice(start, cols.release_count[r0 + release]).to_pylist()

    def at(release: int, name: str) -> Any:
        return cols.point[name][r0 + release]

    before_rel, after_rel = c.before[-1], c.after[0]
    if c.deterministic:
        before_value = float(cols.vmax[r0 + c.before[0]])
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
    after_version = at(after_rel, "liger_version")
    after_commit = at(after_rel, "commit_sha")
    change_id = (
        "sha256:"
        + hashlib.sha256(
            f"{meta['series_key']}|{after_commit or after_version}|{direction}".encode()
        ).hexdigest()
    )
    series_class = f"{meta['metric']}/{meta['operation_mode']}"
    baselines = controls.ratios(c.series, c.before, c.after, across=c.state == "harness")
    baseline_ratio = (
        math.exp(sum(math.log(v) for v in baselines.values()) / len(baselines))
        if baselines
        else None
    )
    relative = ratio / baseline_ratio if ratio and baseline_ratio else None
    full_step = (
        settings.full_needs_pass
        and c.state in OPEN_STATES
        and not c.deterministic
        and meta["operation_mode"] == "full"
    )
    state, suspected, said = judge_series(
        SeriesEvidence(
            state=c.state,
            liger=is_liger(meta["kernel"], meta["provider"]),
            log_ratio=c.log_ratio,
            effect=math.log1p(
                settings.memory_min_effect if c.deterministic else settings.min_effect
            ),
            baseline_ratio=baseline_ratio,
            baselines=sorted(baselines),
            full_only=controls.full_only(c) if full_step else None,
            harness=at(after_rel, "harness_rev"),
            settled=c.settled,
        )
    )
    first_release = _release(history.first_release(after_commit)) if after_commit else after_version
    return {
        "change_id": change_id,
        **meta,
        "series_class": series_class,
        "before_release": at(before_rel, "liger_version"),
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
        "state": state,
        "false_alarm_rate": far(meta["metric"], meta["operation_mode"]) if far else None,
        "detector": settings.memory_method if c.deterministic else settings.method,
        "before_commit": at(before_rel, "commit_sha"),
        "after_commit": after_commit,
        "before_position": at(before_rel, "commit_position"),
        "after_position": at(after_rel, "commit_position"),
        "first_release": first_release,
        "before_harness": at(before_rel, "harness_rev"),
        "after_harness": at(after_rel, "harness_rev"),
        "baseline_ratio": baseline_ratio,
        "baseline_providers": sorted(baselines),
        "relative_ratio": relative,
        "kernels_at_step": None,
        "suspected": suspected,
        "evidence": "; ".join(said),
    }


# observed_at: the first run of each point, for the report's hover.
POINT_COLUMNS = (
    *SERIES_META,
    "liger_version",
    "release_rank",
    "commit_sha",
    "commit_position",
    "observed_at",
)


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
    meta = _columns(runs, POINT_COLUMNS).take(pa.array(p.release_start))
    return (
        meta.append_column("value", pa.array(np.exp(p.log_mean)))
        .append_column("value_p20", pa.array(np.exp(l20)))
        .append_column("value_p80", pa.array(np.exp(l80)))
        .append_column("log_value", pa.array(p.log_mean))
        .append_column("runs", pa.array(p.release_count))
        .append_column("sigma", pa.array(point_sigma))
        .append_column("deterministic", pa.array(_deterministic(p)[series_of]))
    )
