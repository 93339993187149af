"""How often the detector is wrong: false alarms on A/A data, detection of injected steps.

A/A data are two measurements of the same release on the same machine. Real ones come from
upstream-format CSVs: rows equal in every identity column but the timestamp (our re-runs'
repeats; same-version rows of the history). They fit the noise model (`noise.fit`) and give a
pool of standardized run-to-run residuals, heavy tails and all.

Upstream's cumulative file keeps one point per configuration, so real series over releases
are built from the sample's real points: each point becomes a series of `releases` releases
whose run-to-run noise is resampled from the real residual pool, scaled by that point's own
p20-p80 spread. With no step that is A/A data; a step of 5/10/20/50 % from a chosen release
on is a regression whose release we know. Both go through the same `detect` as the warehouse.

    python -m kindex_etl.analysis.calibration \\
        --sample ../shared/upstream-sample/all_benchmark_data.csv \\
        --pairs tests/fixtures/h200_rerun_0.8.5/benchmark.csv \\
                tests/fixtures/h200_rerun_0.8.5/repeat/benchmark.csv \\
        --out kindex_etl/analysis/calibration.json

writes the packaged `calibration.json`: the fitted noise model, the detector settings, and
the false-alarm and detection rates per metric and pass that every alert carries.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ..contracts.upstream import POINT_COLUMNS
from ..storage import ObjectStore, open_store
from .detect import DETERMINISTIC_METRICS, SERIES_META, DetectorSettings, detect
from .noise import NoiseModel, fit, within_sigma
from .series import RunSource

# The timer a series without a calibration class of its own was measured by (release points'
# `timer`; a class's points carry the class's name, e.g. `device_time`).
TIMER = "upstream"

STEPS = (0.05, 0.10, 0.20, 0.50)
IDENTITY = [*POINT_COLUMNS, "gpu_name", "liger_version"]
SCALE = {"speed": 1e6, "memory": 1024 * 1024}  # ms -> ns, MiB -> bytes


def read_points(paths: Iterable[Path]) -> pd.DataFrame:
    """Finite points of upstream CSVs: identity columns, value_median/p20/p80 as ns or bytes."""
    frames = []
    for path in paths:
        df = pd.read_csv(path, keep_default_na=False, dtype=str)
        df["source"] = str(path)
        frames.append(df)
    df = pd.concat(frames, ignore_index=True)
    scale = df["metric_name"].map(SCALE).astype(float)
    for src, dst in (
        ("y_value_50", "value_median"),
        ("y_value_20", "value_p20"),
        ("y_value_80", "value_p80"),
    ):
        df[dst] = (pd.to_numeric(df[src], errors="coerce") * scale).round()
    ok = df[["value_median", "value_p20", "value_p80"]].notna().all(axis=1)
    ok &= (df["value_median"] > 0) & df["metric_name"].isin(list(SCALE))
    df = df[ok].copy()
    df["kernel_operation_mode"] = df["kernel_operation_mode"].replace("", "unspecified")
    return df


def aa_pairs(points: pd.DataFrame) -> pd.DataFrame:
    """Consecutive runs (by time) of one identity: two measurements of the same release."""
    df = points.sort_values([*IDENTITY, "timestamp"])
    prev = df.groupby(IDENTITY, sort=False).shift(1)
    pairs = df.assign(
        a_median=prev["value_median"],
        a_p20=prev["value_p20"],
        a_p80=prev["value_p80"],
        a_timestamp=prev["timestamp"],
    )
    pairs = pairs[pairs["a_median"].notna() & (pairs["a_timestamp"] != pairs["timestamp"])]
    return pairs.reset_index(drop=True)


def warehouse_pairs(store: ObjectStore) -> pd.DataFrame:
    """Pairs of runs of one point of one series in a warehouse: consecutive runs (by time) of
    one commit (of one release where the series' points are releases). Series keys decide
    sameness here (workload digests, not raw config text), so this finds repeats that upstream
    wrote under two sweeps, our re-runs' repeats, and commits upstream re-ran days later
    (`gap_s`: seconds between the two runs)."""
    frames = []
    cols = ["series_key", "release_rank", "observed_at", "metric", "operation_mode",
            "value_median", "value_p20", "value_p80"]  # fmt: skip
    for bucket in RunSource.open(store).buckets():
        df = bucket.select(cols).to_pandas()
        prev = df.groupby(["series_key", "release_rank"], sort=False).shift(1)
        df = df.assign(
            a_median=prev["value_median"],
            a_p20=prev["value_p20"],
            a_p80=prev["value_p80"],
            gap_s=(df["observed_at"] - prev["observed_at"]).dt.total_seconds(),
        )
        # Runs of one release an hour or more apart may be two commits (a release point
        # pools them): an A/A pair only where the point is one commit.
        same_code = (df["gap_s"] < NEAR_S) | bucket.column("commit_sha").is_valid().to_numpy(
            zero_copy_only=False
        )
        frames.append(df[df["a_median"].notna() & same_code])
    if not frames:
        return pd.DataFrame(columns=[*cols, "a_median", "a_p20", "a_p80", "gap_s"])
    out = pd.concat(frames, ignore_index=True)
    out = out.rename(columns={"metric": "metric_name", "operation_mode": "kernel_operation_mode"})
    for col in ("value_median", "value_p20", "value_p80", "a_median", "a_p20", "a_p80"):
        out[col] = out[col].astype(float)
    return out


# Two runs of one commit this far apart ran on another day, maybe another host or driver;
# closer than NEAR_S they are one sitting's repeats.
FAR_S = 86_400.0
NEAR_S = 3_600.0


def host_variance(pairs: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per series class (`metric/pass`): the spread of same-point pairs run in one sitting
    (< 1 h apart) and on other days (>= 1 day), as the standard deviation of one run's log
    value (pair differences / sqrt 2), and the host component: the far pairs' variance
    beyond the near pairs', sqrt(max(0, far^2 - near^2)). A class with no far pairs has none
    measured (null): the data then holds no re-run of a commit on another day."""
    out: dict[str, dict[str, Any]] = {}
    if pairs.empty or "gap_s" not in pairs:
        return out
    diff = np.log(pairs["value_median"].to_numpy(float)) - np.log(pairs["a_median"].to_numpy(float))
    gap = pairs["gap_s"].to_numpy(float)
    cls = (pairs["metric_name"] + "/" + pairs["kernel_operation_mode"]).to_numpy(str)
    for name in sorted(set(cls)):
        mine = cls == name
        near, far = diff[mine & (gap < NEAR_S)], diff[mine & (gap >= FAR_S)]

        def sd(d: np.ndarray) -> float | None:
            return round(float(np.sqrt(np.mean(d**2) / 2)), 5) if len(d) else None

        s_near, s_far = sd(near), sd(far)
        host = (
            round(math.sqrt(max(0.0, s_far**2 - (s_near or 0.0) ** 2)), 5)
            if s_far is not None
            else None
        )
        out[name] = {
            "near_pairs": len(near),
            "far_pairs": len(far),
            "near_sigma": s_near,
            "far_sigma": s_far,
            "host_sigma": host,
            "far_moved_over_10pct": (
                round(float((np.abs(np.expm1(far)) > 0.10).mean()), 4) if len(far) else None
            ),
        }
    return out


def _arrays(pairs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    la = np.log(pairs["a_median"].to_numpy(float))
    lb = np.log(pairs["value_median"].to_numpy(float))
    wa = within_sigma(pairs["a_p20"].to_numpy(float), pairs["a_p80"].to_numpy(float))
    wb = within_sigma(pairs["value_p20"].to_numpy(float), pairs["value_p80"].to_numpy(float))
    return la, lb, wa, wb


def residual_pool(pairs: pd.DataFrame, model: NoiseModel) -> np.ndarray:
    """Standardized run-to-run residuals of real A/A speed pairs under `model`."""
    la, lb, wa, wb = _arrays(pairs)
    scale = np.sqrt(model.run_sigma(wa) ** 2 + model.run_sigma(wb) ** 2)
    return np.asarray((lb - la) / scale * math.sqrt(2.0))


@dataclass
class Synthetic:
    runs: pa.Table
    truth: dict[str, tuple[float, str | None]]  # series key -> (step, release of the step)


def synthetic(
    points: pd.DataFrame,
    *,
    releases: int,
    steps: Sequence[float],
    model: NoiseModel,
    pool: np.ndarray,
    rng: np.random.Generator,
    copies: int = 1,
    prefix: str = "s",
) -> Synthetic:
    """Series of `releases` releases built on real points; step i of `steps` goes to copy i.

    Every point yields `copies` series per step; speed noise is resampled from `pool` times
    the point's own run sigma; memory is exact (a step below one byte rounds up to one byte).
    """
    versions = [f"9.{i}.0" for i in range(releases)]
    n = len(points) * copies * len(steps)
    base = np.tile(points["value_median"].to_numpy(float), copies * len(steps))
    p20 = np.tile(points["value_p20"].to_numpy(float), copies * len(steps))
    p80 = np.tile(points["value_p80"].to_numpy(float), copies * len(steps))
    metric = np.tile(points["metric_name"].to_numpy(str), copies * len(steps))
    mode = np.tile(points["kernel_operation_mode"].to_numpy(str), copies * len(steps))
    kernel = np.tile(points["kernel_name"].to_numpy(str), copies * len(steps))
    provider = np.tile(points["kernel_provider"].to_numpy(str), copies * len(steps))
    step = np.repeat(np.asarray(steps, float), len(points) * copies)
    at = rng.integers(1, releases - 1, size=n)  # at least one release before, two after
    w = within_sigma(p20, p80)
    sigma = model.run_sigma(w)
    memory = np.isin(metric, list(DETERMINISTIC_METRICS))
    eps = rng.choice(pool, size=(n, releases)) * sigma[:, None]
    eps[memory] = 0.0
    after = np.arange(releases)[None, :] >= at[:, None]
    factor = np.where(after & (step[:, None] > 0), 1.0 + step[:, None], 1.0)
    values = base[:, None] * np.exp(eps) * factor
    mem_step = np.where(
        after & (step[:, None] > 0), np.maximum(1.0, np.round(base * step))[:, None], 0
    )
    values = np.where(memory[:, None], base[:, None] + mem_step, values)
    med = np.maximum(np.round(values), 1).astype(np.int64)
    lo = np.exp(-0.8416212335729143 * w)[:, None]
    hi = np.exp(0.8416212335729143 * w)[:, None]
    keys = [f"{prefix}{i:07d}" for i in range(n)]
    truth = {
        k: (float(s), versions[int(a)] if s > 0 else None)
        for k, s, a in zip(keys, step, at, strict=True)
    }
    r = releases
    table = pa.table(
        {
            "series_key": np.repeat(keys, r),
            "release_rank": np.tile(np.arange(r, dtype=np.int32), n),
            "liger_version": np.tile(versions, n),
            "external_id": [f"{k}/{v}" for k in keys for v in versions],
            "value_median": med.ravel(),
            "value_p20": np.round(med * lo).astype(np.int64).ravel(),
            "value_p80": np.round(med * hi).astype(np.int64).ravel(),
            "metric": np.repeat(metric, r),
            "operation_mode": np.repeat(mode, r),
            "kernel": np.repeat(kernel, r),
            "provider": np.repeat(provider, r),
        }
    )
    # The rest of a series' metadata (what the detector reports per series) is unknown here.
    for col in SERIES_META:
        if col not in table.column_names:
            table = table.append_column(col, pa.nulls(table.num_rows, pa.string()))
    return Synthetic(table, truth)


def score(
    rows: list[dict[str, Any]], truth: dict[str, tuple[float, str | None]], classes: pd.Series
) -> pd.DataFrame:
    """Per series: its class, step, whether the step was found at its release, and false
    alerts (an alert or improvement anywhere else)."""
    found: dict[str, bool] = {}
    false: dict[str, int] = {}
    for r in rows:
        if r["state"] not in ("alert", "improvement"):
            continue
        step, release = truth[r["series_key"]]
        hit = step > 0 and r["after_release"] == release and r["direction"] in ("slower", "larger")
        if hit:
            found[r["series_key"]] = True
        else:
            false[r["series_key"]] = false.get(r["series_key"], 0) + 1
    keys = list(truth)
    return pd.DataFrame(
        {
            "series_key": keys,
            "class": classes.to_numpy(),
            "step": [truth[k][0] for k in keys],
            "found": [found.get(k, False) for k in keys],
            "false_alerts": [false.get(k, 0) for k in keys],
        }
    )


def measure(
    points: pd.DataFrame,
    settings: DetectorSettings,
    pool: np.ndarray,
    *,
    releases: int = 8,
    copies: int = 4,
    seed: int = 10,
) -> dict[str, Any]:
    """False-alarm rate (A/A), detection rate per step, precision per step, by class."""
    rng = np.random.default_rng(seed)
    syn = synthetic(
        points,
        releases=releases,
        steps=(0.0, *STEPS),
        model=settings.noise,
        pool=pool,
        rng=rng,
        copies=copies,
    )
    rows = detect(syn.runs, settings)
    classes = pd.Series(
        np.tile(
            (points["metric_name"] + "/" + points["kernel_operation_mode"]).to_numpy(str),
            copies * (1 + len(STEPS)),
        )
    )
    s = score(rows, syn.truth, classes)
    out: dict[str, Any] = {
        "false_alarm_rate": {},
        "detection_rate": {},
        "precision": {},
        "series": {},
    }
    groups = [("all", s), *((c, g) for c, g in s.groupby("class"))]
    for cls, g in groups:
        aa = g[g["step"] == 0]
        out["series"][cls] = len(aa)
        out["false_alarm_rate"][cls] = round(float((aa["false_alerts"] > 0).mean()), 4)
        out["detection_rate"][cls] = {}
        out["precision"][cls] = {}
        for step in STEPS:
            inj = g[g["step"] == step]
            true_pos = int(inj["found"].sum())
            # Precision at this step size: of the alerts raised on a population of A/A series
            # and series with this step (equal numbers), the share that are the true one.
            false_pos = int((inj["false_alerts"]).sum() + aa["false_alerts"].sum())
            out["detection_rate"][cls][f"{step:.2f}"] = round(true_pos / max(len(inj), 1), 4)
            out["precision"][cls][f"{step:.2f}"] = (
                round(true_pos / (true_pos + false_pos), 4) if true_pos + false_pos else None
            )
    return out


# The rules' thresholds (`rules`), read from and written to calibration.json's `detector`.
RULE_SETTINGS = (
    "class_tolerance",
    "class_min_peers",
    "launch_bound_ns",
    "confirm_points",
    "memory_confirm_points",
    "announce_z",
    "noise_cap",
    "repeat_min_dof",
    "jump_min_points",
)


@dataclass(frozen=True)
class SeriesClass:
    """Series whose protocol is of another family than upstream's timer (our re-runs' device
    time): analysed apart, with the noise model fitted on their own A/A and their own minimum
    effect (calibration.json `classes`, written by `python -m kindex_etl.gpu.device_ab`)."""

    name: str  # the regressions' series_class prefix: `<name>/<pass>`
    family: str  # the protocol documents' spec.comparability.family
    settings: DetectorSettings
    false_alarm_rate: float | None


@dataclass(frozen=True)
class Calibration:
    settings: DetectorSettings
    rates: dict[str, float]
    measured: dict[str, Any] = field(default_factory=dict)
    classes: tuple[SeriesClass, ...] = ()

    def false_alarm_rate(self, metric: str, mode: str) -> float | None:
        return self.rates.get(f"{metric}/{mode}", self.rates.get(metric, self.rates.get("all")))

    def class_of(self, family: str | None) -> SeriesClass | None:
        """The class of series timed by protocols of `family`; None: upstream's settings."""
        return next((c for c in self.classes if c.family == family), None)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Calibration:
        det = data["detector"]
        noise = NoiseModel(**data["noise"])
        settings = DetectorSettings(
            z_threshold=det["z_threshold"],
            min_effect=det["min_effect"],
            persistence=det["persistence"],
            noise=noise,
            memory_min_effect=det.get("memory_min_effect", DetectorSettings.memory_min_effect),
            environment_kernels=det.get(
                "environment_kernels", DetectorSettings.environment_kernels
            ),
            environment_across=det.get("environment_across", DetectorSettings.environment_across),
            full_needs_pass=det.get("full_needs_pass", DetectorSettings.full_needs_pass),
            **{k: det[k] for k in RULE_SETTINGS if k in det},
        )
        rates = dict(data["measured"]["false_alarm_rate"])
        for metric in SCALE:
            # A class never measured (a pass new to upstream) takes its metric's rate.
            measured = [v for k, v in rates.items() if k.startswith(metric + "/")]
            if measured:
                rates.setdefault(metric, max(measured))
        classes = tuple(
            SeriesClass(
                name,
                entry["family"],
                replace(
                    settings,
                    noise=NoiseModel(**entry["noise"]),
                    min_effect=entry["min_effect"],
                    z_threshold=entry.get("z_threshold", settings.z_threshold),
                ),
                entry.get("false_alarm_rate"),
            )
            for name, entry in sorted(data.get("classes", {}).items())
        )
        return cls(settings, rates, dict(data["measured"]), classes)


@cache
def default_calibration() -> Calibration:
    text = resources.files(__package__).joinpath("calibration.json").read_text(encoding="utf-8")
    return Calibration.from_json(json.loads(text))


PAIR_COLUMNS = ["metric_name", "kernel_operation_mode", "a_median", "a_p20", "a_p80",
                "value_median", "value_p20", "value_p80", "gap_s"]  # fmt: skip


def save_pairs(pairs: pd.DataFrame, path: Path) -> None:
    """A warehouse's A/A pairs as a CSV (gzip when the name ends in .gz): what the noise fit
    reads of them, kept as data where the warehouse itself cannot be (upstream's history)."""
    # gzip with a zero mtime: the same pairs make the same bytes.
    compression = {"method": "gzip", "mtime": 0} if path.suffix == ".gz" else None
    pairs[PAIR_COLUMNS].sort_values(PAIR_COLUMNS).to_csv(path, index=False, compression=compression)


def load_pairs(paths: Sequence[Path]) -> pd.DataFrame:
    if not paths:
        return pd.DataFrame(columns=PAIR_COLUMNS)
    frames = [pd.read_csv(p, dtype={"metric_name": str, "kernel_operation_mode": str})
              for p in paths]  # fmt: skip
    return pd.concat(frames, ignore_index=True)


def calibrate(
    sample: Path,
    pairs: Sequence[Path],
    *,
    z_threshold: float,
    min_effect: float,
    persistence: int,
    copies: int,
    warehouse: str | None = None,
    saved_pairs: Sequence[Path] = (),
    memory_min_effect: float = DetectorSettings.memory_min_effect,
    environment_kernels: int = DetectorSettings.environment_kernels,
) -> dict[str, Any]:
    sample_points = read_points([sample])
    csv_aa = aa_pairs(read_points([sample, *pairs]))
    in_sample = aa_pairs(sample_points)
    wh_aa = warehouse_pairs(open_store(warehouse)) if warehouse else csv_aa.iloc[:0]
    saved = load_pairs(saved_pairs)
    wh_aa = pd.concat([wh_aa, saved], ignore_index=True) if len(saved) else wh_aa
    keep = ["metric_name", "kernel_operation_mode", "a_median", "a_p20", "a_p80",
            "value_median", "value_p20", "value_p80"]  # fmt: skip
    aa = pd.concat([csv_aa[keep], wh_aa[keep]], ignore_index=True)
    speed = aa[aa["metric_name"] == "speed"]
    memory = aa[aa["metric_name"] == "memory"]
    model = fit(*_arrays(speed))
    pool = residual_pool(speed, model)
    settings = DetectorSettings(
        z_threshold, min_effect, persistence, model, memory_min_effect, environment_kernels
    )
    measured = measure(sample_points, settings, pool, copies=copies)
    la, lb, _, _ = _arrays(speed)
    return {
        "noise": {"run_to_run": model.run_to_run, "floor": model.floor},
        "detector": {
            "z_threshold": z_threshold,
            "min_effect": min_effect,
            "persistence": persistence,
            "method": settings.method,
            "memory_min_effect": settings.memory_min_effect,
            "memory_method": settings.memory_method,
            "environment_kernels": settings.environment_kernels,
            "environment_across": settings.environment_across,
            "full_needs_pass": settings.full_needs_pass,
            **{k: getattr(settings, k) for k in RULE_SETTINGS},
        },
        "aa_pairs": {
            "speed": len(speed),
            "memory": len(memory),
            "memory_identical": int((memory["a_median"] == memory["value_median"]).sum()),
            "in_sample_csv_identity": len(in_sample),
            "from_csvs": len(csv_aa),
            "from_warehouse": len(wh_aa) - len(saved),
            "warehouse": warehouse,
            "from_saved_pairs": len(saved),
            "saved_pairs": [str(p) for p in saved_pairs],
            "speed_moved_over_10pct": round(float((np.abs(np.expm1(lb - la)) > 0.10).mean()), 4),
            "sources": [str(p) for p in pairs],
        },
        "sample": {"path": str(sample), "points": len(sample_points)},
        # Per source: pairs of one host's history are compared with each other only.
        "host_variance": {
            **(
                {"warehouse": host_variance(wh_aa.iloc[: len(wh_aa) - len(saved)])}
                if warehouse
                else {}
            ),
            **{Path(p).name: host_variance(load_pairs([p])) for p in saved_pairs},
        },
        "measured": measured,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kindex_etl.analysis.calibration")
    parser.add_argument("--sample", type=Path, required=True)
    parser.add_argument(
        "--pairs",
        type=Path,
        nargs="*",
        default=[],
        help="upstream-format CSVs whose same-identity rows are A/A pairs",
    )
    parser.add_argument(
        "--warehouse",
        default=None,
        help="a warehouse whose same-release runs of one series are A/A pairs",
    )
    parser.add_argument(
        "--saved-pairs",
        type=Path,
        nargs="*",
        default=[],
        help="A/A pairs saved by --save-pairs (a warehouse of upstream history, as data)",
    )
    parser.add_argument(
        "--save-pairs",
        type=Path,
        default=None,
        help="write --warehouse's A/A pairs here (CSV, .gz compresses) and stop",
    )
    parser.add_argument("--memory-min-effect", type=float, default=0.005)
    parser.add_argument("--environment-kernels", type=int, default=5)
    parser.add_argument("--z-threshold", type=float, default=4.0)
    parser.add_argument("--min-effect", type=float, default=0.05)
    parser.add_argument("--persistence", type=int, default=2)
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.save_pairs is not None:
        if not args.warehouse:
            parser.error("--save-pairs needs --warehouse")
        save_pairs(warehouse_pairs(open_store(args.warehouse)), args.save_pairs)
        return 0
    result = calibrate(
        args.sample,
        args.pairs,
        z_threshold=args.z_threshold,
        min_effect=args.min_effect,
        persistence=args.persistence,
        copies=args.copies,
        warehouse=args.warehouse,
        saved_pairs=args.saved_pairs,
        memory_min_effect=args.memory_min_effect,
        environment_kernels=args.environment_kernels,
    )
    text = json.dumps(result, indent=1, sort_keys=True) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
