"""`kindex-etl regressions` and `kindex-etl quarantine`: what the warehouse found, summary first.

Both can print hundreds of lines; an operator reads the top of the output, so the totals come
first and the lines are ranked: alerts before pending changes and improvements, each by size
(|log ratio|); held-back rows by their reason's count, the most common reason first.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from kindex_etl.cli import checks
from kindex_etl.cli.registry import Command

# Alerts matter most, then what may become one, then good news.
_STATE_RANK = {"alert": 0, "pending": 1, "improvement": 2}


def _warehouse_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--warehouse",
        default=None,
        metavar="URL",
        help="directory or s3://bucket[/prefix] of the warehouse "
        "(default: $KINDEX_WAREHOUSE, else ./warehouse)",
    )


def _warehouse(args: argparse.Namespace) -> str:
    from kindex_etl.config import settings

    url = str(args.warehouse or settings().warehouse)
    checks.warehouse(url)
    return url


# -- regressions ---------------------------------------------------------------------------

STATES = ("alert", "pending", "improvement", "environment", "harness")
ORIGINS = {"ci": "upstream CI", "contributed": "contributed runs", "rerun": "our GPU re-run"}
LEGEND = (
    "legend: STATE xRATIO (after/before, above 1: slower or larger) [95 % interval] KERNEL PASS "
    "PROVIDER METRIC on GPU, WORKLOAD: where it starts (releases, commits, whose runs); what "
    "moved beside it; the benchmark script; how often the detector alerts on such a series "
    "when nothing changed; another cause the evidence could not rule out\n"
    "states: alert = act on it; pending = not yet held by enough points after it; "
    "improvement; environment = moved with its baselines, or as the other kernels of its "
    "class did where many stepped (no alert); harness = this provider's benchmark code "
    "changed at the step (no alert)"
)


def _states(text: str) -> list[str]:
    """`--state alert,pending` (repeatable) as a list, each one a known state."""
    out = [s.strip() for s in text.split(",") if s.strip()]
    for s in out:
        if s not in STATES:
            raise argparse.ArgumentTypeError(f"{s!r} is not one of {', '.join(STATES)}")
    return out


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return n


def _regressions_arguments(p: argparse.ArgumentParser) -> None:
    _warehouse_argument(p)
    p.add_argument(
        "--since",
        default=None,
        metavar="VERSION",
        help="only changes that start at this release or later (PEP 440): the analysis looks "
        "no lower, and so does the listing (with --show, the listing only)",
    )
    p.add_argument(
        "--after-seq",
        type=int,
        default=None,
        metavar="SEQ",
        help="analyse only the series that ingests after warehouse commit SEQ touched "
        "(the report is left as the last full analysis wrote it)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="detect and print only: no regressions commit, no report",
    )
    p.add_argument(
        "--show",
        action="store_true",
        help="no analysis: list what the regressions table holds (each change's latest "
        "state, retracted ones left out), in seconds on any warehouse",
    )
    g = p.add_argument_group(
        "what is listed (the analysis itself always looks at every series; the totals stay)"
    )
    g.add_argument(
        "--state",
        type=_states,
        action="extend",
        default=None,
        metavar="STATE[,STATE]",
        help=f"only these states ({', '.join(STATES)}); repeatable",
    )
    g.add_argument(
        "--kernel",
        action="append",
        default=None,
        metavar="NAME",
        help="only this kernel (a shell pattern such as 'fused_linear_*'); repeatable",
    )
    g.add_argument(
        "--gpu",
        action="append",
        default=None,
        metavar="TEXT",
        help="only GPUs whose name holds TEXT (case-insensitive, e.g. H100); repeatable",
    )
    g.add_argument(
        "--limit",
        type=_positive,
        default=None,
        metavar="N",
        help="at most N changes, the first of the ranking (alerts first, largest first)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object on stdout (its `changes`: those the filters select)",
    )


@dataclass(frozen=True)
class Selection:
    """Which changes are listed: the analysis (or the table) holds every one of them."""

    states: tuple[str, ...] = ()
    kernels: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    since: str | None = None
    limit: int | None = None

    @classmethod
    def of(cls, args: argparse.Namespace) -> Selection:
        return cls(
            states=tuple(args.state or ()),
            kernels=tuple(args.kernel or ()),
            gpus=tuple(g.lower() for g in args.gpu or ()),
            since=args.since,
            limit=args.limit,
        )

    def keeps(self, c: dict[str, Any]) -> bool:
        from kindex_etl.analysis.series import version_order

        if self.states and c["state"] not in self.states:
            return False
        if self.kernels and not any(fnmatchcase(str(c["kernel"]), k) for k in self.kernels):
            return False
        gpu = str(c.get("gpu_name") or "").lower()
        if self.gpus and not any(g in gpu for g in self.gpus):
            return False
        after = str(c.get("after_release") or "")
        return self.since is None or version_order(after) >= version_order(self.since)

    def pick(self, changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The selected changes, ranked, at most `limit`."""
        return ranked_changes([c for c in changes if self.keeps(c)])[: self.limit]

    def describe(self) -> str:
        parts = [f"state {'/'.join(self.states)}"] if self.states else []
        parts += [f"kernel {'/'.join(self.kernels)}"] if self.kernels else []
        parts += [f"GPU ~{'/'.join(self.gpus)}"] if self.gpus else []
        parts += [f"from {self.since}"] if self.since else []
        parts += [f"the first {self.limit}"] if self.limit else []
        return ", ".join(parts)


def ranked_changes(changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Alerts first, then pending, then improvements; within each, the largest change first."""

    def size(c: dict[str, Any]) -> float:
        ratio = c.get("ratio") or 1.0
        return abs(math.log(ratio)) if ratio > 0 and math.isfinite(ratio) else math.inf

    return sorted(changes, key=lambda c: (_STATE_RANK.get(c["state"], 3), -size(c)))


def analysis_human(found: dict[str, Any]) -> str:
    """A chained or daily analysis's summary (`flows.common.analysis_subflow`) in one line."""
    return (
        f"{found['changes']} changes, {found['alerts']} alerts ({found['new_alerts']} new)"
        + (f", {found['retracted']} retracted" if found.get("retracted") else "")
        + (f"; report: {found['report']}" if found.get("report") else "")
    )


def regressions_summary(result: dict[str, Any]) -> str:
    changes = result["changes"]
    count = changes if isinstance(changes, int) else len(changes)
    retracted = result.get("retracted") or 0
    return (
        f"{result['series']} series, {result['runs']} runs at commit {result['seq']}: "
        f"{count} changes, {result['alerts']} alerts ({result['new_alerts']} new)"
        + (f", {retracted} retracted (no longer found)" if retracted else "")
    )


def by_state(changes: list[dict[str, Any]]) -> str:
    """`7 alert, 7 pending, 30 improvement, ...`: alerts first, as the listing."""
    counts = Counter(c["state"] for c in changes)
    order = sorted(counts, key=lambda s: (STATES.index(s) if s in STATES else len(STATES), s))
    return ", ".join(f"{counts[s]} {s}" for s in order)


def _sha(value: object) -> str:
    return str(value)[:7]


def where(c: dict[str, Any]) -> str:
    """Where a change starts, in words: releases, commits, whose runs, the release that
    shipped it. Runs between two releases carry the older one's version: their change reads
    "after 0.7.0, at commits a..b, first released in 0.8.0", not "0.7.0 -> 0.7.0"."""
    before, after = str(c.get("before_release") or "?"), str(c.get("after_release") or "?")
    a, b = c.get("before_commit"), c.get("after_commit")
    commits = f"commits {_sha(a)}..{_sha(b)}" if a and b else ""
    first = c.get("first_release")
    shipped = f"first released in {first}" if first else "not in a release yet"
    origin = ORIGINS.get(str(c.get("origin") or ""), str(c.get("origin") or ""))
    if before == after:
        head = f"after {after}" + (f", between {commits}" if commits else "")
        rest = [shipped]
    else:
        head = f"{before} -> {after}"
        rest = [commits] if commits else []
        if first != after:  # the after release shipped it: saying so again adds nothing
            rest.append(shipped)
    rest += [f"runs of {origin}"] if origin else []
    return head + (f" ({', '.join(r for r in rest if r)})" if rest else "")


def beside(c: dict[str, Any]) -> str:
    """What the other providers measured in the same runs did at the step, and how many
    kernels stepped there too."""
    ratio = c.get("baseline_ratio")
    names = ", ".join(c.get("baseline_providers") or ())
    if isinstance(ratio, float) and math.isfinite(ratio):
        words = f"{names or 'the other providers'} moved x{ratio:.3g}"
    elif str(c.get("provider") or "").startswith("liger"):
        words = "no baseline measured"
    else:
        words = "no other provider measured"
    kernels = c.get("kernels_at_step") or 0
    return words + (f", {kernels} kernels stepped here" if kernels > 1 else "")


def script(c: dict[str, Any]) -> str:
    """The benchmark script (harness) revision on each side of the step, in words."""
    before, after = c.get("before_harness"), c.get("after_harness")
    if not before and not after:
        return "benchmark script revision unknown"
    if before == after:
        return f"benchmark script unchanged (revised last at {_sha(after)})"
    return f"benchmark script revised at the step ({_sha(before or '?')} -> {_sha(after or '?')})"


def change_line(c: dict[str, Any], new: bool = False) -> str:
    software = str(c.get("software_class") or "upstream")
    machine = str(c["gpu_name"]) + ("" if software == "upstream" else f" ({software})")
    rate = c.get("false_alarm_rate")
    alarms = f"{rate:.1%}" if isinstance(rate, float) and math.isfinite(rate) else "unknown"
    return (
        f"{c['state']:<11} x{c['ratio']:.4g} [{c['ratio_low']:.4g}, {c['ratio_high']:.4g}] "
        f"{c['kernel']} {c['operation_mode']} {c['provider']} {c['metric']} on {machine}, "
        f"{c['workload_slug']}: {where(c)}; {beside(c)}; {script(c)}; "
        f"false-alarm rate of {c['series_class']}: {alarms}"
        + (f"; {c['suspected']} suspected too" if c.get("suspected") else "")
        + ("; new" if new else "")
    )


def listing(
    head: list[str],
    changes: list[dict[str, Any]],
    selection: Selection,
    new: Collection[str] = frozenset(),
) -> str:
    """The summary, the legend, then the selected changes one per line."""
    shown = selection.pick(changes)
    lines = [*head, f"by state: {by_state(changes) or 'none'}"]
    matching = sum(1 for c in changes if selection.keeps(c))
    what = selection.describe()
    lines.append(
        f"listed: {len(shown)} of {len(changes)}" + (f" ({what}; {matching} match)" if what else "")
    )
    if shown:
        lines.append(LEGEND)
    lines += [change_line(c, c["change_id"] in new) for c in shown]
    return "\n".join(lines)


def regressions_human(result: dict[str, Any], selection: Selection | None = None) -> str:
    head = [regressions_summary(result)]
    if result.get("report"):
        head.append(f"report: {result['report']}")
    new = set(result.get("new_ids") or ())
    return listing(head, result["changes"], selection or Selection(), new)


def _pay_owed(args: argparse.Namespace, url: str) -> None:
    """A partial analysis (`--since`, `--after-seq`) does not settle what an earlier ingest's
    stopped analysis left owed (issue 54): run that one first, as the ingest would have."""
    from kindex_etl.analysis.owed import owed_analysis
    from kindex_etl.analysis.run import run_regressions as analyse
    from kindex_etl.storage import open_store

    owed = owed_analysis(open_store(url, create=False))
    if owed is None:
        return
    if not args.quiet:
        print(f"kindex-etl: {owed.describe()}: running it first", file=sys.stderr, flush=True)
    analyse(url, after_seq=owed.after_seq)


def run_regressions(args: argparse.Namespace) -> int:
    from kindex_etl.analysis.run import run_regressions as analyse

    url = _warehouse(args)
    selection = Selection.of(args)
    if args.show:
        return _show(args, url, selection)
    after_seq = getattr(args, "after_seq", None)
    if not args.dry_run and (args.since is not None or after_seq is not None):
        _pay_owed(args, url)
    result = analyse(url, since=args.since, write=not args.dry_run, after_seq=after_seq)
    if args.json:
        # The analysis's order, as before; only fewer rows where filters are given.
        picked = {id(c) for c in selection.pick(result.changes)}
        result.write_json(sys.stdout, [c for c in result.changes if id(c) in picked])
        sys.stdout.write("\n")
    elif not args.quiet:
        found = {**result.as_dict(), "new_ids": [c["change_id"] for c in result.new]}
        print(regressions_human(found, selection))
    return 0


def _show(args: argparse.Namespace, url: str, selection: Selection) -> int:
    """The table as the last analyses left it: no detection, no commit, no report."""
    if args.dry_run or args.after_seq is not None:
        raise checks.UsageError("--show analyses nothing: it takes no --dry-run or --after-seq")
    from kindex_etl.analysis.publish import latest_rows
    from kindex_etl.analysis.schema import REGRESSIONS_SCHEMA, RETRACTED
    from kindex_etl.analysis.spill import RUN_ID_FIELDS
    from kindex_etl.load.warehouse import open_warehouse

    warehouse = open_warehouse(url, create=False)
    warehouse.refresh()
    columns = [n for n in REGRESSIONS_SCHEMA.names if n not in RUN_ID_FIELDS]
    changes = [r for r in latest_rows(warehouse, columns) if r["state"] != RETRACTED]
    changes.sort(key=lambda r: (r["kernel"], r["series_key"], r["after_release"]))
    analysed = max((r["warehouse_seq"] or 0 for r in changes), default=None)
    if args.json:
        picked = {id(c) for c in selection.pick(changes)}
        rows = [c for c in changes if id(c) in picked]
        data = {
            "warehouse": url,
            "seq": warehouse.head,
            "analysed_seq": analysed,
            "changes": rows,
            "alerts": sum(1 for c in changes if c["state"] == "alert"),
        }
        print(json.dumps(data, sort_keys=True, default=str))
    elif not args.quiet:
        head = (
            f"the regressions table at warehouse commit {warehouse.head} (analysed through "
            f"commit {analysed if analysed is not None else '-'}; not analysed again): "
            f"{len(changes)} changes, "
            f"{sum(1 for c in changes if c['state'] == 'alert')} alerts"
        )
        print(listing([head], changes, selection))
    return 0


REGRESSIONS = Command(
    "regressions",
    "find changes per series; write them and the report (--show: list them, no analysis)",
    _regressions_arguments,
    run_regressions,
)


# -- quarantine ----------------------------------------------------------------------------


def _quarantine_arguments(p: argparse.ArgumentParser) -> None:
    _warehouse_argument(p)
    p.add_argument("--json", action="store_true", help='print {"rows": [...]} on stdout')


def ranked_rows(rows: list[dict[str, Any]]) -> tuple[Counter[str], list[dict[str, Any]]]:
    by_reason = Counter(r["reason"] for r in rows)
    order = {reason: i for i, (reason, _) in enumerate(by_reason.most_common())}
    ranked = sorted(rows, key=lambda r: (order[r["reason"]], r["source_key"], r["source_row"] or 0))
    return by_reason, ranked


def quarantine_human(rows: list[dict[str, Any]]) -> str:
    by_reason, ranked = ranked_rows(rows)
    head = f"{len(rows)} row(s) held back"
    if by_reason:
        head += ": " + ", ".join(f"{reason} {n}" for reason, n in by_reason.most_common())
    lines = [head]
    for r in ranked:
        lines.append(
            f"{r['reason']}: {r['source_key']}@{r['source_etag']} row {r['source_row']}: "
            f"{r['detail']}"
        )
    return "\n".join(lines)


def run_quarantine(args: argparse.Namespace) -> int:
    from kindex_etl.ingestion.replay import open_quarantine

    table = open_quarantine(_warehouse(args))
    rows = table.select(["source_key", "source_etag", "source_row", "reason", "detail"]).to_pylist()
    if args.json:
        print(json.dumps({"rows": rows}, sort_keys=True))
    elif not args.quiet:
        print(quarantine_human(rows))
    return 0


QUARANTINE = Command(
    "quarantine",
    "list rows and files held back, with reasons (the most common reason first)",
    _quarantine_arguments,
    run_quarantine,
)
