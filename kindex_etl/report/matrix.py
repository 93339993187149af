"""The index's matrices: kernels against GPUs at each GPU's newest release, and kernels against
releases for one GPU. A cell says liger's speed-up over its baselines and the changes of
liger's series that start at that release; a switch colours the cells by either."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from html import escape
from typing import Any

from ..analysis.series import version_order
from .alerts import is_liger
from .fields import group_of
from .page import WIDE, gpu_label, text

ALERTING = frozenset({"alert", "kernel", "code"})  # a change liger's code is suspected of


@dataclass
class Cell:
    speedups: list[tuple[str, str, float]] = field(default_factory=list)  # (mode, base, x)
    alerts: list[float] = field(default_factory=list)  # ratios
    improvements: int = 0
    other: dict[str, int] = field(default_factory=dict)  # other groups (causes) -> count

    @property
    def speedup(self) -> float | None:
        values = [s for _, _, s in self.speedups if s > 0 and math.isfinite(s)]
        if not values:
            return None
        return math.exp(sum(math.log(v) for v in values) / len(values))


@dataclass
class Matrix:
    """Cells by (kernel, GPU, release), and which releases each (kernel, GPU) has."""

    cells: dict[tuple[str, str, str], Cell] = field(default_factory=dict)
    measured: dict[tuple[str, str], set[str]] = field(default_factory=dict)

    def cell(self, kernel: str, gpu: str, release: str) -> Cell:
        return self.cells.setdefault((kernel, gpu, release), Cell())

    def add_points(self, kernel: str, pairs: Iterable[tuple[str, str]]) -> None:
        """(GPU label, release) pairs some series of the kernel measured."""
        for gpu, release in pairs:
            self.measured.setdefault((kernel, gpu), set()).add(release)

    def add_speedups(self, rows: Iterable[Mapping[str, Any]]) -> None:
        for r in rows:
            if r.get("metric") != "speed":
                continue
            cell = self.cell(text(r["kernel"]), gpu_label(r), text(r["liger_version"]))
            cell.speedups.append(
                (text(r.get("operation_mode")), text(r.get("baseline")), float(r["speedup"]))
            )

    def add_changes(self, changes: Iterable[Mapping[str, Any]]) -> None:
        for c in changes:
            if not is_liger(text(c.get("provider"))):
                continue
            cell = self.cell(text(c["kernel"]), gpu_label(c), text(c["after_release"]))
            group = group_of(c)
            if group in ALERTING:
                cell.alerts.append(float(c.get("ratio") or 1.0))
            elif group == "improvement":
                cell.improvements += 1
            else:
                cell.other[group] = cell.other.get(group, 0) + 1

    @property
    def kernels(self) -> list[str]:
        return sorted({k for k, _ in self.measured})

    def gpus(self) -> list[str]:
        """GPUs, those with the most releases first."""
        releases: dict[str, set[str]] = {}
        for (_, gpu), rel in self.measured.items():
            releases.setdefault(gpu, set()).update(rel)
        return sorted(releases, key=lambda g: (-len(releases[g]), g))

    def releases(self, gpu: str) -> list[str]:
        found = {r for (_, g), rel in self.measured.items() if g == gpu for r in rel}
        return sorted(found, key=version_order)


def _speedup_colour(s: float | None) -> str:
    if s is None:
        return "#fff"
    t = max(-1.0, min(1.0, math.log2(s) / 2))  # 4x either way is the full colour
    light = 96 - 36 * abs(t)
    return f"hsl({130 if t >= 0 else 0},55%,{light:.0f}%)"


def _change_colour(cell: Cell) -> str:
    if cell.alerts:
        worst = max(cell.alerts)
        t = min(1.0, abs(math.log(worst)) / math.log(2)) if worst > 0 else 1.0
        return f"hsl(0,75%,{88 - 30 * t:.0f}%)"
    if cell.improvements:
        return "hsl(130,50%,82%)"
    if cell.other:
        return "hsl(265,30%,86%)"
    return "#fff"


def _cell_html(kernel: str, cell: Cell | None, release: str, link: str, note_release: bool) -> str:
    cell = cell or Cell()
    s = cell.speedup
    value = f"{s:.2f}×" if s is not None else "·"
    marks = []
    if cell.alerts:
        marks.append(f"▲{len(cell.alerts)}")
    if cell.improvements:
        marks.append(f"▼{cell.improvements}")
    for group, n in sorted(cell.other.items()):
        marks.append(f"●{n} {group}")
    details = [f"{kernel} at {release}"]
    details += [f"{mode or '-'} vs {base}: {x:.3g}×" for mode, base, x in cell.speedups]
    if cell.alerts:
        details.append("liger alerts: " + ", ".join(f"×{r:.3g}" for r in cell.alerts))
    if cell.improvements:
        details.append(f"{cell.improvements} improvements")
    details += [f"{n} {g}" for g, n in sorted(cell.other.items())]
    rel = f'<span class="rel">{escape(release)}</span>' if note_release else ""
    mark = f'<span class="mark">{escape(" ".join(marks))}</span>' if marks else ""
    return (
        f'<td class="cell" style="--su:{_speedup_colour(s)};--ch:{_change_colour(cell)}" '
        f'data-speedup="{"" if s is None else f"{s:.4g}"}" data-alerts="{len(cell.alerts)}" '
        f'title="{escape(chr(10).join(details), quote=True)}"><a href="{escape(link, quote=True)}">'
        f"{escape(value)}{rel}{mark}</a></td>"
    )


LEGEND = (
    '<p class="legend note">Colour by <select class="colour" aria-label="colour cells by">'
    '<option value="speedup">liger\'s speed-up over its baselines</option>'
    '<option value="change">changes starting at that release</option></select> '
    '<span style="background:hsl(130,55%,66%)">liger faster</span>'
    '<span style="background:hsl(0,55%,66%)">liger slower</span>'
    '<span style="background:hsl(0,75%,70%)">▲ alert (liger)</span>'
    '<span style="background:hsl(130,50%,82%)">▼ improvement</span>'
    '<span style="background:hsl(265,30%,86%)">● other cause</span>'
    " · a cell: geometric mean of liger's speed-up over its baselines (speed, every pass); "
    "hover it for each pass and baseline.</p>"
)


def _kernel_th(kernel: str, page_of: Callable[[str], str]) -> str:
    return f'<th class="kernel"><a href="{escape(page_of(kernel))}">{escape(kernel)}</a></th>'


def kernel_by_gpu(m: Matrix, page_of: Callable[[str], str]) -> str:
    """Kernels against GPUs, each GPU at its newest release (a kernel's own newest release on
    that GPU where it was not measured there, named in the cell)."""
    gpus = m.gpus()
    if not gpus:
        return '<p class="note">no runs</p>'
    newest = {g: m.releases(g)[-1] for g in gpus}
    head = "".join(
        f"<th>{escape(g)}<span class='rel'>newest: {escape(newest[g])}</span></th>" for g in gpus
    )
    rows = []
    for k in m.kernels:
        cells = []
        for g in gpus:
            rel = m.measured.get((k, g))
            if not rel:
                cells.append('<td class="cell muted">–</td>')
                continue
            last = max(rel, key=version_order)
            cells.append(
                _cell_html(k, m.cells.get((k, g, last)), last, page_of(k), last != newest[g])
            )
        rows.append(f"<tr>{_kernel_th(k, page_of)}{''.join(cells)}</tr>")
    return (
        f'{WIDE}<table class="matrix by-speedup" id="kernel-gpu"><thead><tr><th>kernel</th>'
        f"{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def release_by_kernel(m: Matrix, page_of: Callable[[str], str]) -> str:
    """For one GPU (a select; the one with the most releases first): kernels against releases."""
    gpus = m.gpus()
    if not gpus:
        return ""
    options = "".join(f'<option value="{i}">{escape(g)}</option>' for i, g in enumerate(gpus))
    views = []
    for i, g in enumerate(gpus):
        releases = m.releases(g)
        head = "".join(f"<th>{escape(r)}</th>" for r in releases)
        rows = []
        for k in m.kernels:
            rel = m.measured.get((k, g))
            if not rel:
                continue
            cells = "".join(
                _cell_html(k, m.cells.get((k, g, r)), r, page_of(k), False)
                if r in rel
                else '<td class="cell muted">–</td>'
                for r in releases
            )
            rows.append(f"<tr>{_kernel_th(k, page_of)}{cells}</tr>")
        views.append(
            f'<div data-gpu-view="{i}" class="wide"><table class="matrix by-speedup" '
            f'id="releases-{i}"><thead><tr><th>kernel</th>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></div>"
        )
    return (
        '<p><label>GPU: <select class="gpu-pick" aria-label="GPU">'
        f"{options}</select></label></p>{''.join(views)}"
    )
