"""The static HTML report: `reports/index.html`, one page per kernel, one shared script.

The index answers "which change made which kernel slower on which GPU" at a glance: a kernel x
GPU matrix at each GPU's newest release and a kernel x release matrix per GPU (coloured by
liger's speed-up over its baselines or by the changes starting there), then every change
grouped by cause (or state), liger apart from its baselines, newest first, each linked to its
series chart, upstream's compare view and its runs, with people's verdicts (`kindex-etl
triage`) and the false-alarm rate those verdicts measure. Kernel pages draw each series with
Plotly (hover, zoom, a workload select).

Pages are static: inline CSS and script, figures as JSON in the page, the Plotly library as one
shared asset (`plotly-<version>.min.js`) beside them, relative links only; they open from a
bucket's website endpoint, a downloaded folder or `file://` alike, with no network. They are
derived views, rewritten by every analysis: not part of the commit protocol, never read by the
pipeline.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from html import escape
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..analysis.calibration import STEPS, Calibration
from ..analysis.compare import compare_baseline
from ..analysis.series import version_order
from ..analysis.spill import PointSpill, read_ipc
from ..catalog.baselines import release_baselines
from ..load import layout
from ..storage import ObjectStore
from ..workers import Workers
from .alerts import ChangeContext, group_key, grouped_changes, is_liger
from .assets import plotly_js, write_assets
from .charts import kernel_page, minute_stamps
from .fields import group_of
from .matrix import ALERTING, LEGEND, Matrix, kernel_by_gpu, release_by_kernel
from .page import GPU_FIELDS, column_values, gpu_labels, null, num, page, text
from .triage import FalseAlarms, measured_false_alarms, read_verdicts

PREFIX = layout.REPORTS
RUN_ID_ROWS = 5000  # changes whose run ids the index lists (the newest, improvements aside)
Attach = Callable[[Sequence[dict[str, Any]]], Iterator[dict[str, Any]]]


def slug(kernel: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", kernel) or "kernel"


def page_of(kernel: str) -> str:
    return f"{slug(kernel)}.html"


def _calibration_table(cal: Calibration) -> str:
    measured = cal.measured
    if not measured:
        return ""
    head = "".join(f"<th>found at {s:.0%}</th>" for s in STEPS)
    rows = []
    for cls in sorted(measured.get("false_alarm_rate", {})):
        det = measured["detection_rate"].get(cls, {})
        cells = "".join(f"<td>{num(det.get(f'{s:.2f}'))}</td>" for s in STEPS)
        rows.append(
            f"<tr><td>{escape(cls)}</td><td>{num(measured['false_alarm_rate'][cls])}</td>"
            f"{cells}</tr>"
        )
    return (
        "<h3>Calibrated on A/A series</h3><p class='note'>False-alarm rate: share of A/A "
        "series (no change) with any alert; detection: share of injected steps found at "
        "the right release. See docs/regressions.md.</p><table><thead><tr><th>metric/pass</th>"
        f"<th>false-alarm rate</th>{head}</tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def _measured_table(stats: list[FalseAlarms]) -> str:
    if not stats:
        return (
            "<h3>Measured by triage</h3><p class='note'>No alert has a verdict yet: "
            "<code>kindex-etl triage CHANGE_ID --state acknowledged|expected|invalid</code> "
            "records one; <code>invalid</code> ones are counted here as false alarms.</p>"
        )
    rows = []
    for s in stats:
        ci = s.interval()
        interval = f"{ci[0]:.0%} – {ci[1]:.0%}" if ci else "-"
        rate = f"{s.rate:.0%}" if s.rate is not None else "-"
        rows.append(
            f'<tr><td>{escape(s.label)}</td><td class="num">{s.invalid}</td>'
            f'<td class="num">{s.triaged}</td><td class="num" data-label="{escape(s.label)}">'
            f"{rate}</td><td>{interval}</td></tr>"
        )
    return (
        "<h3>Measured by triage</h3><p class='note'>Of the alerts people gave a verdict "
        "(<code>kindex-etl triage</code>), the share judged <code>invalid</code>, with "
        "Wilson's 95 % interval.</p><table id='measured-false-alarms'><thead><tr>"
        "<th>alerts</th><th>invalid</th><th>triaged</th><th>false-alarm rate</th>"
        "<th>95 %</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def _kernel_table(
    summary: Mapping[str, dict[str, Any]], changes: Sequence[Mapping[str, Any]]
) -> str:
    liger: dict[str, int] = {}
    base: dict[str, int] = {}
    for c in changes:
        if group_of(c) == "alert":
            into = liger if is_liger(text(c.get("provider"))) else base
            into[text(c["kernel"])] = into.get(text(c["kernel"]), 0) + 1
    from .page import sortable_table

    rows = [
        f'<tr><td><a href="{page_of(k)}">{escape(k)}</a></td>'
        f'<td class="num">{s["series"]}</td><td>{escape(", ".join(s["gpus"]))}</td>'
        f"<td>{escape(s['newest'])}</td>"
        f'<td class="num">{liger.get(k, 0)}</td><td class="num">{base.get(k, 0)}</td></tr>'
        for k, s in sorted(summary.items())
    ]
    return sortable_table(
        "kernels",
        ["kernel", "series", "GPUs", "newest release", "liger alerts", "baseline alerts"],
        rows,
    )


def index_page(
    summary: Mapping[str, dict[str, Any]],
    matrix: Matrix,
    changes: Sequence[Mapping[str, Any]],
    ctx: ChangeContext,
    cal: Calibration,
    seq: int | None,
) -> str:
    groups: dict[str, int] = {}
    for c in changes:
        groups[group_of(c)] = groups.get(group_of(c), 0) + 1
    # Alerts first, as people act on them (by count, hundreds of environment steps came
    # first and the alerts last).
    counts = ", ".join(f"{groups[g]} {g}" for g in sorted(groups, key=group_key))
    alerting = [c for c in changes if group_of(c) in ALERTING]
    others = [c for c in changes if group_of(c) not in ALERTING]
    series = sum(s["series"] for s in summary.values())
    body = [
        "<h1>Kernel benchmarks: which change made which kernel slower on which GPU</h1>",
        f'<p class="note">Warehouse commit {seq}; changes: {escape(counts) or "none"}; '
        f"{len(summary)} kernels, {series} series, {len(matrix.gpus())} GPUs. "
        f"{len(ctx.verdicts)} verdicts given.</p>",
        # The alerts before the matrices: on upstream's history the matrices and the other
        # changes put them about 3,860 px down the page.
        f"<h2>Alerts ({len(alerting)})</h2><p class='note'>The changes to act on: liger apart "
        "from its baselines, newest first; each links to its series chart, its range on "
        "upstream's compare view and the runs behind it. Click a heading to sort, type to "
        "filter. Every other change is below, by cause.</p>",
        grouped_changes(alerting, ctx) if alerting else '<p class="note">no alerts</p>',
        "<h2>Kernels × GPUs, newest release</h2>",
        LEGEND,
        kernel_by_gpu(matrix, page_of),
        "<h2>Kernels × releases, one GPU</h2>",
        release_by_kernel(matrix, page_of),
        "<h2>Other changes by cause</h2><p class='note'>Grouped by cause where the analysis "
        "gives one, else by state; liger apart from its baselines; newest first.</p>",
        grouped_changes(others, ctx),
        "<h2>How often the detector is wrong</h2>",
        _measured_table(measured_false_alarms(changes, ctx.verdicts)),
        _calibration_table(cal),
        "<h2>Kernels</h2>",
        _kernel_table(summary, changes),
    ]
    return page("kindex report", "".join(body))


def _runs_of(changes: Sequence[dict[str, Any]], attach: Attach | None) -> dict[str, Any]:
    """change_id -> (before run ids, after run ids) for the changes the index lists."""
    out: dict[str, Any] = {}
    wanted = [c for c in changes if group_of(c) != "improvement"]
    wanted = sorted(wanted, key=lambda c: version_order(text(c.get("after_release"))))[
        -RUN_ID_ROWS:
    ]
    have = [c for c in wanted if "after_run_ids" in c]
    need = [c for c in wanted if "after_run_ids" not in c]
    whole = list(have) + (list(attach(need)) if attach and need else [])
    for c in whole:
        out[c["change_id"]] = (
            list(c.get("before_run_ids") or []),
            list(c.get("after_run_ids") or []),
        )
    return out


class Draft:
    """A report being drawn: `pages` gives page name -> HTML, `index.html` and
    `<kernel>.html` for every kernel with runs.

    Release points are made pandas one kernel at a time (one frame per kernel, not all).
    `plotly`: the shared asset's name (`assets.plotly_js`). `workers`: processes that draw the
    kernel pages of a `PointSpill`'s points (each reads its kernel's file); they are handed
    every page when the draft is made, and draw while the caller does something else (the
    analysis commits its changes meanwhile)."""

    def __init__(
        self,
        points: pd.DataFrame | pa.Table | PointSpill,
        changes: list[dict[str, Any]],
        cal: Calibration,
        seq: int | None = None,
        *,
        verdicts: Mapping[str, Mapping[str, Any]] | None = None,
        attach: Attach | None = None,
        plotly: str | None = None,
        workers: Workers | None = None,
    ) -> None:
        self.plotly = plotly or plotly_js()[0]
        self.changes, self.cal, self.seq = changes, cal, seq
        releases: set[str] = set()  # the changes' (what their tables sort by)
        by_kernel: dict[str, list[dict[str, Any]]] = {}
        for c in changes:
            by_kernel.setdefault(str(c["kernel"]), []).append(c)
            releases.add(text(c.get("after_release")))
        rank = {r: i for i, r in enumerate(sorted(releases, key=version_order))}
        self.ctx = ChangeContext(page_of=page_of, release_rank=rank, verdicts=verdicts or {})
        self.ctx.runs = _runs_of(changes, attach)
        min_effect = cal.settings.min_effect
        self._parts = _kernel_parts(points, by_kernel, self.ctx, self.plotly, min_effect,
                                    workers)  # fmt: skip

    def pages(self) -> dict[str, str]:
        matrix = Matrix()
        matrix.add_changes(self.changes)
        summary: dict[str, dict[str, Any]] = {}
        pages: dict[str, str] = {}
        ctx = self.ctx
        for k, part in self._parts:
            matrix.add_points(k, part.releases)
            summary[k] = part.summary
            ctx.dates.update(part.dates)
            matrix.add_speedups(part.speedups)
            pages[page_of(k)] = part.page
        index = index_page(summary, matrix, self.changes, ctx, self.cal, self.seq)
        return {"index.html": index, **pages}


@dataclass
class KernelPart:
    """One kernel's page and what the index takes from it."""

    page: str
    releases: set[tuple[str, str]]  # (GPU label, release) pairs with points
    summary: dict[str, Any]
    dates: dict[tuple[str, str], str]  # (series, release) -> when its change's runs were
    speedups: list[dict[str, Any]]


def kernel_part(
    kernel: str,
    frame: pd.DataFrame,
    changes: Sequence[dict[str, Any]],
    ctx: ChangeContext,
    *,
    plotly: str,
    min_effect: float,
) -> KernelPart:
    """A kernel's page from its release points and changes (its page reads only its own
    changes' dates and runs from `ctx`, so a worker's copy of `ctx` draws the same page)."""
    series_keys = column_values(frame["series_key"])
    versions = column_values(frame["liger_version"])
    gpus = gpu_labels(column_values(frame[c]) for c in GPU_FIELDS)
    releases = set(zip(gpus, map(str, versions), strict=True))
    summary = {
        "series": len({k for k in series_keys if not null(k)}),
        "gpus": sorted(set(gpus)),
        "newest": max((r for _, r in releases), key=version_order),
    }
    dates: dict[tuple[str, str], str] = {}
    if "observed_at" in frame.columns and changes:
        wanted = {(str(c["series_key"]), text(c.get("after_release"))) for c in changes}
        keys = list(zip(series_keys, map(str, versions), strict=True))
        hit = [key in wanted for key in keys]
        stamps = minute_stamps(frame.loc[hit, "observed_at"])
        for key, when in zip((k_ for k_, h in zip(keys, hit, strict=True) if h), stamps,
                             strict=True):  # fmt: skip
            if when:
                dates[key] = when
    ctx.dates.update(dates)
    # Liger against the baselines its script ran at each release (dpo_loss: `huggingface`
    # until #1223, `torch` after), not one provider for every release.
    every, at_release = release_baselines()
    speedups = [
        r
        for r in compare_baseline(frame, catalog=every, min_effect=min_effect)
        if r["baseline"] in at_release(text(r["kernel"]), text(r["liger_version"]))
    ]
    page_html = kernel_page(
        kernel, frame, changes, speedups, ctx, plotly=plotly, min_effect=min_effect
    )
    return KernelPart(page_html, releases, summary, dates, speedups)


def _kernel_parts(
    points: pd.DataFrame | pa.Table | PointSpill,
    by_kernel: Mapping[str, list[dict[str, Any]]],
    ctx: ChangeContext,
    plotly: str,
    min_effect: float,
    workers: Workers | None,
) -> Iterator[tuple[str, KernelPart]]:
    """Each kernel's part, by kernel name: drawn here as the iterator is read, or by `workers`
    from the spill, every page handed to them before this returns."""
    if workers is None or not workers.parallel or not isinstance(points, PointSpill):
        return (
            (k, kernel_part(k, frame, by_kernel.get(k, []), ctx, plotly=plotly,
                            min_effect=min_effect))
            for k, frame in _kernel_frames(points)
        )  # fmt: skip
    jobs = []
    for k in points.kernels():
        changes = by_kernel.get(k, [])
        ids = {c["change_id"] for c in changes}
        own = replace(ctx, dates={}, runs={i: r for i, r in ctx.runs.items() if i in ids})
        path = str(points.path(k))
        jobs.append((k, workers.submit(_kernel_task, k, path, changes, own, plotly, min_effect)))
    return ((k, job.result()) for k, job in jobs)


def _kernel_task(
    kernel: str,
    path: str,
    changes: list[dict[str, Any]],
    ctx: ChangeContext,
    plotly: str,
    min_effect: float,
) -> KernelPart:
    frame = read_ipc(Path(path)).to_pandas()
    return kernel_part(kernel, frame, changes, ctx, plotly=plotly, min_effect=min_effect)


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


def write_report(store: ObjectStore, draft: Draft) -> str:
    """Write the draft's pages and the shared script under `reports/`; returns where
    index.html is (a path or URL)."""
    write_assets(store, PREFIX)  # under the name the draft's pages load it by
    for name, html in draft.pages().items():
        store.put_bytes(PREFIX + name, html.encode("utf-8"))
    path = store.local_path(PREFIX + "index.html")
    return str(path) if path is not None else f"{store.url.rstrip('/')}/{PREFIX}index.html"


def draft_report(
    store: ObjectStore,
    points: pd.DataFrame | pa.Table | PointSpill,
    changes: list[dict[str, Any]],
    cal: Calibration,
    seq: int | None = None,
    *,
    attach: Attach | None = None,
    workers: Workers | None = None,
) -> Draft:
    """Start drawing the report of `changes`, with the verdicts recorded in the warehouse
    (`write_report` puts it in place)."""
    return Draft(points, changes, cal, seq, verdicts=read_verdicts(store), attach=attach,
                 workers=workers)  # fmt: skip
