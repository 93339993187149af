"""`kindex-etl compact` and `kindex-etl vacuum`: their arguments and what they run
(the work itself is `kindex_etl.maintenance`)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import timedelta
from typing import Any

from kindex_etl.cli.registry import Command


def _run(args: argparse.Namespace, work: Any, human: Any) -> int:
    from kindex_etl.cli.checks import warehouse
    from kindex_etl.errors import StorageError

    warehouse(_warehouse(args))  # one that holds no warehouse is an error: nothing is created
    try:
        result = work()
    except (StorageError, ValueError, OSError) as exc:
        print(f"kindex-etl: error: {exc}", file=sys.stderr)
        return 2
    data = result.as_dict()
    if args.json:
        print(json.dumps(data, sort_keys=True))
    elif not args.quiet:
        print(human(data))
    return 0


def _files(counts: dict[str, int]) -> int:
    return sum(counts.values())


def compact_human(d: dict[str, Any]) -> str:
    """What a compaction did, in words (`--json` has every count by table)."""
    if d["commit"] is None:
        return f"nothing to compact: {_files(d['files_before'])} file(s), none left to merge"
    before, after = d["files_before"], d["files_after"]
    tables = ", ".join(
        f"{t} {before.get(t, 0)} -> {after.get(t, 0)}"
        for t in sorted(before)
        if before.get(t, 0) != after.get(t, 0)
    )
    return (
        f"compacted in commit {d['commit']}: {d['files_retired']} file(s) ({d['rows']:,} rows) "
        f"into {d['files_added']}; live files {_files(before)} -> {_files(after)} ({tables})\n"
        "the retired files stay for readers of older snapshots until `kindex-etl vacuum`"
    )


def vacuum_human(d: dict[str, Any]) -> str:
    kept = f"{d['kept']} retired file(s) kept, still inside the retention"
    if d["commit"] is None:
        return f"nothing to delete; {kept}"
    return f"vacuumed in commit {d['commit']}: {d['deleted']} retired file(s) deleted; {kept}"


def cmd_compact(args: argparse.Namespace) -> int:
    from kindex_etl.maintenance.compaction import compact

    return _run(
        args, lambda: compact(_warehouse(args), target_rows=args.target_rows), compact_human
    )


def cmd_vacuum(args: argparse.Namespace) -> int:
    from kindex_etl.maintenance.vacuuming import vacuum

    retention = None if args.retention_s is None else timedelta(seconds=args.retention_s)
    return _run(args, lambda: vacuum(_warehouse(args), retention=retention), vacuum_human)


_WAREHOUSE_HELP = "directory or s3://bucket[/prefix] (default: $KINDEX_WAREHOUSE, else ./warehouse)"
_JSON_HELP = "print one JSON object on stdout"


def _warehouse(args: argparse.Namespace) -> str:
    from kindex_etl.config import settings

    return str(args.warehouse or settings().warehouse)


def _compact_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--warehouse", default=None, help=_WAREHOUSE_HELP)
    p.add_argument("--target-rows", type=int, default=None,
                   help="rows per compacted file at most (KINDEX_COMPACT_TARGET_ROWS)")  # fmt: skip
    p.add_argument("--json", action="store_true", help=_JSON_HELP)


def _vacuum_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--warehouse", default=None, help=_WAREHOUSE_HELP)
    p.add_argument("--retention-s", type=float, default=None,
                   help="keep retired files this long (KINDEX_VACUUM_RETENTION_S)")  # fmt: skip
    p.add_argument("--json", action="store_true", help=_JSON_HELP)


COMPACT = Command(
    "compact", "rewrite small files into large ones, in one commit", _compact_arguments,
    cmd_compact,
)  # fmt: skip
VACUUM = Command(
    "vacuum", "delete files compaction retired, after the retention", _vacuum_arguments,
    cmd_vacuum,
)  # fmt: skip
