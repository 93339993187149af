"""A/A and A/B of paired device-time campaigns (`device_pair.py`), with the limits they admit.

A point of a sitting is one benchmark point (kernel, provider, pass, x, config, call) measured
in pairs of batches on each side, the sides interleaved (ABBA). Its estimate is the median over
its quads (an AB pair and the BA pair after it: `quads`) of their mean log difference ln(B / A);
a pair measured again because the sides' SM clocks differed by more than the tolerance is left
out (its repeat stands in), and so is its quad.

- **A/A** (a sitting of a build against itself): per point |B / A - 1|; per kernel its median,
  p90 and the share over 2 %.
- **The smallest change a campaign can see**, per kernel and pass, from its own A/A: the A/A
  points' root mean square log difference sigma (every provider and shape of that pass), times
  Z, and never under `MIN_EFFECT`: `detectable`.
- **A/B**: per point the same estimate; an alert where |ln(B / A)| >= Z * sigma, sigma the
  larger of the kernel-pass's A/A sigma and the point's own standard error over its rounds, and
  the change is at least `MIN_EFFECT`. The same test on the A/A points counts false alarms.
- **Clock**: each point keeps its sides' SM clocks during the batches (NVML), the largest
  spread between the sides in one round, and whether any measurement ran under a throttle
  reason (power cap, thermal, HW slowdown...): a marked point.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Z = 4.0  # as the regressions detector and device_ab
MIN_EFFECT = 0.01  # device time's minimum effect (device_ab.MIN_EFFECT["device"])
NOT_A_SLOWDOWN = 0x1 | 0x2  # NVML's idle and applications-clocks reasons (device_launch)


@dataclass(frozen=True)
class Point:
    campaign: str
    gpu: str
    sitting: str  # "aa" | "ab" | another name the campaign gave
    baseline: str
    candidate: str
    kernel: str
    provider: str
    mode: str
    x: str
    config: str
    call: int
    method: str
    log_ratio: float  # median over quads (else pairs) of ln(B / A)
    se: float  # the rounds' own standard error of that median's mean (0 with one round)
    rounds: int  # quads kept (pairs where too few quads were)
    extra_rounds: int  # pairs measured again (clocks apart)
    throttled: bool  # a measurement of this point ran under a slowdown reason
    clock_spread: float | None  # the largest |SM clock B / A - 1| of a kept round
    sm_clock_mhz: float | None  # median SM clock during the batches, both sides
    power_w: float | None

    @property
    def ratio(self) -> float:
        return math.exp(self.log_ratio)

    @property
    def percent(self) -> float:
        return abs(self.ratio - 1) * 100


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _throttled(reasons: Any) -> bool:
    return isinstance(reasons, int) and bool(reasons & ~NOT_A_SLOWDOWN)


def _point(campaign: dict[str, Any], sitting: dict[str, Any], rec: dict[str, Any]) -> Point | None:
    pt = rec["point"]
    if pt.get("metric_name") != "speed" or not rec.get("paired"):
        return None
    sides = rec.get("batchesBySide") or {}
    a, b = sides.get("A", {}), sides.get("B", {})
    off = set(rec.get("offClock", []))
    diffs, spreads, clocks, marked = [], [], [], False
    by_pair: dict[int, float] = {}
    for i, (ma, mb) in enumerate(zip(a.get("ms", []), b.get("ms", []), strict=False)):
        sa = a.get("sm", [])[i] if i < len(a.get("sm", [])) else None
        sb = b.get("sm", [])[i] if i < len(b.get("sm", [])) else None
        ta = a.get("throttle", [])[i] if i < len(a.get("throttle", [])) else None
        tb = b.get("throttle", [])[i] if i < len(b.get("throttle", [])) else None
        marked |= _throttled(ta) or _throttled(tb)
        if i in off or not (ma > 0 and mb > 0):
            continue
        diffs.append(math.log(mb / ma))
        by_pair[i] = diffs[-1]
        if sa and sb:
            spreads.append(abs(sb / sa - 1))
            clocks += [float(sa), float(sb)]
    if not diffs:
        return None
    diffs = quads(by_pair, rec.get("order") or []) or diffs
    # The median's standard error (1.2533 sigma / sqrt(n) for a normal).
    se = 1.2533 * statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else 0.0
    power = [float(s["state"]["powerW"]) for s in (a, b)
             if (s.get("state") or {}).get("powerW")]  # fmt: skip
    names = sitting["sides"]
    method = (rec.get("sides", {}).get("A") or {}).get("method") or ""
    return Point(
        campaign=campaign["campaignId"], gpu=str(campaign.get("gpu", {}).get("name", "")),
        sitting=sitting["sitting"], baseline=names[0]["version"], candidate=names[1]["version"],
        kernel=pt["kernel_name"], provider=pt["kernel_provider"],
        mode=pt["kernel_operation_mode"], x=pt["x_value"],
        config=pt["extra_benchmark_config_str"], call=int(rec["call"]), method=method,
        log_ratio=float(statistics.median(diffs)), se=se, rounds=len(diffs),
        extra_rounds=int(rec.get("extraPairs", 0)), throttled=marked,
        clock_spread=max(spreads) if spreads else None, sm_clock_mhz=_median(clocks),
        power_w=_median(power),
    )  # fmt: skip


def quads(by_pair: dict[int, float], order: Sequence[str]) -> list[float]:
    """ABBA's own estimate: the mean ln(B / A) of each AB pair and the BA pair after it (both
    kept). Whichever side runs first in a pair (in ABBA also: the side running its second
    batch in a row) can run slower or faster than the other for that alone (on the H100 up to
    4 % for a small point); the mean of an AB and a BA pair cancels it, a single pair does not.
    Empty where fewer than two such quads were kept (the pairs are used then)."""
    out = []
    for i in range(0, len(order) - 1, 2):
        if {order[i], order[i + 1]} == {"AB", "BA"} and i in by_pair and i + 1 in by_pair:
            out.append((by_pair[i] + by_pair[i + 1]) / 2)
    return out if len(out) >= 2 else []


def load(folders: Iterable[Path]) -> list[Point]:
    """Every paired speed point of these campaign folders (campaign.json, sittings/*.jsonl)."""
    out = []
    for folder in folders:
        campaign = json.loads((Path(folder) / "campaign.json").read_text())
        for sitting in campaign["sittings"]:
            path = Path(folder) / "sittings" / sitting["records"]
            if not path.is_file():
                continue
            for line in path.read_text().splitlines():
                if line.strip():
                    p = _point(campaign, sitting, json.loads(line))
                    if p is not None:
                        out.append(p)
    return out


def aa_points(points: Sequence[Point]) -> list[Point]:
    return [p for p in points if p.baseline == p.candidate]


def ab_points(points: Sequence[Point]) -> list[Point]:
    return [p for p in points if p.baseline != p.candidate]


def summary(points: Sequence[Point]) -> dict[str, Any]:
    """A/A figures of these points: count, median, p90, max, share and count over 2 %."""
    pcts = sorted(p.percent for p in points)
    if not pcts:
        return {"pairs": 0}
    over2 = sum(1 for v in pcts if v > 2)
    return {
        "pairs": len(pcts),
        "median": statistics.median(pcts),
        "p90": _quantile(pcts, 0.9),
        "max": pcts[-1],
        "over2": over2,
        "over2Share": over2 / len(pcts) * 100,
        "throttled": sum(1 for p in points if p.throttled),
    }


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    pos = q * (len(sorted_values) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def noise(points: Sequence[Point]) -> dict[tuple[str, str, str], float]:
    """Per (campaign, kernel, pass): the A/A sigma, the root mean square of ln(B / A)."""
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for p in aa_points(points):
        groups[(p.campaign, p.kernel, p.mode)].append(p.log_ratio)
    return {k: math.sqrt(sum(d * d for d in v) / len(v)) for k, v in groups.items()}


def detectable(sigma: float) -> float:
    """The smallest change (a fraction) a point of this A/A sigma alerts on."""
    return max(MIN_EFFECT, math.exp(Z * sigma) - 1)


@dataclass(frozen=True)
class Verdict:
    point: Point
    sigma: float
    alert: bool

    @property
    def detectable(self) -> float:
        return detectable(self.sigma)


def judge(points: Sequence[Point]) -> list[Verdict]:
    """Every point against its kernel-pass's A/A noise (A/A points too: false alarms)."""
    sigmas = noise(points)
    out = []
    for p in points:
        base = sigmas.get((p.campaign, p.kernel, p.mode))
        if base is None:
            continue  # no A/A of this kernel and pass in this campaign: nothing to judge by
        sigma = max(base, p.se)
        alert = abs(p.log_ratio) >= Z * sigma and abs(p.ratio - 1) >= MIN_EFFECT
        out.append(Verdict(p, sigma, alert))
    return out


def by_kernel(points: Sequence[Point]) -> dict[str, list[Point]]:
    out: dict[str, list[Point]] = defaultdict(list)
    for p in points:
        out[p.kernel].append(p)
    return dict(out)


def acceptance(points: Sequence[Point]) -> dict[str, dict[str, Any]]:
    """Per kernel: the A/A figures and whether they meet issue 53's bar (median under 0.5 %,
    at most 5 % of pairs over 2 %)."""
    out = {}
    for kernel, pts in sorted(by_kernel(aa_points(points)).items()):
        s = summary(pts)
        s["meets"] = bool(s["pairs"] and s["median"] < 0.5 and s["over2Share"] <= 5)
        out[kernel] = s
    return out
