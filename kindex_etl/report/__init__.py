"""The static HTML report: `reports/index.html` and one page per kernel, in the warehouse.

Pages are self-contained (inline CSS, inline SVG, a few lines of inline script, relative links
between pages), so they open from a bucket's website endpoint, a downloaded folder or
`file://` alike. They are derived views, rewritten by every analysis: not part of the commit
protocol, and never read by the pipeline.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from html import escape
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..analysis.calibration import STEPS, Calibration
from ..analysis.compare import compare_baseline
from ..analysis.series import version_order
from ..analysis.spill import PointSpill
from ..load import layout
from ..storage import ObjectStore
from .svg import PALETTE, Line, chart

PREFIX = layout.REPORTS
MAX_CHARTS = 24
SCALE = {"speed": (1e3, "µs"), "memory": (1024 * 1024, "MiB")}

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
h3{font-size:14px;margin:16px 0 4px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 6px;
text-align:left;font-size:12px}tr.alert td{background:#fde8e8}tr.improvement td{background:#e8f6e8}
tr.pending td{background:#fff7e0}.charts{display:flex;flex-wrap:wrap;gap:6px}
.chart{border:1px solid #eee;background:#fff}.ct{font-size:11px;font-weight:600}
.yt{font-size:9px;text-anchor:end;fill:#555}.xt{font-size:9px;text-anchor:middle;fill:#555}
.unit{font-size:9px;text-anchor:end;fill:#777}.frame{fill:none;stroke:#ccc}
.grid{stroke:#eee}.ref{stroke:#999;stroke-dasharray:4 3}.band{opacity:.18;stroke:none}
.whisker{stroke-width:1;opacity:.6}.line{fill:none;stroke-width:1.5}.lg{font-size:10px}
.alert{stroke:#000;stroke-width:1}.note{color:#666;font-size:12px}
"""

SCRIPT = """
window.addEventListener("error", function (e) {
  document.body.dataset.errors = String(Number(document.body.dataset.errors || 0) + 1);
});
document.addEventListener("DOMContentLoaded", function () {
  var charts = document.querySelectorAll("svg.chart");
  var alerts = document.querySelectorAll("svg.chart circle.alert");
  document.body.dataset.charts = String(charts.length);
  document.body.dataset.alertMarks = String(alerts.length);
  document.body.dataset.ready = "1";
});
"""


def slug(kernel: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", kernel) or "kernel"


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>{body}"
        f"<script>{SCRIPT}</script></body></html>\n"
    )


def _gpu(row: Any) -> str:
    product = row.get("gpu_product") or "?"
    ff = row.get("gpu_form_factor")
    return f"{product} {ff}" if ff else str(product)


def _num(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{v:.{digits}g}" if isinstance(v, float) else escape(str(v))


def _changes_table(changes: Iterable[dict[str, Any]], link: bool) -> str:
    rows = []
    for c in changes:
        kernel = escape(c["kernel"])
        name = f'<a href="{slug(c["kernel"])}.html">{kernel}</a>' if link else kernel
        rows.append(
            f'<tr class="{escape(c["state"])}"><td>{escape(c["state"])}</td><td>{name}</td>'
            f"<td>{escape(c['operation_mode'])}</td><td>{escape(c['metric'])}</td>"
            f"<td>{escape(c['provider'])}</td><td>{escape(_gpu(c))}</td>"
            f"<td>{escape(c['software_class'] or '')}</td>"
            f"<td>{escape(c['workload_slug'] or '')}</td>"
            f"<td>{escape(c['before_release'])} → {escape(c['after_release'])}</td>"
            f"<td>{_num(c['ratio'], 4)} [{_num(c['ratio_low'], 4)}, {_num(c['ratio_high'], 4)}]"
            f"</td><td>{_num(c['p_value'])}</td><td>{_num(c['false_alarm_rate'])}</td></tr>"
        )
    if not rows:
        return '<p class="note">none</p>'
    return (
        "<table><tr><th>state</th><th>kernel</th><th>pass</th><th>metric</th><th>provider</th>"
        "<th>GPU</th><th>software</th><th>workload</th><th>releases</th>"
        "<th>ratio after/before [95 %]</th><th>p</th><th>false-alarm rate of its class</th>"
        "</tr>" + "".join(rows) + "</table>"
    )


def _calibration_table(cal: Calibration) -> str:
    measured = cal.measured
    if not measured:
        return ""
    head = "".join(f"<th>found at {s:.0%}</th>" for s in STEPS)
    rows = []
    for cls in sorted(measured.get("false_alarm_rate", {})):
        det = measured["detection_rate"].get(cls, {})
        cells = "".join(f"<td>{_num(det.get(f'{s:.2f}'))}</td>" for s in STEPS)
        rows.append(
            f"<tr><td>{escape(cls)}</td><td>{_num(measured['false_alarm_rate'][cls])}</td>"
            f"{cells}</tr>"
        )
    return (
        "<h2>How often the detector is wrong</h2><p class='note'>False-alarm rate: share of "
        "A/A series (no change) with any alert; detection: share of injected steps found at "
        "the right release. See docs/regressions.md.</p><table><tr><th>metric/pass</th>"
        f"<th>false-alarm rate</th>{head}</tr>" + "".join(rows) + "</table>"
    )


def _xkey(x: Any) -> tuple[int, float, str]:
    try:
        return (0, float(x), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(x))


def _series_charts(
    records: list[dict[str, Any]],
    metric: str,
    alerts: dict[str, set[str]],
    colors: dict[str, str],
) -> str:
    scale, unit = SCALE.get(metric, (1.0, ""))
    groups: dict[tuple[str, str, str], dict[str, list[dict[str, Any]]]] = {}
    for r in records:
        if r["metric"] != metric:
            continue
        key = (str(r["gpu_name"]), str(r["software_class"]), str(r["operation_mode"]))
        groups.setdefault(key, {}).setdefault(r["workload_digest"], []).append(r)
    out = []
    for (gpu, software, mode), workloads in sorted(groups.items()):
        releases = sorted(
            {r["liger_version"] for w in workloads.values() for r in w}, key=version_order
        )
        ordered = sorted(
            workloads.values(),
            key=lambda w: (_xkey(w[0]["x_value"]), str(w[0]["workload_slug"])),
        )
        charts = []
        for w in ordered[:MAX_CHARTS]:
            by_provider: dict[str, list[dict[str, Any]]] = {}
            for r in w:
                by_provider.setdefault(str(r["provider"]), []).append(r)
            lines = [
                Line(
                    label=provider,
                    values={r["liger_version"]: r["value"] / scale for r in rs},
                    low={r["liger_version"]: r["value_p20"] / scale for r in rs},
                    high={r["liger_version"]: r["value_p80"] / scale for r in rs},
                    alerts=set().union(*(alerts.get(r["series_key"], set()) for r in rs)),
                    color=colors[provider],
                )
                for provider, rs in sorted(by_provider.items())
            ]
            charts.append(chart(str(w[0]["workload_slug"]), releases, lines, unit=unit))
        more = len(ordered) - MAX_CHARTS
        note = f'<p class="note">{more} more workloads not shown</p>' if more > 0 else ""
        out.append(
            f"<h3>{escape(mode)} · {escape(gpu)} · {escape(software)}</h3>"
            f'<div class="charts">{"".join(charts)}</div>{note}'
        )
    return "".join(out)


def _speedup_charts(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return '<p class="note">no baseline measured on the same workloads</p>'
    frame = pd.DataFrame(rows)
    frame["gpu"] = frame.apply(_gpu, axis=1)
    out = []
    for (gpu, software, metric, mode), g in frame.groupby(
        ["gpu", "software_class", "metric", "operation_mode"], dropna=False, sort=True
    ):
        releases = sorted(set(g["liger_version"]), key=version_order)
        lines = []
        for i, (base, bg) in enumerate(g.groupby("baseline", sort=True)):
            lines.append(
                Line(
                    label=f"vs {base}",
                    values=dict(zip(bg["liger_version"], bg["speedup"], strict=True)),
                    low=dict(zip(bg["liger_version"], 1 / bg["ratio_high"], strict=True)),
                    high=dict(zip(bg["liger_version"], 1 / bg["ratio_low"], strict=True)),
                    color=PALETTE[i % len(PALETTE)],
                )
            )
        title = f"{mode} · {gpu}" + ("" if software == "upstream" else f" · {software}")
        label = "× faster" if metric == "speed" else "× smaller"
        out.append(chart(title, releases, lines, unit=label, baseline=1.0))
    return f'<div class="charts">{"".join(out)}</div>'


def kernel_page(
    kernel: str,
    records: list[dict[str, Any]],
    changes: list[dict[str, Any]],
    speedups: list[dict[str, Any]],
) -> str:
    providers = sorted({str(r["provider"]) for r in records})
    colors = {p: PALETTE[i % len(PALETTE)] for i, p in enumerate(providers)}
    alerts: dict[str, set[str]] = {}
    for c in changes:
        if c["state"] == "alert":
            alerts.setdefault(c["series_key"], set()).add(c["after_release"])
    body = [
        f'<p><a href="index.html">← all kernels</a></p><h1>{escape(kernel)}</h1>',
        "<h2>Changes</h2>",
        _changes_table(changes, link=False),
        "<h2>Latency over releases</h2><p class='note'>Per GPU, software class and pass; one "
        "chart per workload, one line per provider, the band is p20-p80; red: a change alert "
        "starts at that release.</p>",
        _series_charts(records, "speed", alerts, colors),
        "<h2>Liger against its baseline</h2><p class='note'>Geometric mean over the workloads "
        "both measured, with a 95 % interval; above 1 liger is faster (smaller).</p>",
        _speedup_charts(speedups),
        "<h2>Memory over releases</h2>",
        _series_charts(records, "memory", alerts, colors),
    ]
    return _page(f"{kernel} · kindex", "".join(body))


def index_page(
    series: dict[str, int], changes: list[dict[str, Any]], cal: Calibration, seq: int | None
) -> str:
    """The front page; `series`: kernel -> how many series it has."""
    kernels = sorted(series)
    alerts = [c for c in changes if c["state"] == "alert"]
    per_kernel: dict[str, int] = {}
    for c in alerts:
        per_kernel[c["kernel"]] = per_kernel.get(c["kernel"], 0) + 1
    items = "".join(
        f'<tr class="{"alert" if per_kernel.get(k) else ""}"><td>'
        f'<a href="{slug(k)}.html">{escape(k)}</a></td>'
        f"<td>{series[k]}</td>"
        f"<td>{per_kernel.get(k, 0)}</td></tr>"
        for k in kernels
    )
    body = [
        "<h1>Kernel benchmarks: regressions and comparisons</h1>",
        f'<p class="note">Warehouse commit {seq}; {sum(series.values())}'
        f" series, {len(alerts)} alerts.</p>",
        "<h2>Alerts</h2>",
        _changes_table(alerts, link=True),
        "<h2>Pending (seen at the newest release only)</h2>",
        _changes_table([c for c in changes if c["state"] == "pending"], link=True),
        "<h2>Kernels</h2><table><tr><th>kernel</th><th>series</th><th>alerts</th></tr>"
        + items
        + "</table>",
        _calibration_table(cal),
    ]
    return _page("kindex report", "".join(body))


def build_report(
    points: pd.DataFrame | pa.Table | PointSpill,
    changes: list[dict[str, Any]],
    cal: Calibration,
    seq: int | None = None,
) -> dict[str, str]:
    """Page name -> HTML: `index.html` and `<kernel>.html` for every kernel with runs.

    Every page but the index is one kernel's, so the release points are made Python objects
    one kernel at a time, not all of them at once (one dict per point of every series: that
    grew with the warehouse).
    """
    pages: dict[str, str] = {}
    series: dict[str, int] = {}
    for k, frame in _kernel_frames(points):
        series[k] = int(frame["series_key"].nunique())
        speedups = compare_baseline(frame, min_effect=cal.settings.min_effect)
        pages[f"{slug(k)}.html"] = kernel_page(
            k,
            frame.to_dict("records"),
            [c for c in changes if c["kernel"] == k],
            [s for s in speedups if s["kernel"] == k],
        )
    return {"index.html": index_page(series, changes, cal, seq), **pages}


def _kernel_frames(
    points: pd.DataFrame | pa.Table | PointSpill,
) -> Iterator[tuple[str, pd.DataFrame]]:
    """(kernel, its release points as pandas), by kernel name."""
    if isinstance(points, PointSpill):
        yield from points.kernel_frames()
        return
    if isinstance(points, pd.DataFrame):
        if not points.empty:
            for k, frame in points.groupby("kernel", sort=True):
                yield str(k), frame
        return
    if not points.num_rows:
        return
    column = points.column("kernel")
    for k in sorted(pc.unique(column).to_pylist()):
        yield str(k), points.filter(pc.equal(column, k)).to_pandas()


def write_report(
    store: ObjectStore,
    frame: pd.DataFrame | pa.Table | PointSpill,
    changes: list[dict[str, Any]],
    cal: Calibration,
    seq: int | None = None,
) -> str:
    """Write the pages under `reports/`; returns where index.html is (a path or URL)."""
    pages = build_report(frame, changes, cal, seq)
    for name, html in pages.items():
        store.put_bytes(PREFIX + name, html.encode("utf-8"))
    path = store.local_path(PREFIX + "index.html")
    return str(path) if path is not None else f"{store.url.rstrip('/')}/{PREFIX}index.html"
