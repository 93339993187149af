"""`kindex-etl migrate`: its arguments and output (the work is `kindex_etl.maintenance.migrate`)."""

from __future__ import annotations

import argparse
import json
import sys

from kindex_etl.cli.registry import Command


def cmd_migrate(args: argparse.Namespace) -> int:
    from kindex_etl.config import settings
    from kindex_etl.errors import StorageError
    from kindex_etl.maintenance.migrate import migrate

    url = str(args.warehouse or settings().warehouse)
    try:
        result = migrate(url)
    except (StorageError, ValueError, OSError) as exc:
        print(f"kindex-etl: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.as_dict(), sort_keys=True))
    elif not getattr(args, "quiet", False):
        what = "published to" if result.published else "already current in"
        n = len(result.tables)
        print(f"{result.warehouse}: log at commit {result.seq}, {what} {n} Delta tables")
        for table, version in result.tables.items():
            print(f"  {table:<24} Delta version {version}")
    return 0


_WAREHOUSE_HELP = "directory or s3://bucket[/prefix] (default: $KINDEX_WAREHOUSE, else ./warehouse)"


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--warehouse", default=None, help=_WAREHOUSE_HELP)
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")


MIGRATE = Command(
    "migrate", "publish an older warehouse's tables as Delta tables (no data rewritten)",
    _arguments, cmd_migrate,
)  # fmt: skip
