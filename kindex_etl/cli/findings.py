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


def _regressions_arguments(p: argparse.ArgumentParser) -> None:
    _warehouse_argument(p)
    p.add_argument(
        "--since",
        default=None,
        metavar="VERSION",
        help="only changes first seen at this release or later (PEP 440)",
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
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def _num(value: object) -> str:
    return "-" if not isinstance(value, float) else f"{value:.4g}"


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


def regressions_human(result: dict[str, Any]) -> str:
    from kindex_etl.analysis.alerts import commit_range

    lines = [regressions_summary(result)]
    if result.get("report"):
        lines.append(f"report: {result['report']}")
    for c in ranked_changes(result["changes"]):
        lines.append(
            f"{c['state']:<11} x{c['ratio']:.4g} [{c['ratio_low']:.4g}, {c['ratio_high']:.4g}] "
            f"{c['kernel']}/{c['operation_mode']}/{c['provider']} {c['metric']} "
            f"{c['gpu_name']} [{c['software_class']}] {c['workload_slug']}: "
            f"{c['before_release']} -> {c['after_release']} "
            f"{c.get('origin') or '-'} {commit_range(c)} "
            f"first release {c.get('first_release') or '-'}, "
            f"baselines x{_num(c.get('baseline_ratio'))}, "
            f"harness {c.get('before_harness') or '-'} -> {c.get('after_harness') or '-'} "
            f"(false-alarm rate of {c['series_class']}: {c['false_alarm_rate']})"
        )
    return "\n".join(lines)


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
    after_seq = getattr(args, "after_seq", None)
    if not args.dry_run and (args.since is not None or after_seq is not None):
        _pay_owed(args, url)
    result = analyse(url, since=args.since, write=not args.dry_run, after_seq=after_seq)
    if args.json:
        result.write_json(sys.stdout)
        sys.stdout.write("\n")
    elif not args.quiet:
        print(regressions_human(result.as_dict()))
    return 0


REGRESSIONS = Command(
    "regressions",
    "find changes per series; write them and the report",
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
