"""The pages' skeleton: CSS, the small script every page carries, and text helpers.

The script is vanilla JS with no dependency: sortable and filterable tables, the colour
switch of the matrices, and (on kernel pages) drawing each chart with the shared Plotly asset
when it scrolls into view. Every page counts uncaught errors and `console.error` calls in
`body[data-errors]`, so a headless browser can tell a broken page from a working one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

import pandas as pd

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:20px 28px;color:#1d2127;max-width:1500px}
a{color:#0b57d0}h1{font-size:22px;margin:4px 0 2px}
h2{font-size:17px;margin-top:30px;border-bottom:1px solid #ddd;padding-bottom:3px}
h3{font-size:15px;margin:18px 0 4px}h4{font-size:13px;margin:10px 0 2px;font-weight:600;
overflow-wrap:anywhere}
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #ddd;padding:3px 6px;
text-align:left;font-size:12px;vertical-align:top}th{background:#f5f6f8;white-space:nowrap}
table.sortable th{cursor:pointer}th[aria-sort=ascending]::after{content:" ▲"}
th[aria-sort=descending]::after{content:" ▼"}td.num{text-align:right;white-space:nowrap}
.note{color:#555;font-size:12px}.muted{color:#888}code{font-size:11px}
td.gpu,td.nowrap{white-space:nowrap}td{overflow-wrap:anywhere}td.wl{max-width:240px}
td.runs{max-width:260px}
.filter{margin:6px 0;font-size:13px;padding:3px 6px;width:360px}
.chip{display:inline-block;border-radius:9px;padding:0 7px;font-size:11px;margin-right:3px;
color:#fff;white-space:nowrap}
.st-alert{background:#c62828}.st-improvement{background:#2e7d32}.st-pending{background:#ef8f00}
.st-environment{background:#6d4c9f}.st-harness{background:#546e7a}.st-other{background:#777}
.v-acknowledged{background:#1565c0}.v-expected{background:#00838f}.v-invalid{background:#4e342e}
table.matrix td.cell{text-align:center;min-width:62px;white-space:nowrap}
table.matrix td.cell a{color:inherit;text-decoration:none;display:block}
table.matrix.by-speedup td.cell{background:var(--su)}
table.matrix.by-change td.cell{background:var(--ch)}
table.matrix th.kernel{text-align:left}.rel{font-size:10px;color:#555;display:block}
.mark{font-size:10px;display:block}.legend span{display:inline-block;padding:1px 8px;
margin-right:4px;font-size:11px;border:1px solid #ddd}
.wide{overflow-x:auto;max-width:100%}table.matrix th{white-space:normal}
.chartbox{border:1px solid #e3e3e3;margin:10px 0;padding:4px 8px}
.plot{width:100%;height:360px}.controls{font-size:12px;margin:2px 0}
.controls select{font-size:12px;max-width:100%}
details>summary{cursor:pointer}
"""

SCRIPT = r"""
(function () {
  var body = document.body;
  function bump(name) {
    body.dataset[name] = String(Number(body.dataset[name] || 0) + 1);
  }
  window.addEventListener("error", function () { bump("errors"); });
  var consoleError = console.error;
  console.error = function () { bump("errors"); return consoleError.apply(console, arguments); };

  function cellValue(row, i) {
    var c = row.cells[i];
    if (!c) return "";
    var v = c.getAttribute("data-sort");
    return v === null ? c.textContent.trim() : v;
  }
  function sortBy(table, i, th) {
    var tbody = table.tBodies[0];
    var rows = Array.prototype.slice.call(tbody.rows);
    var asc = th.getAttribute("aria-sort") !== "ascending";
    var numeric = rows.every(function (r) {
      var v = cellValue(r, i); return v === "" || !isNaN(Number(v));
    });
    rows.sort(function (a, b) {
      var x = cellValue(a, i), y = cellValue(b, i), d;
      if (numeric) {
        d = (x === "" ? -Infinity : Number(x)) - (y === "" ? -Infinity : Number(y));
        if (isNaN(d)) d = 0;
      } else {
        d = x.localeCompare(y, undefined, {numeric: true});
      }
      return asc ? d : -d;
    });
    rows.forEach(function (r) { tbody.appendChild(r); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) {
      h.removeAttribute("aria-sort");
    });
    th.setAttribute("aria-sort", asc ? "ascending" : "descending");
  }
  function applyFilter(input) {
    var table = document.getElementById(input.dataset.table);
    var terms = input.value.toLowerCase().split(/\s+/).filter(Boolean);
    var rows = table.tBodies[0].rows, shown = 0;
    Array.prototype.forEach.call(rows, function (r) {
      var text = r.textContent.toLowerCase();
      var ok = terms.every(function (t) { return text.indexOf(t) >= 0; });
      r.hidden = !ok;
      if (ok) shown++;
    });
    table.dataset.shown = String(shown);
    var out = document.getElementById(input.dataset.table + "-count");
    if (out) out.textContent = shown + " of " + rows.length + " shown";
  }

  // Charts (kernel pages): drawn when they come into view, redrawn on a workload change.
  var drawn = 0;
  function chartSpec(div) {
    if (!div._spec) div._spec = JSON.parse(document.getElementById(div.id + "-data").textContent);
    return div._spec;
  }
  function draw(div) {
    if (!window.Plotly) { bump("errors"); return; }
    var spec = chartSpec(div);
    var select = document.getElementById(div.id + "-select");
    var w = spec.workloads[select ? select.selectedIndex : 0];
    document.getElementById(div.id + "-title").textContent = w.title;
    var points = w.traces.reduce(function (n, t) { return n + t.y.length; }, 0);
    return Plotly.react(div, w.traces, w.layout, spec.config).then(function () {
      if (!div.dataset.points) drawn++;
      div.dataset.points = String(points);
      body.dataset.drawn = String(drawn);
    });
  }
  function drawAll() {
    return Promise.all(Array.prototype.map.call(document.querySelectorAll("div.plot"), draw));
  }
  function showAnchor() {
    var target = location.hash.slice(1);
    var el = document.getElementById("anchors");
    if (!target || !el) return;
    var where = JSON.parse(el.textContent)[target];
    if (!where) return;
    var select = document.getElementById(where[0] + "-select");
    if (select) select.selectedIndex = where[1];
    var div = document.getElementById(where[0]);
    draw(div);
    div.parentNode.scrollIntoView();
  }
  window.kindexReport = {draw: draw, drawAll: drawAll};

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("table.sortable").forEach(function (table) {
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
        th.addEventListener("click", function () { sortBy(table, i, th); });
      });
    });
    document.querySelectorAll("input.filter").forEach(function (input) {
      input.addEventListener("input", function () { applyFilter(input); });
      applyFilter(input);
    });
    document.querySelectorAll("select.colour").forEach(function (sel) {
      function apply() {
        document.querySelectorAll("table.matrix").forEach(function (t) {
          t.classList.toggle("by-speedup", sel.value === "speedup");
          t.classList.toggle("by-change", sel.value === "change");
        });
      }
      sel.addEventListener("change", apply);
      apply();
    });
    document.querySelectorAll("select.gpu-pick").forEach(function (sel) {
      function apply() {
        document.querySelectorAll("[data-gpu-view]").forEach(function (el) {
          el.hidden = el.dataset.gpuView !== sel.value;
        });
      }
      sel.addEventListener("change", apply);
      apply();
    });
    var plots = document.querySelectorAll("div.plot");
    body.dataset.charts = String(plots.length);
    plots.forEach(function (div) {
      var select = document.getElementById(div.id + "-select");
      if (select) select.addEventListener("change", function () { draw(div); });
    });
    if ("IntersectionObserver" in window) {
      var seen = new IntersectionObserver(function (entries) {
        entries.forEach(function (e) {
          if (e.isIntersecting) { seen.unobserve(e.target); draw(e.target); }
        });
      }, {rootMargin: "300px"});
      plots.forEach(function (div) { seen.observe(div); });
    } else {
      drawAll();
    }
    window.addEventListener("hashchange", showAnchor);
    showAnchor();
    body.dataset.ready = "1";
  });
})();
"""


# A wide table (nine GPUs, eighteen releases, twelve columns of a change) scrolls inside its
# box: the page itself never scrolls sideways (at 1,280 px the index was 1,652 px wide).
WIDE = '<div class="wide">'


def page(title: str, body: str, *, scripts: tuple[str, ...] = ()) -> str:
    """A whole page; `scripts`: relative URLs of shared assets (the Plotly library)."""
    head = "".join(f'<script src="{escape(s)}"></script>' for s in scripts)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style>{head}</head><body>{body}"
        f"<script>{SCRIPT}</script></body></html>\n"
    )


def null(v: Any) -> bool:
    """True for None, NaN, NA and NaT: what pandas' groupby and nunique leave aside (an empty
    string is a value to them)."""
    return v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and math.isnan(v))


def present(v: Any) -> bool:
    """False for None, NaN and empty strings: the absent values pandas and Arrow hand us."""
    if isinstance(v, str):
        return v != ""
    return not null(v) and str(v) != ""


def column_values(column: pd.Series) -> list[Any]:
    """A column as a list of Python values. String columns go through numpy: iterating
    pandas' Arrow-backed strings goes value by value; other columns keep `tolist`'s values
    (a nullable integer stays an integer, where numpy would make every value a float)."""
    if isinstance(column.dtype, pd.StringDtype):
        return column.to_numpy().tolist()
    return column.tolist()


def text(v: Any, default: str = "") -> str:
    """A value as text for a page, never "nan" or "None"."""
    return str(v) if present(v) else default


def gpu_label(row: Any) -> str:
    """`H100 80GB HBM3` style: product and form factor, the form factor only where known."""
    product = text(row.get("gpu_product")) or text(row.get("gpu_name"), "?")
    ff = text(row.get("gpu_form_factor"))
    return f"{product} {ff}" if ff else product


GPU_FIELDS = ("gpu_product", "gpu_form_factor", "gpu_name")


def gpu_labels(columns: Iterable[Sequence[Any]]) -> list[str]:
    """`gpu_label` of each row of the three `GPU_FIELDS` columns (lists, in that order), once
    per distinct machine."""
    machines = list(zip(*columns, strict=True))
    labels = {m: gpu_label(dict(zip(GPU_FIELDS, m, strict=True))) for m in set(machines)}
    return [labels[m] for m in machines]


def num(v: Any, digits: int = 3) -> str:
    if not present(v):
        return "-"
    if isinstance(v, float):
        if not math.isfinite(v):
            return "-"
        return f"{v:.{digits}g}"
    return escape(str(v))


def sort_value(v: Any) -> str:
    """A `data-sort` attribute value: numbers as they are, absent as empty."""
    if not present(v) or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    return escape(str(v), quote=True)


def sortable_table(
    table_id: str, headers: list[str], rows: list[str], *, filter_hint: str = ""
) -> str:
    """A table people can sort (click a heading) and filter (words typed, all must match)."""
    if not rows:
        return '<p class="note">none</p>'
    hint = filter_hint or "filter: words that must all appear in a row"
    return (
        f'<input class="filter" type="search" data-table="{table_id}" '
        f'placeholder="{escape(hint, quote=True)}" aria-label="filter {table_id}"> '
        f'<span class="note" id="{table_id}-count"></span>'
        f'{WIDE}<table class="sortable" id="{table_id}"><thead><tr>'
        + "".join(f"<th>{escape(h)}</th>" for h in headers)
        + "</tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table></div>"
    )
