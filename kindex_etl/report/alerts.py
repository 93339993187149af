"""Changes as people read them: grouped by cause, liger apart from its baselines, newest first,
each row linked to its series chart, upstream's compare view and the runs behind it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

from .fields import compare_url, group_of, range_label, series_anchor
from .page import gpu_label, num, sort_value, sortable_table, text

# Groups in the order people should read them; any other value (a cause added later) follows.
GROUP_ORDER = ("alert", "kernel", "code", "pending", "environment", "harness", "contributed")
QUIET_GROUPS = frozenset({"improvement"})  # shown folded
# Per table: the newest; the rest are counted. 400 made the index of a 5M-run warehouse 3.8 MB,
# ready in 1.6 to 2.1 s in Chromium here; 200: 2.4 MB, 1.06 s.
MAX_ROWS = 200
MAX_RUN_IDS = 8  # per side, in a row's run list


def is_liger(provider: str) -> bool:
    """Liger's own implementations (`liger`, `liger_tiled`, ...), as against baselines."""
    return provider.startswith("liger")


@dataclass
class ChangeContext:
    """What the rows need besides the change: where its series is drawn, release order,
    dates, verdicts and the runs behind each change."""

    page_of: Callable[[str], str]  # kernel -> its page
    release_rank: Mapping[str, int]
    dates: dict[tuple[str, str], str] = field(default_factory=dict)  # (series, release)
    verdicts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    runs: Mapping[str, tuple[list[str], list[str]]] = field(default_factory=dict)

    def newest_first(self, changes: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        return sorted(changes, key=self._order, reverse=True)

    def _order(self, c: Mapping[str, Any]) -> tuple[int, str, str]:
        after = text(c.get("after_release"))
        return (
            self.release_rank.get(after, -1),
            self.dates.get((text(c.get("series_key")), after), ""),
            text(c.get("kernel")),
        )


def _chip(cls: str, label: str, title: str = "") -> str:
    t = f' title="{escape(title, quote=True)}"' if title else ""
    return f'<span class="chip {cls}"{t}>{escape(label)}</span>'


def state_chip(group: str) -> str:
    known = {"alert", "improvement", "pending", "environment", "harness"}
    return _chip(f"st-{group}" if group in known else "st-other", group)


def verdict_chip(verdict: Mapping[str, Any] | None) -> str:
    if not verdict:
        return ""
    state = text(verdict.get("state"))
    note = text(verdict.get("note"))
    when = text(verdict.get("recorded_at"))
    return _chip(f"v-{state}", state, f"{note} ({when})" if note else when)


def _runs_cell(change_id: str, ctx: ChangeContext, c: Mapping[str, Any]) -> str:
    before, after = ctx.runs.get(change_id, ([], []))
    n_before = int(c.get("before_runs") or len(before))
    n_after = int(c.get("after_runs") or len(after))
    if not before and not after:
        return f"{n_before} + {n_after}"

    def listing(label: str, ids: Sequence[str], total: int) -> str:
        shown = "".join(f"<li><code>{escape(i)}</code></li>" for i in ids[:MAX_RUN_IDS])
        more = (
            f"<li class='muted'>{total - len(ids[:MAX_RUN_IDS])} more</li>"
            if total > len(ids[:MAX_RUN_IDS])
            else ""
        )
        return f"<b>{label}</b><ul>{shown}{more}</ul>"

    return (
        f"<details><summary>{n_before} + {n_after}</summary>"
        f"{listing('before', before, n_before)}{listing('after', after, n_after)}</details>"
    )


HEADERS = [
    "after",
    "kernel",
    "pass · metric",
    "provider",
    "GPU",
    "workload",
    "range (compare)",
    "ratio after/before [95 %]",
    "p",
    "verdict",
    "runs before + after",
    "change id",
]


def change_row(c: Mapping[str, Any], ctx: ChangeContext) -> str:
    kernel = text(c.get("kernel"))
    series = text(c.get("series_key"))
    after = text(c.get("after_release"))
    date = ctx.dates.get((series, after), "")
    change_id = text(c.get("change_id"))
    href = f"{ctx.page_of(kernel)}#{series_anchor(series)}"
    url = compare_url(c)
    rng = escape(range_label(c))
    rng_cell = f'<a href="{escape(url, quote=True)}">{rng}</a>' if url else rng
    group = group_of(c)
    short = change_id.split(":")[-1][:12]
    ratio = c.get("ratio")
    software = text(c.get("software_class"))
    machine = gpu_label(c) + ("" if software in ("", "upstream") else f" · {software}")
    return (
        f'<tr data-group="{escape(group, quote=True)}">'
        f'<td data-sort="{ctx.release_rank.get(after, -1):05d} {escape(date)}">'
        f"{escape(after)}<br><span class='muted'>{escape(date[:10])}</span></td>"
        f'<td><a href="{escape(href, quote=True)}">{escape(kernel)}</a></td>'
        f"<td>{escape(text(c.get('operation_mode')))} · {escape(text(c.get('metric')))}</td>"
        f'<td>{escape(text(c.get("provider")))}</td><td class="gpu">{escape(machine)}</td>'
        f'<td class="wl">{escape(text(c.get("workload_slug")))}</td>'
        f"<td>{rng_cell}</td>"
        f'<td class="num" data-sort="{sort_value(ratio)}">{num(ratio, 4)} '
        f"[{num(c.get('ratio_low'), 4)}, {num(c.get('ratio_high'), 4)}]</td>"
        f'<td class="num" data-sort="{sort_value(c.get("p_value"))}">{num(c.get("p_value"))}</td>'
        f"<td>{state_chip(group)}{verdict_chip(ctx.verdicts.get(change_id))}"
        f"{_evidence(c)}</td>"
        f'<td class="runs">{_runs_cell(change_id, ctx, c)}</td>'
        f'<td><code title="{escape(change_id, quote=True)}">{escape(short)}</code></td></tr>'
    )


def _evidence(c: Mapping[str, Any]) -> str:
    """Another cause the rules could not rule out, and what each rule weighed."""
    suspected = text(c.get("suspected"))
    evidence = text(c.get("evidence"))
    out = f'<div class="muted">{escape(suspected)} suspected too</div>' if suspected else ""
    if evidence:
        out += f"<details><summary>why</summary>{escape(evidence)}</details>"
    return out


def changes_table(table_id: str, changes: Sequence[Mapping[str, Any]], ctx: ChangeContext) -> str:
    ordered = ctx.newest_first(changes)
    rows = [change_row(c, ctx) for c in ordered[:MAX_ROWS]]
    more = len(ordered) - MAX_ROWS
    note = f'<p class="note">{more} older ones not listed.</p>' if more > 0 else ""
    return sortable_table(table_id, HEADERS, rows) + note


def group_key(group: str) -> tuple[int, str]:
    """Where a group comes in what people read: alerts first, improvements last."""
    if group in GROUP_ORDER:
        return (GROUP_ORDER.index(group), group)
    if group in QUIET_GROUPS:
        return (len(GROUP_ORDER) + 1, group)
    return (len(GROUP_ORDER), group)


def boundaries(changes: Sequence[Mapping[str, Any]], top: int = 5) -> str:
    """Where a group's changes concentrate: release boundary and GPU, most first."""
    counts = Counter((range_label(c), gpu_label(c)) for c in changes)
    if not counts:
        return ""
    total = len(changes)
    items = "".join(
        f"<li><b>{n}</b> of {total} at {escape(rng)} on {escape(gpu)}</li>"
        for (rng, gpu), n in counts.most_common(top)
    )
    return f"<ul>{items}</ul>"


def grouped_changes(changes: Sequence[Mapping[str, Any]], ctx: ChangeContext) -> str:
    """Every change by its group (cause, or state), liger apart from its baselines."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for c in changes:
        groups.setdefault(group_of(c), []).append(c)
    out = []
    for group in sorted(groups, key=group_key):
        members = groups[group]
        liger = [c for c in members if is_liger(text(c.get("provider")))]
        base = [c for c in members if not is_liger(text(c.get("provider")))]
        gid = "g-" + "".join(ch if ch.isalnum() else "-" for ch in group)
        parts = [
            f"<h4>liger ({len(liger)})</h4>",
            boundaries(liger),
            changes_table(f"{gid}-liger", liger, ctx),
            f"<h4>baselines ({len(base)})</h4>",
            boundaries(base),
            changes_table(f"{gid}-base", base, ctx),
        ]
        opened = "" if group in QUIET_GROUPS else " open"
        out.append(
            f'<details class="group" id="{gid}"{opened}><summary><h3 style="display:inline">'
            f"{state_chip(group)} {len(members)} changes: {len(liger)} liger, "
            f"{len(base)} baselines</h3></summary>{''.join(parts)}</details>"
        )
    return "".join(out) or '<p class="note">no changes</p>'
