"""A kernel's page: its changes, and one interactive chart per pass, GPU and software class.

Each chart holds every workload of its group; a select (full workload names) picks the one
drawn, liger and its baselines together in their fixed colours, p20-p80 as error bars, the
changes marked where they start with the threshold band around the level before them. The
figures are Plotly JSON embedded in the page and drawn by the shared Plotly asset when they
come into view (a page can hold dozens). Groups measured at a single release are a table:
a chart of one dot tells nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

import pandas as pd

from ..analysis.series import version_order
from .alerts import ChangeContext, changes_table, is_liger
from .colors import provider_color, state_color
from .fields import ORIGIN, POINT_COMMIT, first, group_of, series_anchor
from .page import gpu_label, num, page, text

SCALE = {"speed": (1e3, "µs"), "memory": (1024 * 1024, "MiB")}
MODE_ORDER = {"full": 0, "forward": 1, "backward": 2}
SYMBOL = {"alert": "triangle-up", "improvement": "triangle-down", "pending": "diamond"}
CONFIG = {"displaylogo": False, "responsive": True}


def _json(data: Any) -> str:
    # Inside <script type="application/json">: "</" must not end the element early.
    return json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")


def _float(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _x_order(frame: pd.DataFrame) -> list[str]:
    keys: dict[str, tuple[Any, str]] = {}
    for label, release, when in zip(
        frame["x_label"], frame["liger_version"], frame["date"], strict=True
    ):
        k = (version_order(str(release)), when)
        keys[label] = min(keys.get(label, k), k)
    return sorted(keys, key=lambda label: keys[label])


def _x_labels(frame: pd.DataFrame) -> pd.DataFrame:
    """One x label per point: the release, and the commit where the points know it."""
    frame = frame.copy()
    rows = frame.to_dict("records")
    commits = [first(r, POINT_COMMIT) for r in rows]
    frame["commit"] = commits
    frame["origin"] = [first(r, ORIGIN) for r in rows]
    frame["x_label"] = [
        f"{r['liger_version']} · {c[:7]}" if c else str(r["liger_version"])
        for r, c in zip(rows, commits, strict=True)
    ]
    if "observed_at" in frame.columns:
        frame["date"] = [
            pd.Timestamp(v).strftime("%Y-%m-%d %H:%M") if text(v) else ""
            for v in frame["observed_at"]
        ]
    else:
        frame["date"] = ""
    return frame


def _hover(r: Mapping[str, Any], scale: float, unit: str) -> str:
    lines = [f"<b>{escape(text(r['provider']))}</b>", f"release {escape(text(r['liger_version']))}"]
    if r["commit"]:
        lines.append(f"commit {escape(r['commit'][:12])}")
    if r["date"]:
        lines.append(escape(r["date"]) + " UTC")
    lines.append(
        f"median {r['value'] / scale:.4g} {unit} "
        f"(p20-p80 {num(_float(r['value_p20']) and r['value_p20'] / scale, 4)}"
        f"-{num(_float(r['value_p80']) and r['value_p80'] / scale, 4)})"
    )
    lines.append(f"runs {int(r['runs'])}")
    if r["origin"]:
        lines.append(f"origin {escape(r['origin'])}")
    return "<br>".join(lines)


def _trace(name: str, pts: pd.DataFrame, scale: float, unit: str, color: str) -> dict[str, Any]:
    recs = pts.to_dict("records")
    y = [r["value"] / scale for r in recs]
    hi = [
        max((_float(r["value_p80"]) or r["value"]) / scale - v, 0.0)
        for r, v in zip(recs, y, strict=True)
    ]
    lo = [
        max(v - (_float(r["value_p20"]) or r["value"]) / scale, 0.0)
        for r, v in zip(recs, y, strict=True)
    ]
    return {
        "type": "scatter",
        "mode": "lines+markers",
        "name": name,
        "legendgroup": name,
        "x": [r["x_label"] for r in recs],
        "y": y,
        "error_y": {
            "type": "data",
            "symmetric": False,
            "array": hi,
            "arrayminus": lo,
            "thickness": 1,
            "width": 3,
            "color": color,
        },
        "line": {"color": color, "width": 2},
        "marker": {"color": color, "size": 6},
        "text": [_hover(r, scale, unit) for r in recs],
        "hovertemplate": "%{text}<extra></extra>",
    }


def _change_marks(
    changes: Sequence[Mapping[str, Any]],
    points: pd.DataFrame,
    scale: float,
    unit: str,
    min_effect: float,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(marker traces, shapes) for the changes of one workload's series."""
    by_state: dict[str, dict[str, list[Any]]] = {}
    shapes: list[dict[str, Any]] = []
    for c in changes:
        series = points[points["series_key"] == c["series_key"]]
        after = series[series["liger_version"] == c["after_release"]]
        before = series[series["liger_version"] == c["before_release"]]
        if after.empty:
            continue
        x_after = str(after["x_label"].iloc[0])
        y_after = float(after["value"].iloc[0]) / scale
        group = group_of(c)
        color = state_color(group)
        marks = by_state.setdefault(group, {"x": [], "y": [], "text": []})
        marks["x"].append(x_after)
        marks["y"].append(y_after)
        marks["text"].append(
            f"<b>{escape(group)}</b> {escape(text(c['provider']))}<br>"
            f"{escape(text(c['before_release']))} → {escape(text(c['after_release']))}<br>"
            f"×{num(c.get('ratio'), 4)} [{num(c.get('ratio_low'), 4)}, "
            f"{num(c.get('ratio_high'), 4)}]"
        )
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": x_after,
                       "x1": x_after, "y0": 0, "y1": 1,
                       "line": {"color": color, "width": 1, "dash": "dot"}})  # fmt: skip
        level = _float(c.get("before_value"))
        if level and c.get("metric") == "speed" and not before.empty:
            # The band a point must leave to count as a change (minimum effect) around the
            # level before it, from the last point before to the first after.
            shapes.append({"type": "rect", "xref": "x", "yref": "y", "layer": "below",
                           "x0": str(before["x_label"].iloc[0]), "x1": x_after,
                           "y0": level * (1 - min_effect) / scale,
                           "y1": level * (1 + min_effect) / scale,
                           "fillcolor": color, "opacity": 0.10, "line": {"width": 0}})  # fmt: skip
    traces = [
        {
            "type": "scatter",
            "mode": "markers",
            "name": group,
            "x": m["x"],
            "y": m["y"],
            "text": m["text"],
            "hovertemplate": "%{text}<extra></extra>",
            "marker": {
                "symbol": SYMBOL.get(group, "x"),
                "size": 13,
                "color": state_color(group),
                "line": {"color": "#000", "width": 1},
            },
        }
        for group, m in sorted(by_state.items())
    ]
    return traces, shapes


def _layout(categories: list[str], unit: str, *, reference: float | None = None) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "margin": {"l": 64, "r": 16, "t": 28, "b": 70},
        "hovermode": "closest",
        "legend": {"orientation": "h", "y": 1.12, "x": 0},
        "xaxis": {
            "type": "category",
            "categoryorder": "array",
            "categoryarray": categories,
            "title": {"text": "release (oldest to newest)"},
            "automargin": True,
        },
        # Latency, memory and speed-ups are never negative: the axis starts at zero.
        "yaxis": {"rangemode": "tozero", "title": {"text": unit}, "zeroline": True},
        "font": {"size": 11},
    }
    if reference is not None:
        layout["shapes"] = [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y",
                             "y0": reference, "y1": reference,
                             "line": {"color": "#555", "dash": "dash", "width": 1}}]  # fmt: skip
    return layout


class _Charts:
    """Chart ids and the series anchor -> (chart, workload) map of one page."""

    def __init__(self) -> None:
        self.count = 0
        self.anchors: dict[str, tuple[str, int]] = {}

    def box(
        self,
        heading: str,
        options: list[tuple[str, dict[str, Any]]],
        default: int,
        pick: str = "workload",
    ) -> str:
        self.count += 1
        cid = f"c{self.count}"
        spec = {"workloads": [w for _, w in options], "config": CONFIG}
        select = ""
        if len(options) > 1:
            opts = "".join(
                f"<option{' selected' if i == default else ''}>{escape(label)}</option>"
                for i, (label, _) in enumerate(options)
            )
            select = (
                f'<div class="controls"><label>{escape(pick)} ({len(options)}): '
                f'<select id="{cid}-select">{opts}</select></label></div>'
            )
        title = escape(options[default][1]["title"])
        return (
            f'<div class="chartbox"><h3>{escape(heading)}</h3>{select}'
            f'<h4 id="{cid}-title">{title}</h4><div class="plot" id="{cid}"></div>'
            f'<script type="application/json" id="{cid}-data">{_json(spec)}</script></div>'
        )


def _group_heading(mode: str, gpu: str, software: str) -> str:
    parts = [mode or "(no pass)", gpu]
    if software and software != "upstream":
        parts.append(software)
    return " · ".join(parts)


def _series_section(
    frame: pd.DataFrame,
    metric: str,
    changes: Sequence[Mapping[str, Any]],
    charts: _Charts,
    min_effect: float,
) -> str:
    scale, unit = SCALE.get(metric, (1.0, ""))
    data = frame[frame["metric"] == metric]
    if data.empty:
        return '<p class="note">not measured</p>'
    by_series: dict[str, list[Mapping[str, Any]]] = {}
    for c in changes:
        by_series.setdefault(str(c["series_key"]), []).append(c)
    groups = []
    for key, g in data.groupby(["operation_mode", "gpu", "software_class"], dropna=False):
        mode, gpu, software = (text(k) for k in key)
        releases = g["liger_version"].nunique()
        groups.append(((-releases, gpu, MODE_ORDER.get(mode, 9), mode, software), g))
    out, single = [], []
    for (_, gpu, _, mode, software), g in sorted(groups, key=lambda t: t[0]):
        per_workload = g.groupby("workload_digest")["liger_version"].nunique()
        if per_workload.max() < 2:
            single.append(g)
            continue
        options: list[tuple[str, dict[str, Any]]] = []
        default = None
        cid = f"c{charts.count + 1}"
        workloads = sorted(
            g.groupby("workload_digest"),
            key=lambda t: (_xkey(t[1]["x_value"].iloc[0]), text(t[1]["workload_slug"].iloc[0])),
        )
        for i, (_, w) in enumerate(workloads):
            slug = text(w["workload_slug"].iloc[0], "(no workload name)")
            categories = _x_order(w)
            traces = []
            seen: dict[str, int] = {}
            for series_key, s in sorted(
                w.groupby("series_key"),
                key=lambda t: (
                    not is_liger(text(t[1]["provider"].iloc[0])),
                    t[1]["provider"].iloc[0],
                ),
            ):
                provider = text(s["provider"].iloc[0])
                seen[provider] = seen.get(provider, 0) + 1
                name = provider if seen[provider] == 1 else f"{provider} ({seen[provider]})"
                s = s.sort_values("order")
                traces.append(_trace(name, s, scale, unit, provider_color(provider)))
                charts.anchors[series_anchor(str(series_key))] = (cid, i)
            w_changes = [c for k in w["series_key"].unique() for c in by_series.get(str(k), [])]
            marks, shapes = _change_marks(w_changes, w, scale, unit, min_effect)
            layout = _layout(categories, unit)
            layout["shapes"] = shapes
            flag = " ⚠" if any(group_of(c) != "improvement" for c in w_changes) else ""
            if default is None and flag:
                default = i
            options.append(
                (slug + flag, {"title": slug, "traces": traces + marks, "layout": layout})
            )
        out.append(charts.box(_group_heading(mode, gpu, software), options, default or 0))
    if single:
        out.append(_single_release_table(pd.concat(single), scale, unit, opened=not out))
    return "".join(out)


def _single_release_table(frame: pd.DataFrame, scale: float, unit: str, *, opened: bool) -> str:
    rows = "".join(
        f"<tr><td>{escape(text(r['gpu']))}</td><td>{escape(text(r['operation_mode']))}</td>"
        f"<td>{escape(text(r['liger_version']))}</td><td>{escape(text(r['workload_slug']))}</td>"
        f"<td>{escape(text(r['provider']))}</td>"
        f'<td class="num">{r["value"] / scale:.4g}</td></tr>'
        for r in frame.sort_values(["gpu", "operation_mode", "workload_slug", "provider"]).to_dict(
            "records"
        )
    )
    return (
        f"<details{' open' if opened else ''}><summary>Measured at one release only (a table: a "
        "chart of one point tells nothing)</summary><table><thead><tr><th>GPU</th><th>pass</th>"
        "<th>release</th>"
        f"<th>workload</th><th>provider</th><th>median ({unit})</th></tr></thead><tbody>{rows}"
        "</tbody></table></details>"
    )


def _xkey(x: Any) -> tuple[int, float, str]:
    try:
        return (0, float(x), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(x))


def _version_key(column: pd.Series) -> pd.Series:
    return column.map(lambda v: version_order(str(v)))


def _speedup_trace(base: str, b: pd.DataFrame) -> dict[str, Any]:
    """liger's speed-up over one baseline across releases, with its 95 % interval."""
    y = [float(v) for v in b["speedup"]]
    high = [1 / float(v) for v in b["ratio_low"]]
    low = [1 / float(v) for v in b["ratio_high"]]
    color = provider_color(base)
    releases = [str(r) for r in b["liger_version"]]
    text_ = [
        f"liger vs {escape(base)}<br>release {escape(r)}<br>"
        f"×{v:.3g} [{lo:.3g}, {h:.3g}] over {int(n)} workloads"
        for r, v, lo, h, n in zip(releases, y, low, high, b["pairs"], strict=True)
    ]
    return {
        "type": "scatter",
        "mode": "lines+markers",
        "name": f"liger vs {base}",
        "x": releases,
        "y": y,
        "error_y": {
            "type": "data",
            "symmetric": False,
            "array": [max(h - v, 0.0) for h, v in zip(high, y, strict=True)],
            "arrayminus": [max(v - lo, 0.0) for lo, v in zip(low, y, strict=True)],
            "thickness": 1,
            "color": color,
        },
        "line": {"color": color},
        "marker": {"color": color, "size": 6},
        "text": text_,
        "hovertemplate": "%{text}<extra></extra>",
    }


def _speedup_section(speedups: Sequence[Mapping[str, Any]], charts: _Charts) -> str:
    if not speedups:
        return '<p class="note">no baseline measured on the same workloads</p>'
    frame = pd.DataFrame(list(speedups))
    frame["gpu"] = [gpu_label(r) for r in frame.to_dict("records")]
    out, single = [], []
    for (gpu, software), g in frame.groupby(["gpu", "software_class"], dropna=False, sort=True):
        if g["liger_version"].nunique() < 2:
            single.append(g)
            continue
        options = []
        for (metric, mode), m in sorted(
            g.groupby(["metric", "operation_mode"], dropna=False),
            key=lambda t: (t[0][0] != "speed", MODE_ORDER.get(text(t[0][1]), 9)),
        ):
            categories = sorted(set(m["liger_version"]), key=version_order)
            traces = [
                _speedup_trace(str(base), b.sort_values("liger_version", key=_version_key))
                for base, b in m.groupby("baseline", sort=True)
            ]
            label = "× faster" if metric == "speed" else "× smaller"
            title = f"{metric} · {text(mode)}: {label} than the baseline (above 1: liger wins)"
            layout = _layout(categories, label, reference=1.0)
            options.append(
                (f"{metric} · {text(mode)}", {"title": title, "traces": traces, "layout": layout})
            )
        heading = gpu if text(software) in ("", "upstream") else f"{gpu} · {software}"
        out.append(charts.box(heading, options, 0, pick="metric · pass"))
    if single:
        out.append(_single_speedup_table(pd.concat(single), opened=not out))
    return "".join(out)


def _single_speedup_table(frame: pd.DataFrame, *, opened: bool) -> str:
    rows = "".join(
        f"<tr><td>{escape(text(r['gpu']))}</td><td>{escape(text(r['liger_version']))}</td>"
        f"<td>{escape(text(r['metric']))}</td><td>{escape(text(r['operation_mode']))}</td>"
        f"<td>{escape(text(r['baseline']))}</td>"
        f'<td class="num">{float(r["speedup"]):.3g}× [{1 / float(r["ratio_high"]):.3g}, '
        f'{1 / float(r["ratio_low"]):.3g}]</td><td class="num">{int(r["pairs"])}</td></tr>'
        for r in frame.sort_values(["gpu", "metric", "operation_mode", "baseline"]).to_dict(
            "records"
        )
    )
    return (
        f"<details{' open' if opened else ''}><summary>Measured at one release only</summary>"
        "<table><thead><tr><th>GPU</th><th>release</th><th>metric</th><th>pass</th>"
        "<th>baseline</th><th>liger's speed-up [95 %]</th><th>workloads</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></details>"
    )


def kernel_page(
    kernel: str,
    frame: pd.DataFrame,
    changes: Sequence[Mapping[str, Any]],
    speedups: Sequence[Mapping[str, Any]],
    ctx: ChangeContext,
    *,
    plotly: str,
    min_effect: float,
) -> str:
    frame = _x_labels(frame)
    frame["gpu"] = [gpu_label(r) for r in frame.to_dict("records")]
    frame = frame.sort_values(["series_key", "release_rank", "date"])
    frame["order"] = range(len(frame))
    charts = _Charts()
    speed = _series_section(frame, "speed", changes, charts, min_effect)
    versus = _speedup_section(speedups, charts)
    memory = _series_section(frame, "memory", changes, charts, min_effect)
    anchors = {k: list(v) for k, v in charts.anchors.items()}
    gpus = ", ".join(sorted(set(frame["gpu"])))
    body = [
        f'<p><a href="index.html">← all kernels</a></p><h1>{escape(kernel)}</h1>',
        f'<p class="note">{frame["series_key"].nunique()} series on {escape(gpus)}; '
        "hover a point for its release, commit, date, median and p20-p80; markers show where "
        "a change starts, the shaded band the minimum effect around the level before it.</p>",
        f"<h2>Changes ({len(changes)})</h2>",
        f"<details{' open' if len(changes) <= 12 else ''}><summary>the table, newest first"
        f"</summary>{changes_table('changes', changes, ctx)}</details>"
        if changes
        else '<p class="note">none found</p>',
        "<h2>Latency</h2>",
        speed,
        "<h2>Liger against its baseline</h2><p class='note'>Geometric mean over the workloads "
        "both measured at a release, with a 95 % interval; above 1 liger is faster (smaller).</p>",
        versus,
        "<h2>Memory</h2>",
        memory,
        f'<script type="application/json" id="anchors">{_json(anchors)}</script>',
    ]
    return page(f"{kernel} · kindex", "".join(body), scripts=(plotly,))
