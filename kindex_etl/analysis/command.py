"""`kindex-etl regressions`: detect changes in a warehouse, record them, rewrite the report."""

from __future__ import annotations

import argparse
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--warehouse", required=True, help="directory or s3://bucket[/prefix]")
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


def human(result: dict[str, object]) -> str:
    from .alerts import commit_range

    changes = result["changes"]
    assert isinstance(changes, list)
    lines = []
    for c in changes:
        lines.append(
            f"{c['state']:<11} {c['kernel']}/{c['operation_mode']}/{c['provider']} {c['metric']} "
            f"{c['gpu_name']} [{c['software_class']}] {c['workload_slug']}: "
            f"{c['before_release']} -> {c['after_release']} x{c['ratio']:.4g} "
            f"[{c['ratio_low']:.4g}, {c['ratio_high']:.4g}] "
            f"{c.get('origin') or '-'} {commit_range(c)} "
            f"first release {c.get('first_release') or '-'}, "
            f"baselines x{_num(c.get('baseline_ratio'))}, "
            f"harness {c.get('before_harness') or '-'} -> {c.get('after_harness') or '-'} "
            f"(false-alarm rate of {c['series_class']}: {c['false_alarm_rate']})"
        )
    lines.append(
        f"{result['series']} series, {result['runs']} runs at commit {result['seq']}: "
        f"{len(changes)} changes, {result['alerts']} alerts ({result['new_alerts']} new)"
    )
    if result.get("report"):
        lines.append(f"report: {result['report']}")
    return "\n".join(lines)


def run_from_args(args: argparse.Namespace) -> int:
    from ..storage import StorageError
    from .run import run_regressions

    try:
        result = run_regressions(
            args.warehouse,
            since=args.since,
            write=not args.dry_run,
            after_seq=getattr(args, "after_seq", None),
        )
    except (StorageError, ValueError, OSError) as exc:
        print(f"kindex-etl: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        result.write_json(sys.stdout)
        sys.stdout.write("\n")
    else:
        print(human(result.as_dict()))
    return 0
