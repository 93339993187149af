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
from functools import lru_cache
from html import escape
from typing import Any

import numpy as np
import pandas as pd

from ..analysis.series import version_order
from .alerts import ChangeContext, changes_table, is_liger
from .colors import provider_color, state_color
from .fields import (
    AFTER_COMMIT,
    BEFORE_COMMIT,
    ORIGIN,
    POINT_COMMIT,
    first,
    group_of,
    series_anchor,
)
from .page import GPU_FIELDS, column_values, gpu_label, gpu_labels, null, num, page, text

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


Record = dict[str, Any]


def _sig(v: float) -> float:
    """Five significant digits: what a chart shows, at a fraction of the JSON."""
    return float(f"{v:.5g}")


POINT_FIELDS = (
    "series_key", "kernel", "metric", "operation_mode", "software_class", "gpu_product",
    "gpu_form_factor", "gpu_name", "workload_digest", "workload_slug", "x_value", "provider",
    "liger_version", "release_rank", "value", "value_p20", "value_p80", "runs",
)  # fmt: skip
_version = lru_cache(maxsize=4096)(version_order)


def _x_order(points: Sequence[Record]) -> list[str]:
    keys: dict[str, tuple[Any, str]] = {}
    for r in points:
        k = (_version(str(r["liger_version"])), r["date"])
        keys[r["x_label"]] = min(keys.get(r["x_label"], k), k)
    return sorted(keys, key=lambda label: keys[label])


def minute_stamps(column: pd.Series) -> list[str]:
    """UTC times as `YYYY-MM-DD HH:MM` ("" where absent), through numpy: pandas' strftime
    formats value by value."""
    utc = pd.to_datetime(column, utc=True).dt.tz_localize(None).to_numpy()
    stamps = np.datetime_as_string(utc.astype("datetime64[m]"), unit="m").tolist()
    return ["" if s == "NaT" else s.replace("T", " ") for s in stamps]


def _texts(values: list[Any]) -> list[str]:
    """`text` of each value, once per distinct value (they repeat from point to point; keyed
    by type too, since 1, 1.0 and True are one dict key)."""
    seen: dict[tuple[type, Any], str] = {}
    out = []
    for v in values:
        key = (v.__class__, v)
        t = seen.get(key)
        if t is None:
            t = seen[key] = text(v)
        out.append(t)
    return out


def _firsts(columns: list[list[Any]], rows: int) -> list[str]:
    """`fields.first` row by row over columns given in the order of its names."""
    if not columns:
        return [""] * rows
    out = _texts(columns[0])
    for more in columns[1:]:
        out = [a or b for a, b in zip(out, _texts(more), strict=True)]
    return out


def _records(frame: pd.DataFrame) -> list[Record]:
    """The kernel's release points as plain dicts (converted once: per-workload pandas calls
    were most of a report's time), each with its x label, commit, origin, date and GPU."""
    n = len(frame)
    dates = minute_stamps(frame["observed_at"]) if "observed_at" in frame.columns else [""] * n
    # Column by column, through numpy (iterating Arrow-backed columns goes value by value),
    # and the derived fields per column too: a dict per point is what costs.
    wanted = [c for c in (*POINT_FIELDS, *POINT_COMMIT, *ORIGIN) if c in frame.columns]
    values = {c: column_values(frame[c]) for c in wanted}
    commits = _firsts([values[c] for c in POINT_COMMIT if c in values], n)
    origins = _firsts([values[c] for c in ORIGIN if c in values], n)
    versions = [str(v) for v in values.get("liger_version", [None] * n)]
    labels = [f"{v} · {c[:7]}" if c else v for v, c in zip(versions, commits, strict=True)]
    derived = {
        "commit": commits,
        "origin": origins,
        "x_label": labels,
        "date": dates,
        "gpu": gpu_labels(values.get(c, [None] * n) for c in GPU_FIELDS),
        "mode": _texts(values.get("operation_mode", [None] * n)),
        "software": _texts(values.get("software_class", [None] * n)),
    }
    keys = [*values, *derived]
    rows: list[Record] = [
        dict(zip(keys, row, strict=True))
        for row in zip(*values.values(), *derived.values(), strict=True)
    ]
    rows.sort(key=lambda r: (str(r["series_key"]), int(r["release_rank"]), r["date"]))
    return rows


def _trace(name: str, recs: Sequence[Record], scale: float, unit: str, color: str) -> Record:
    y = [_sig(r["value"] / scale) for r in recs]
    p20 = [_sig((_float(r["value_p20"]) or r["value"]) / scale) for r in recs]
    p80 = [_sig((_float(r["value_p80"]) or r["value"]) / scale) for r in recs]
    commits = any(r["commit"] for r in recs)
    origins = any(r["origin"] for r in recs)
    # Hover lines from per-point data (customdata) and one template per trace: a text per
    # point made pages several times larger.
    custom = [[r["date"], lo, hi, int(r["runs"]), r["commit"][:12], r["origin"]]
              for r, lo, hi in zip(recs, p20, p80, strict=True)]  # fmt: skip
    template = (
        f"<b>{escape(name)}</b><br>release %{{x}}"
        + ("<br>commit %{customdata[4]}" if commits else "")
        + "<br>%{customdata[0]} UTC"
        + f"<br>median %{{y:.4g}} {unit} (p20-p80 %{{customdata[1]:.4g}}-%{{customdata[2]:.4g}})"
        + "<br>runs %{customdata[3]}"
        + ("<br>origin %{customdata[5]}" if origins else "")
        + "<extra></extra>"
    )
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
            "array": [_sig(max(h - v, 0.0)) for h, v in zip(p80, y, strict=True)],
            "arrayminus": [_sig(max(v - lo, 0.0)) for lo, v in zip(p20, y, strict=True)],
            "thickness": 1,
            "width": 3,
            "color": color,
        },
        "line": {"color": color, "width": 2},
        "marker": {"color": color, "size": 6},
        "customdata": custom,
        "hovertemplate": template,
    }


def _change_marks(
    changes: Sequence[Mapping[str, Any]],
    points: Sequence[Record],
    scale: float,
    min_effect: float,
) -> tuple[list[Record], list[Record]]:
    """(marker traces, shapes) for the changes of one workload's series."""
    # Points by release (the first point of a release, where a release has several commits)
    # and by commit, for changes that name the commits of their range.
    at: dict[tuple[str, str], Record] = {}
    for r in points:
        at.setdefault((str(r["series_key"]), str(r["liger_version"])), r)
        if r["commit"]:
            at[(str(r["series_key"]), "commit:" + r["commit"])] = r
    by_state: dict[str, dict[str, list[Any]]] = {}
    shapes: list[Record] = []
    for c in changes:
        key = str(c["series_key"])
        a_commit, b_commit = first(c, AFTER_COMMIT), first(c, BEFORE_COMMIT)
        after = at.get((key, "commit:" + a_commit)) if a_commit else None
        after = after or at.get((key, str(c["after_release"])))
        before = at.get((key, "commit:" + b_commit)) if b_commit else None
        before = before or at.get((key, str(c["before_release"])))
        if after is None:
            continue
        x_after = after["x_label"]
        group = group_of(c)
        color = state_color(group)
        marks = by_state.setdefault(group, {"x": [], "y": [], "text": []})
        marks["x"].append(x_after)
        marks["y"].append(_sig(float(after["value"]) / scale))
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
        if level and c.get("metric") == "speed" and before is not None:
            # The band a point must leave to count as a change (minimum effect) around the
            # level before it, from the last point before to the first after.
            shapes.append({"type": "rect", "xref": "x", "yref": "y", "layer": "below",
                           "x0": before["x_label"], "x1": x_after,
                           "y0": _sig(level * (1 - min_effect) / scale),
                           "y1": _sig(level * (1 + min_effect) / scale),
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


# A series whose points span more than this (its largest over its smallest) is drawn on a log
# axis: on a linear one from zero, dpo_loss's harness step from 1.6 s to 5 ms (issue 54) left
# every point after it on the axis line, and a regression among them invisible.
LOG_SPAN = 10.0


def spans_decades(traces: Sequence[Mapping[str, Any]]) -> bool:
    """Whether one of `traces` (a series each) spans more than `LOG_SPAN`."""
    for t in traces:
        values = [v for v in t["y"] if v is not None and v > 0]
        if values and max(values) > LOG_SPAN * min(values):
            return True
    return False


def use_log_axis(layout: dict[str, Any]) -> None:
    """A log y axis, which has no zero to start from: each decade gets the same height."""
    layout["yaxis"] = {
        **{k: v for k, v in layout["yaxis"].items() if k not in ("rangemode", "zeroline")},
        "type": "log",
    }
    layout["yaxis"]["title"] = {"text": f"{layout['yaxis']['title']['text']} (log scale)"}


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
    points: Sequence[Record],
    metric: str,
    changes: Sequence[Mapping[str, Any]],
    charts: _Charts,
    min_effect: float,
) -> str:
    scale, unit = SCALE.get(metric, (1.0, ""))
    data = [r for r in points if r["metric"] == metric]
    if not data:
        return '<p class="note">not measured</p>'
    by_series: dict[str, list[Mapping[str, Any]]] = {}
    for c in changes:
        by_series.setdefault(str(c["series_key"]), []).append(c)
    groups: dict[tuple[str, str, str], list[Record]] = {}
    for r in data:
        groups.setdefault((r["mode"], r["gpu"], r["software"]), []).append(r)

    def order(key: tuple[str, str, str]) -> tuple[Any, ...]:
        mode, gpu, software = key
        releases = len({r["liger_version"] for r in groups[key]})
        return (-releases, gpu, MODE_ORDER.get(mode, 9), mode, software)

    out: list[str] = []
    single: list[Record] = []
    for key in sorted(groups, key=order):
        mode, gpu, software = key
        workloads: dict[str, list[Record]] = {}
        for r in groups[key]:
            workloads.setdefault(str(r["workload_digest"]), []).append(r)
        if all(len({r["liger_version"] for r in w}) < 2 for w in workloads.values()):
            single.extend(groups[key])
            continue
        options: list[tuple[str, Record]] = []
        default = None
        cid = f"c{charts.count + 1}"
        ordered = sorted(
            workloads.values(), key=lambda w: (_xkey(w[0]["x_value"]), text(w[0]["workload_slug"]))
        )
        for i, w in enumerate(ordered):
            slug = text(w[0]["workload_slug"], "(no workload name)")
            series: dict[str, list[Record]] = {}
            for r in w:
                series.setdefault(str(r["series_key"]), []).append(r)
            traces = []
            seen: dict[str, int] = {}
            for series_key, s in sorted(
                series.items(),
                key=lambda t: (not is_liger(text(t[1][0]["provider"])), text(t[1][0]["provider"])),
            ):
                provider = text(s[0]["provider"])
                seen[provider] = seen.get(provider, 0) + 1
                name = provider if seen[provider] == 1 else f"{provider} ({seen[provider]})"
                traces.append(_trace(name, s, scale, unit, provider_color(provider)))
                charts.anchors[series_anchor(series_key)] = (cid, i)
            w_changes = [c for k in series for c in by_series.get(k, [])]
            marks, shapes = _change_marks(w_changes, w, scale, min_effect)
            layout = _layout(_x_order(w), unit)
            layout["shapes"] = shapes
            if spans_decades(traces):
                use_log_axis(layout)
            flag = " ⚠" if any(group_of(c) != "improvement" for c in w_changes) else ""
            if default is None and flag:
                default = i
            options.append(
                (slug + flag, {"title": slug, "traces": traces + marks, "layout": layout})
            )
        out.append(charts.box(_group_heading(mode, gpu, software), options, default or 0))
    if single:
        out.append(_single_release_table(single, scale, unit, opened=not out))
    return "".join(out)


def _single_release_table(
    points: Sequence[Record], scale: float, unit: str, *, opened: bool
) -> str:
    rows = "".join(
        f"<tr><td>{escape(text(r['gpu']))}</td><td>{escape(text(r['operation_mode']))}</td>"
        f"<td>{escape(text(r['liger_version']))}</td><td>{escape(text(r['workload_slug']))}</td>"
        f"<td>{escape(text(r['provider']))}</td>"
        f'<td class="num">{r["value"] / scale:.4g}</td></tr>'
        for r in sorted(
            points, key=lambda r: (r["gpu"], r["mode"], text(r["workload_slug"]), r["provider"])
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


def _absent_last(v: Any) -> tuple[bool, str]:
    """A sort key that puts null values last, as pandas' groupby and sort did (an empty string
    is a value, sorted first)."""
    return (True, "") if null(v) else (False, str(v))


def _speedup_trace(base: str, b: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """liger's speed-up over one baseline across releases, with its 95 % interval."""
    y = [float(r["speedup"]) for r in b]
    high = [1 / float(r["ratio_low"]) for r in b]
    low = [1 / float(r["ratio_high"]) for r in b]
    color = provider_color(base)
    releases = [str(r["liger_version"]) for r in b]
    text_ = [
        f"liger vs {escape(base)}<br>release {escape(r)}<br>"
        f"×{v:.3g} [{lo:.3g}, {h:.3g}] over {int(n)} workloads"
        for r, v, lo, h, n in zip(releases, y, low, high, (r["pairs"] for r in b), strict=True)
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


def _release_of(row: Mapping[str, Any]) -> tuple[int, Any]:
    return _version(str(row["liger_version"]))


def _grouped(rows: Sequence[Record], *names: str) -> dict[tuple[Any, ...], list[Record]]:
    """Rows by the values of `names`, in the rows' order (plain dicts: a pandas groupby per
    machine, metric and baseline was a fifth of a kernel page's time)."""
    out: dict[tuple[Any, ...], list[Record]] = {}
    for r in rows:
        out.setdefault(tuple(r.get(n) for n in names), []).append(r)
    return out


def _speedup_section(speedups: Sequence[Mapping[str, Any]], charts: _Charts) -> str:
    if not speedups:
        return '<p class="note">no baseline measured on the same workloads</p>'
    rows = [{**r, "gpu": gpu_label(r)} for r in speedups]
    out: list[str] = []
    single: list[Record] = []
    machines = _grouped(rows, "gpu", "software_class")
    for gpu, software in sorted(machines, key=lambda k: (k[0], _absent_last(k[1]))):
        g = machines[(gpu, software)]
        if len({r["liger_version"] for r in g if not null(r["liger_version"])}) < 2:
            single.extend(g)
            continue
        options = []
        passes = _grouped(g, "metric", "operation_mode")
        for metric, mode in sorted(
            passes,
            key=lambda k: (
                k[0] != "speed", MODE_ORDER.get(text(k[1]), 9), _absent_last(k[0]),
                _absent_last(k[1]),
            ),
        ):  # fmt: skip
            m = passes[(metric, mode)]
            categories = sorted({r["liger_version"] for r in m}, key=version_order)
            bases = _grouped(m, "baseline")
            traces = [
                _speedup_trace(str(base), sorted(bases[(base,)], key=_release_of))
                for (base,) in sorted(bases, key=lambda k: _absent_last(k[0]))
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
        out.append(_single_speedup_table(single, opened=not out))
    return "".join(out)


def _single_speedup_table(rows: Sequence[Record], *, opened: bool) -> str:
    ordered = sorted(
        rows,
        key=lambda r: tuple(
            _absent_last(r.get(c)) for c in ("gpu", "metric", "operation_mode", "baseline")
        ),
    )
    cells = "".join(
        f"<tr><td>{escape(text(r['gpu']))}</td><td>{escape(text(r['liger_version']))}</td>"
        f"<td>{escape(text(r['metric']))}</td><td>{escape(text(r['operation_mode']))}</td>"
        f"<td>{escape(text(r['baseline']))}</td>"
        f'<td class="num">{float(r["speedup"]):.3g}× [{1 / float(r["ratio_high"]):.3g}, '
        f'{1 / float(r["ratio_low"]):.3g}]</td><td class="num">{int(r["pairs"])}</td></tr>'
        for r in ordered
    )
    return (
        f"<details{' open' if opened else ''}><summary>Measured at one release only</summary>"
        "<table><thead><tr><th>GPU</th><th>release</th><th>metric</th><th>pass</th>"
        "<th>baseline</th><th>liger's speed-up [95 %]</th><th>workloads</th></tr></thead>"
        f"<tbody>{cells}</tbody></table></details>"
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
    points = _records(frame)
    charts = _Charts()
    speed = _series_section(points, "speed", changes, charts, min_effect)
    versus = _speedup_section(speedups, charts)
    memory = _series_section(points, "memory", changes, charts, min_effect)
    anchors = {k: list(v) for k, v in charts.anchors.items()}
    gpus = ", ".join(sorted({r["gpu"] for r in points}))
    body = [
        f'<p><a href="index.html">← all kernels</a></p><h1>{escape(kernel)}</h1>',
        f'<p class="note">{len({r["series_key"] for r in points})} series on {escape(gpus)}; '
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
