"""The device-time campaigns' page: A/A and A/B per kernel, device time against upstream's timer.

    python scripts/device_time_report.py [--fixture DIR] [--out docs/h200-device-time-0.8.5.md]

Reads the campaign folders of the fixture (tests/fixtures/h200_device_time_0.8.5/campaign-*),
fits each timer's noise model on its own A/A pairs (kindex_etl.gpu.device_ab) per campaign
group, and writes the page; tests/gpu/test_device_time_fixture.py checks it is current.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kindex_etl.gpu import device_ab as ab  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "h200_device_time_0.8.5"
OUT = ROOT / "docs" / "h200-device-time-0.8.5.md"
# The 0.8.5 against 0.8.4 campaigns (protocol 1), the injected slowdown (protocol 1), and the
# trial of protocol 2 (a 100 ms warm-up before timing each graph), kept apart.
GROUPS = {
    "0.8.5 against 0.8.4": ["campaign-c854", "campaign-c854b"],
    "deliberate slowdown": ["campaign-slow3"],
    "protocol 2 trial (dyt)": ["campaign-dyt2"],
}


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:.2f} %"


def _aa_rows(series: Sequence[ab.Series], group: str) -> list[str]:
    rows = []
    kernels = sorted({s.kernel for s in series})
    for kernel in kernels:
        for timer in ("device", "upstream"):
            sub = [s for s in series if s.kernel == kernel and s.timer == timer]
            model = ab.fit_noise(ab.by_timer(series, timer))
            aa = ab.aa_summary(sub)
            if not aa["pairs"]:
                continue
            abs_ = ab.ab(sub, model)
            checks = ab.aa_checks(sub, model)
            bound = sum(1 for s in sub if s.host_bound) if timer == "device" else None
            rows.append(
                f"| {group} | {kernel} | {timer} | {len(sub)} | {aa['pairs']} | "
                f"{_pct(aa['median'])} | {_pct(aa['p90'])} | {aa['over2']:.1f} % | "
                f"{aa['over5']:.1f} % | {sum(c.alert for c in checks)} / {len(checks)} | "
                f"{sum(c.alert for c in abs_)} / {len(abs_)} | "
                f"{'' if bound is None else bound} |"
            )
    return rows


def _totals(series: Sequence[ab.Series], group: str) -> list[str]:
    rows = []
    for timer in ("device", "upstream"):
        sub = ab.by_timer(series, timer)
        model = ab.fit_noise(sub)
        aa = ab.aa_summary(sub)
        rows.append(
            f"| {group} | {timer} | {aa['pairs']} | {_pct(aa['median'])} | {_pct(aa['p90'])} | "
            f"{aa['over2']:.1f} % | {aa['over5']:.1f} % | k = {model.k:.2f}, "
            f"floor = {model.floor * 100:.3f} % |"
        )
    return rows


def _injection(series: Sequence[ab.Series]) -> list[str]:
    rows = []
    models = {t: ab.fit_noise(ab.by_timer(series, t)) for t in ("device", "upstream")}
    comparisons = {
        t: {c.series.key[2:]: c for c in ab.ab(ab.by_timer(series, t), models[t])}
        for t in ("device", "upstream")
    }
    for key, dev in sorted(comparisons["device"].items(), key=lambda i: i[0]):
        up = comparisons["upstream"].get(key)
        s = dev.series
        flag = "**alert**" if dev.alert else ""
        upstream = " | |"
        if up is not None:
            upstream = f"{up.ratio:.3f} ({up.low:.3f} to {up.high:.3f}) | "
            upstream += "alert |" if up.alert else " |"
        rows.append(
            f"| {s.provider} | {s.mode} | {s.x} | {s.method} | "
            f"{dev.ratio:.4f} ({dev.low:.4f} to {dev.high:.4f}) | {flag} | "
            f"{dev.detectable * 100:.2f} % | {upstream}"
        )
    return rows


def _detectable(series: Sequence[ab.Series], group: str) -> list[str]:
    """Per kernel, pass and timer: the smallest change its A/B comparisons could see (median
    and largest over its series), from each timer's own A/A noise model (issue 53)."""
    rows = []
    for timer in ("device", "upstream"):
        sub = ab.by_timer(series, timer)
        comparisons = ab.ab(sub, ab.fit_noise(sub))
        by: dict[tuple[str, str], list[float]] = {}
        for c in comparisons:
            by.setdefault((c.series.kernel, c.series.mode), []).append(c.detectable * 100)
        for (kernel, mode), values in sorted(by.items()):
            values.sort()
            rows.append(
                f"| {group} | {kernel} | {mode} | {timer} | {len(values)} | "
                f"{_pct(values[len(values) // 2])} | {_pct(values[-1])} |"
            )
    return rows


def _protocols(folders: Sequence[Path]) -> list[str]:
    seen: dict[str, tuple[str, str]] = {}
    for folder in folders:
        for path in sorted(folder.glob("runs/*/*/device_time.json")):
            for digest, doc in json.loads(path.read_text())["protocols"].items():
                seen.setdefault(digest, (doc["metadata"]["name"], folder.name))
    return [f"| {name} | `{d[:19]}…` | {camp} |" for d, (name, camp) in sorted(seen.items())]


def render(fixture: Path = FIXTURE) -> str:
    out = [
        "# Device time on the H200: liger-kernel 0.8.5, its A/A and A/B",
        "",
        "*For: whoever judges our GPU re-runs' second timer: its figures on the H200.*",
        "",
        "Generated by `python scripts/device_time_report.py` from "
        "`tests/fixtures/h200_device_time_0.8.5/` (do not edit; "
        "`tests/gpu/test_device_time_fixture.py` checks it is current). How it was run and what "
        "the protocol is: [reruns.md](reruns.md#device-time-a-second-timer-for-our-re-runs).",
        "",
        "A/A pairs are consecutive repeats of one release at one point; `> 2 %` is the share of "
        "pairs whose medians differ by more than 2 %. A/A alerts: the A/B test applied to each "
        "release split against itself (odd against even repeats), so any alert is a false alarm. "
        "A/B alerts: candidate against baseline, |z| >= 4 and at least 1 % (device) or 5 % "
        "(upstream's timer), each timer with the noise model fitted on its own A/A pairs. "
        "Host-bound: device series whose upstream-timer figure was at least twice the device "
        "time in some run.",
        "",
        "## All points, per timer",
        "",
        "| campaign | timer | A/A pairs | median | p90 | > 2 % | > 5 % | noise model |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    loaded = {g: ab.load([fixture / c for c in camps]) for g, camps in GROUPS.items()}
    for group, series in loaded.items():
        ab.check_separation(series)
        out += _totals(series, group)
    out += [
        "",
        "## Per kernel",
        "",
        "| campaign | kernel | timer | series | A/A pairs | median | p90 | > 2 % | > 5 % | "
        "A/A alerts | A/B alerts | host-bound |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for group, series in loaded.items():
        out += _aa_rows(series, group)
    out += [
        "",
        "## The deliberate slowdown: 0.8.5+kindex.slow against 0.8.5 (rms_norm)",
        "",
        "0.8.5's wheel with a spin kernel (`torch.cuda._sleep`, 6e-5 SM cycles per element) "
        "launched after LigerRMSNorm's forward: liger's forward and full passes carry it, its "
        "backward and the huggingface provider do not (the controls). Ratio: candidate over "
        "baseline, geometric means of 3 repeats each, with the 95 % interval.",
        "",
        "| provider | pass | T | method | device time ratio | | smallest visible (device) | "
        "upstream timer ratio | |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    out += _injection(loaded["deliberate slowdown"])
    out += [
        "",
        "## The smallest change each A/B could see",
        "",
        "Per kernel, pass and timer, over its A/B series: the change a comparison would alert "
        "on, max(minimum effect, e^(4 se) - 1), se the comparison's standard error under the "
        "timer's own A/A noise model (or its repeats' spread, the larger). Shown beside each "
        "point's ratio above; the paired protocol's page has the same per point "
        "([h100-paired-device-time-0.8.5.md](h100-paired-device-time-0.8.5.md)).",
        "",
        "| campaign | kernel | pass | timer | A/B series | median | largest |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for group in ("0.8.5 against 0.8.4", "deliberate slowdown"):
        out += _detectable(loaded[group], group)
    out += [
        "",
        "## Protocols seen",
        "",
        "Each run's device_time.json carries the protocol documents it was timed by; protocol 2 "
        "(the dyt trial) has other digests for its CUDA-graph passes, so its series are not "
        "protocol 1's.",
        "",
        "| protocol | digest | first seen in |",
        "| --- | --- | --- |",
    ]
    out += _protocols([fixture / c for camps in GROUPS.values() for c in camps])
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--fixture", type=Path, default=FIXTURE)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    args.out.write_text(render(args.fixture))
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
