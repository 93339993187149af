"""`kindex-etl triage CHANGE_ID --state ...`: record a person's verdict on a change.

The work is `kindex_etl.report.triage` (one commit to the warehouse's `triage` table); the
report shows the verdict the next time it is written (`--report`: at once), and `invalid`
verdicts on alerts make its measured false-alarm rate.
"""

from __future__ import annotations

import argparse
import json
import sys

from kindex_etl.cli.registry import Command

STATES = ("acknowledged", "expected", "invalid")


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "change_id",
        metavar="CHANGE_ID",
        help="the change (as the report and the regressions table show it; a unique prefix "
        "of at least 8 hex digits will do)",
    )
    p.add_argument(
        "--state",
        required=True,
        choices=STATES,
        help="acknowledged: a real change someone is on; expected: real and intended; "
        "invalid: not a change (a false alarm)",
    )
    p.add_argument("--note", default="", help="why, in a few words (shown in the report)")
    p.add_argument("--by", default=None, help="who gives the verdict (default: the OS user)")
    p.add_argument(
        "--warehouse",
        default=None,
        metavar="URL",
        help="directory or s3://bucket[/prefix] (default: $KINDEX_WAREHOUSE, else ./warehouse)",
    )
    p.add_argument(
        "--report",
        action="store_true",
        help="then bring the report up to date (runs the analysis, as `kindex-etl regressions`)",
    )
    p.add_argument("--json", action="store_true", help="print the row written as JSON")


def run(args: argparse.Namespace) -> int:
    from kindex_etl.cli import checks
    from kindex_etl.config import settings
    from kindex_etl.report.triage import TriageError, record_verdict
    from kindex_etl.storage import StorageError

    url = str(args.warehouse or settings().warehouse)
    # The checks and words of every command (`no warehouse at ...`, `warehouse: no such
    # bucket`), before a change is looked up in a table that cannot be there (issue 54).
    store = checks.warehouse(url)
    try:
        row = record_verdict(
            store,
            args.change_id,
            args.state,
            note=args.note,
            author=args.by,
        )
    except (TriageError, StorageError, OSError) as exc:
        print(f"kindex-etl: error: {exc}", file=sys.stderr)
        return 2
    if args.report:
        from kindex_etl.analysis.run import run_regressions

        row["report"] = run_regressions(url).report
    if args.json:
        print(json.dumps(row, sort_keys=True))
    else:
        print(
            f"{row['change_id']} ({row['change_state']}): {row['verdict']}"
            f"{' - ' + row['note'] if row['note'] else ''} (commit {row['seq']})"
        )
        print(
            f"report: {row['report']}"
            if args.report
            else "the report shows it from the next `kindex-etl regressions` (or use --report)"
        )
    return 0


TRIAGE = Command("triage", "record a verdict on a change (acknowledged, expected, invalid)",
                 _arguments, run)  # fmt: skip
