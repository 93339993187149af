"""A/A and A/B of device-time campaigns, each timer's series with a noise model of its own.

Reads campaign folders as `--device-time` writes them (campaign.json; per run run.json and
device_time.json) and holds two kinds of series, never mixed:

- `device`: keyed by the device-time protocol digest (`device_time.protocol_document`: one per
  method and pass) and the point (kernel, provider, pass, x, config, call);
- `upstream`: the same points as upstream's timer measured them in the same runs, keyed by the
  digest the normalizer gives upstream's speed protocol for that pass.

Noise, per timer, fitted on that timer's own A/A pairs (consecutive repeats of one version at
one point): a run's sigma in log space is sqrt((k * within)^2 + floor^2), within being
ln(p80 / p20) / 1.683 of the run itself, k and floor by maximum likelihood: the regressions
analysis's own model and fit (`analysis.noise`, docs/regressions.md), on this timer's pairs.
A/B, per series: the candidate's mean log time against the baseline's; its standard error the
larger of the model's and the repeats' own pooled spread; 95 % interval; an alert where
|z| >= Z and the change is at least the timer's minimum effect. The same test on each version
split against itself (odd against even repeats) is the A/A check: any alert there is a false
alarm.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from kindex_etl.gpu import device_time

Z = 4.0  # as the regressions detector: a change must clear four noise sigmas
# The smallest change worth an alert. Upstream's timer keeps the regressions analysis's 5 %;
# device time is steady enough to call 1 % (A/A median under 0.5 %, see docs/reruns.md).
MIN_EFFECT = {"device": 0.01, "upstream": 0.05}
SPREAD_TO_SIGMA = 1.683  # p80 - p20 of a normal is 1.683 sigma
_K_GRID = np.concatenate([[0.0], np.geomspace(0.05, 40.0, 60)])
_FLOOR_GRID = np.geomspace(1e-5, 1.0, 120)


@dataclass(frozen=True)
class Figure:
    p50: float
    p20: float | None
    p80: float | None

    @property
    def within(self) -> float:
        """This run's own spread as a log-space sigma (0 where it has none)."""
        if not self.p20 or not self.p80 or self.p20 <= 0 or self.p80 < self.p20:
            return 0.0
        return math.log(self.p80 / self.p20) / SPREAD_TO_SIGMA


@dataclass(frozen=True)
class Run:
    campaign: str
    version: str
    repeat: int
    role: str


@dataclass
class Series:
    timer: str  # "device" | "upstream"
    protocol: str  # the protocol digest: part of the key, so two timers never share a series
    kernel: str
    provider: str
    mode: str
    x: str
    config: str
    call: int
    method: str  # device: cuda_graph | cupti; upstream: do_bench
    host_bound: bool = False  # device series: upstream's timer read >= the factor x device time
    figures: dict[Run, Figure] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, ...]:
        return (self.timer, self.protocol, self.kernel, self.provider, self.mode, self.x,
                self.config, str(self.call))  # fmt: skip


@cache
def upstream_protocol(mode: str) -> str:
    """The digest the normalizer gives upstream's speed rows of this pass."""
    from kindex_etl.contracts.digests import digest
    from kindex_etl.normalize.descriptors import protocol_document

    return digest(protocol_document("speed", mode).document())


def _figure(raw: dict[str, Any]) -> Figure | None:
    p50 = raw.get("p50_ms")
    if not isinstance(p50, int | float) or not p50 > 0:
        return None
    return Figure(float(p50), raw.get("p20_ms"), raw.get("p80_ms"))


def load(folders: Iterable[Path]) -> list[Series]:
    """Every series of the campaigns' device_time.json files, both timers."""
    series: dict[tuple[str, ...], Series] = {}
    for folder in folders:
        for path in sorted(Path(folder).glob("runs/*/*/device_time.json")):
            manifest = json.loads((path.parent / "run.json").read_text())
            run = Run(manifest["campaignId"], manifest["version"], int(manifest["repeat"]),
                      manifest["role"])  # fmt: skip
            # A script that failed or timed out wrote no rows: its points are not a run's.
            failed = {s["script"] for s in manifest["scripts"] if s.get("returncode") != 0}
            data = json.loads(path.read_text())
            for p in data["points"]:
                if not p.get("protocolDigest") or p["point"].get("metric_name") != "speed":
                    continue
                if p.get("script") in failed:
                    continue
                pt = p["point"]
                base = (
                    pt["kernel_name"],
                    pt["kernel_provider"],
                    pt["kernel_operation_mode"],
                    pt["x_value"],
                    pt["extra_benchmark_config_str"],
                    int(p["call"]),
                )
                timers = (
                    ("device", p["protocolDigest"], p["device"]["method"], p["device"]),
                    ("upstream", upstream_protocol(base[2]), "do_bench", p["upstream"]),
                )
                for timer, protocol, method, raw in timers:
                    fig = _figure(raw)
                    if fig is None:
                        continue
                    s = Series(timer, protocol, *base, method=method)
                    s = series.setdefault(s.key, s)
                    s.figures[run] = fig
                    if timer == "device" and p.get("hostBound"):
                        s.host_bound = True
    return sorted(series.values(), key=lambda s: s.key)


def aa_pairs(s: Series) -> list[tuple[Figure, Figure]]:
    """Consecutive repeats of one version of one campaign: the A/A pairs."""
    by_version: dict[tuple[str, str], list[tuple[int, Figure]]] = defaultdict(list)
    for run, fig in s.figures.items():
        by_version[(run.campaign, run.version)].append((run.repeat, fig))
    pairs = []
    for runs in by_version.values():
        runs.sort(key=lambda r: r[0])
        pairs += [(a, b) for (_, a), (_, b) in itertools.pairwise(runs)]
    return pairs


@dataclass(frozen=True)
class NoiseModel:
    k: float
    floor: float
    pairs: int

    def sigma(self, fig: Figure) -> float:
        return math.hypot(self.k * fig.within, self.floor)


def fit_noise(series: Sequence[Series]) -> NoiseModel:
    """The regressions analysis's noise model (`analysis.noise.fit`: the same form, the same
    likelihood), fitted on these series' own A/A pairs, over grids that reach device time's
    sub-0.1 % floors (the analysis's own floors start at 0.25 %)."""
    from kindex_etl.analysis import noise

    d, w1, w2 = [], [], []
    for s in series:
        for a, b in aa_pairs(s):
            d.append((math.log(a.p50), math.log(b.p50)))
            w1.append(a.within)
            w2.append(b.within)
    if not d:
        raise ValueError("no A/A pairs to fit a noise model on")
    logs = np.asarray(d)
    model = noise.fit(
        logs[:, 0], logs[:, 1], np.asarray(w1), np.asarray(w2),
        floors=tuple(float(f) for f in _FLOOR_GRID), factors=tuple(float(k) for k in _K_GRID),
    )  # fmt: skip
    return NoiseModel(model.run_to_run, model.floor, len(d))


@dataclass(frozen=True)
class Comparison:
    series: Series
    candidate: str
    baseline: str
    ratio: float  # candidate / baseline, geometric means of the repeats
    low: float  # 95 % interval
    high: float
    z: float
    alert: bool
    runs: tuple[int, int]

    @property
    def detectable(self) -> float:
        """The smallest change (a fraction) this comparison would alert on: Z standard errors
        of its own (the 95 % interval's), and never under the timer's minimum effect."""
        se = (math.log(self.high) - math.log(self.low)) / (2 * 1.96)
        return max(MIN_EFFECT[self.series.timer], math.exp(Z * se) - 1)


def compare(
    s: Series, model: NoiseModel, cand: Sequence[Figure], base: Sequence[Figure],
    candidate: str, baseline: str,
) -> Comparison:  # fmt: skip
    lc = [math.log(f.p50) for f in cand]
    lb = [math.log(f.p50) for f in base]
    d = sum(lc) / len(lc) - sum(lb) / len(lb)
    model_var = (sum(model.sigma(f) ** 2 for f in cand) / len(cand) ** 2
                 + sum(model.sigma(f) ** 2 for f in base) / len(base) ** 2)  # fmt: skip
    dof = len(lc) + len(lb) - 2
    observed_var = 0.0
    if dof > 0:
        ss = sum((x - sum(lc) / len(lc)) ** 2 for x in lc)
        ss += sum((x - sum(lb) / len(lb)) ** 2 for x in lb)
        observed_var = ss / dof * (1 / len(lc) + 1 / len(lb))
    se = math.sqrt(max(model_var, observed_var))
    z = d / se if se > 0 else math.inf
    ratio = math.exp(d)
    alert = abs(z) >= Z and abs(ratio - 1) >= MIN_EFFECT[s.timer]
    return Comparison(s, candidate, baseline, ratio, math.exp(d - 1.96 * se),
                      math.exp(d + 1.96 * se), z, alert, (len(lc), len(lb)))  # fmt: skip


def _versions(s: Series) -> dict[tuple[str, str], list[tuple[Run, Figure]]]:
    out: dict[tuple[str, str], list[tuple[Run, Figure]]] = defaultdict(list)
    for run, fig in s.figures.items():
        out[(run.campaign, run.version)].append((run, fig))
    for runs in out.values():
        runs.sort(key=lambda r: r[0].repeat)
    return out


def ab(series: Sequence[Series], model: NoiseModel) -> list[Comparison]:
    """Candidate against baseline, per series of a campaign that measured both."""
    out = []
    for s in series:
        versions = _versions(s)
        for (campaign, version), runs in versions.items():
            if runs[0][0].role != "candidate":
                continue
            for (c2, other), base in versions.items():
                if c2 == campaign and other != version:
                    out.append(compare(s, model, [f for _, f in runs], [f for _, f in base],
                                       version, other))  # fmt: skip
    return out


def aa_checks(series: Sequence[Series], model: NoiseModel) -> list[Comparison]:
    """Each version against itself, odd repeats against even: alerts here are false alarms."""
    out = []
    for s in series:
        for (_, version), runs in _versions(s).items():
            odd = [f for r, f in runs if r.repeat % 2 == 1]
            even = [f for r, f in runs if r.repeat % 2 == 0]
            if odd and even:
                out.append(compare(s, model, odd, even, version, version))
    return out


def aa_percent(series: Sequence[Series]) -> list[float]:
    """|b / a - 1| in percent of every A/A pair."""
    return [abs(b.p50 / a.p50 - 1) * 100 for s in series for a, b in aa_pairs(s)]


def aa_summary(series: Sequence[Series]) -> dict[str, Any]:
    pcts = aa_percent(series)
    if not pcts:
        return {"pairs": 0}
    arr = np.asarray(pcts)
    return {
        "pairs": len(pcts),
        "median": float(np.median(arr)),
        "p90": float(np.quantile(arr, 0.9)),
        "max": float(arr.max()),
        "over2": float((arr > 2).mean() * 100),
        "over5": float((arr > 5).mean() * 100),
    }


def by_timer(series: Sequence[Series], timer: str) -> list[Series]:
    return [s for s in series if s.timer == timer]


def check_separation(series: Sequence[Series]) -> None:
    """Raise if any protocol digest is shared by the two timers (their series would mix)."""
    device = {s.protocol for s in series if s.timer == "device"}
    upstream = {s.protocol for s in series if s.timer == "upstream"}
    if device & upstream:
        raise ValueError(f"a protocol digest is both timers': {sorted(device & upstream)}")
    if device and device_time.spec()["family"] == "liger_kernel_bench":
        raise ValueError("the device-time protocol family must not be upstream's")


# The regressions analysis's calibration class for device-time series (analysis/calibration.json
# `classes`), fitted here because the fit reads campaign folders, which the analysis does not.
CALIBRATION_CLASS = "device_time"
# Today's protocol's campaigns of the H200 fixture (campaign-dyt2 timed by protocol 2).
CALIBRATION_CAMPAIGNS = ("campaign-slow3", "campaign-c854", "campaign-c854b")


def calibration_class(folders: Sequence[Path]) -> dict[str, Any]:
    """The device-time class of the regressions analysis, from these campaigns' own A/A: the
    noise model fitted on their device series' A/A pairs (`fit_noise`), the minimum effect this
    module calls device time by, the analysis's z, and the false-alarm rate of the A/A checks
    (each release's odd repeats against its even ones) under that model."""
    device = [s for s in by_timer(load(folders), "device") if s.protocol in _current()]
    model = fit_noise(device)
    checks = aa_checks(device, model)
    return {
        "family": device_time.spec()["family"],
        "noise": {"run_to_run": round(model.k, 4), "floor": round(model.floor, 6)},
        "min_effect": MIN_EFFECT["device"],
        "z_threshold": Z,
        "aa_pairs": model.pairs,
        "aa_checks": len(checks),
        "false_alarm_rate": round(sum(c.alert for c in checks) / len(checks), 4),
        "campaigns": [Path(f).name for f in folders],
    }


def _current() -> set[str]:
    """Today's device-time protocol digests: the class is fitted on today's protocol only."""
    methods = device_time.spec()["methods"]
    modes = ("forward", "backward", "full")
    return {device_time.digest(device_time.protocol_document(m, p)) for m in methods for p in modes}


def main(argv: Sequence[str] | None = None) -> int:
    """(Re)write the calibration's device-time class from FIXTURE's campaigns:

    python -m kindex_etl.gpu.device_ab tests/fixtures/h200_device_time_0.8.5 \\
        --calibration kindex_etl/analysis/calibration.json
    """
    import argparse

    parser = argparse.ArgumentParser(prog="python -m kindex_etl.gpu.device_ab")
    parser.add_argument("fixture", type=Path, help="a folder of campaign-* folders")
    parser.add_argument("--calibration", type=Path, required=True)
    args = parser.parse_args(argv)
    entry = calibration_class([args.fixture / c for c in CALIBRATION_CAMPAIGNS])
    entry["campaigns"] = [str(args.fixture / c) for c in CALIBRATION_CAMPAIGNS]
    data = json.loads(args.calibration.read_text())
    data.setdefault("classes", {})[CALIBRATION_CLASS] = entry
    args.calibration.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(json.dumps(entry, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
