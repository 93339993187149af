"""Small inline SVG charts: releases on x, values on y, a p20-p80 band, alerts marked.

No library and nothing fetched: the report must open from a bucket or a folder with no
server, so every chart is plain SVG markup inside the page.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")
ALERT = "#d62728"
W, H = 300, 170
LEFT, RIGHT, TOP, BOTTOM = 48, 8, 20, 34


@dataclass
class Line:
    label: str
    values: dict[str, float]  # release -> value
    low: dict[str, float] = field(default_factory=dict)
    high: dict[str, float] = field(default_factory=dict)
    alerts: set[str] = field(default_factory=set)  # releases where a change alert starts
    color: str = PALETTE[0]


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    exp = math.floor(math.log10(abs(v)))
    if -3 <= exp <= 4:
        return f"{v:.{max(0, 2 - exp)}f}"
    return f"{v:.2g}"


def chart(
    title: str,
    releases: Sequence[str],
    lines: Sequence[Line],
    *,
    unit: str,
    baseline: float | None = None,
) -> str:
    """One chart as an `<svg>` element; `baseline` draws a dashed reference (e.g. 1.0)."""
    ys = [v for ln in lines for d in (ln.values, ln.low, ln.high) for v in d.values()]
    if baseline is not None:
        ys.append(baseline)
    lo, hi = (min(ys), max(ys)) if ys else (0.0, 1.0)
    if hi <= lo:
        lo, hi = lo * 0.95 - 1e-12, hi * 1.05 + 1e-12
    pad = (hi - lo) * 0.08
    lo, hi = lo - pad, hi + pad
    n = max(len(releases), 1)
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x(release: str) -> float:
        i = releases.index(release)
        return LEFT + (pw * (i + 0.5) / n)

    def y(v: float) -> float:
        return TOP + ph * (1 - (v - lo) / (hi - lo))

    parts = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
        f'viewBox="0 0 {W} {H}" role="img" aria-label="{escape(title)}">',
        f'<text x="{LEFT}" y="13" class="ct">{escape(title)}</text>',
        f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" class="frame"/>',
    ]
    for frac in (0.0, 0.5, 1.0):
        v = lo + (hi - lo) * frac
        parts.append(
            f'<text x="{LEFT - 4}" y="{y(v) + 3:.1f}" class="yt">{_fmt(v)}</text>'
            f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{y(v):.1f}" y2="{y(v):.1f}" class="grid"/>'
        )
    step = max(1, math.ceil(n / 6))
    for i, r in enumerate(releases):
        if i % step == 0 or i == n - 1:
            parts.append(
                f'<text x="{x(r):.1f}" y="{H - BOTTOM + 13}" class="xt">{escape(r)}</text>'
            )
    parts.append(f'<text x="{W - RIGHT}" y="{H - 4}" class="unit">{escape(unit)}</text>')
    if baseline is not None:
        parts.append(
            f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{y(baseline):.1f}" y2="{y(baseline):.1f}" '
            'class="ref"/>'
        )
    for ln in lines:
        rel = [r for r in releases if r in ln.values]
        band = [r for r in rel if r in ln.low and r in ln.high]
        if len(band) >= 2:
            pts = [f"{x(r):.1f},{y(ln.high[r]):.1f}" for r in band]
            pts += [f"{x(r):.1f},{y(ln.low[r]):.1f}" for r in reversed(band)]
            parts.append(f'<polygon points="{" ".join(pts)}" fill="{ln.color}" class="band"/>')
        for r in band:
            parts.append(
                f'<line x1="{x(r):.1f}" x2="{x(r):.1f}" y1="{y(ln.low[r]):.1f}" '
                f'y2="{y(ln.high[r]):.1f}" stroke="{ln.color}" class="whisker"/>'
            )
        if len(rel) >= 2:
            path = " ".join(f"{x(r):.1f},{y(ln.values[r]):.1f}" for r in rel)
            parts.append(f'<polyline points="{path}" stroke="{ln.color}" class="line"/>')
        for r in rel:
            alert = r in ln.alerts
            parts.append(
                f'<circle cx="{x(r):.1f}" cy="{y(ln.values[r]):.1f}" r="{4.5 if alert else 2.5}" '
                f'fill="{ALERT if alert else ln.color}" class="{"alert" if alert else "pt"}">'
                f"<title>{escape(ln.label)} {escape(r)}: {_fmt(ln.values[r])} {escape(unit)}"
                f"{' (change alert)' if alert else ''}</title></circle>"
            )
    if len(lines) > 1 or (lines and lines[0].label):
        lx = LEFT + 4
        for ln in lines[:4]:
            parts.append(
                f'<text x="{lx}" y="{TOP + 11}" class="lg" fill="{ln.color}">'
                f"{escape(ln.label)}</text>"
            )
            lx += 7 * len(ln.label) + 12
    parts.append("</svg>")
    return "".join(parts)
