"""The `kindex-etl` command."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any


def _quiet_prefect() -> None:
    # Offline by default: no telemetry, and an ephemeral server when no API URL is configured.
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "60")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")


def _fail(message: str) -> int:
    print(f"kindex-etl: error: {message}", file=sys.stderr)
    return 2


def _emit(data: dict[str, Any], as_json: bool, human: str) -> None:
    if as_json:
        print(json.dumps(data, sort_keys=True))
    else:
        print(human)


def _human_summary(s: dict[str, Any]) -> str:
    lines = [
        f"objects: {s['objects_seen']} seen, {s['objects_ingested']} ingested, "
        f"{s['objects_skipped']} skipped, {s['objects_rejected']} rejected",
        f"rows: {s['rows_read']} read -> {s['runs_written']} new runs, "
        f"{s['duplicate_rows']} duplicates, {s['quarantined_rows']} quarantined",
    ]
    if s["quarantined_by_reason"]:
        lines.append(
            "quarantined by reason: "
            + ", ".join(f"{k}={v}" for k, v in sorted(s["quarantined_by_reason"].items()))
        )
    lines.append(f"new liger versions: {', '.join(s['new_versions']) or 'none'}")
    for r in s.get("reruns_triggered", []):
        lines.append(f"GPU re-run for {r['version']}: {r.get('state', 'requested')}")
        if r.get("howToRun"):
            lines.append(f"  run it with: {r['howToRun']}")
    lines.append(f"took {s['elapsed_s']:.2f} s")
    return "\n".join(lines)


def _check_urls(upstream: str, warehouse: str) -> str | None:
    """Fail fast, before Prefect starts, on a missing upstream or an unusable warehouse."""
    from kindex_etl.storage import StorageError, open_store

    try:
        open_store(upstream)
        open_store(warehouse, create=True)
    except (StorageError, ValueError, OSError) as exc:
        return str(exc)
    return None


def _prestart_prefect() -> Callable[[], None]:
    """Start Prefect's ephemeral API server in the background; returns a join function.

    Without a configured API, the first flow run starts a local server subprocess (seconds):
    starting it while this process imports the pipeline's libraries hides part of that.
    """
    import threading

    if os.environ.get("PREFECT_API_URL"):
        return lambda: None

    def start() -> None:
        try:
            from prefect.server.api.server import SubprocessASGIServer

            SubprocessASGIServer().start()
        except Exception:  # noqa: S110 - the flow run starts it again and reports the error
            pass

    thread = threading.Thread(target=start, name="prefect-prestart", daemon=True)
    thread.start()
    return thread.join


def cmd_ingest(args: argparse.Namespace) -> int:
    from kindex_etl.storage import StorageError

    problem = _check_urls(args.upstream, args.warehouse)
    if problem:
        return _fail(problem)
    _quiet_prefect()
    join = _prestart_prefect()
    from flows.ingest import ingest_flow

    join()

    try:
        state = ingest_flow(
            upstream=args.upstream,
            warehouse=args.warehouse,
            backfill=args.backfill,
            trigger=not args.no_trigger,
            prefix=args.prefix,
            return_state=True,
        )
        summary = state.result()
    except (StorageError, ValueError, OSError) as exc:
        return _fail(str(exc))
    _emit(summary, args.json, _human_summary(summary))
    return 0


def cmd_backfill(args: argparse.Namespace) -> int:
    from kindex_etl.config import settings
    from kindex_etl.storage import StorageError, open_store

    try:  # fail fast on a missing upstream; the warehouse is not created here (dry runs)
        open_store(args.upstream or settings().upstream)
    except (StorageError, ValueError, OSError) as exc:
        return _fail(str(exc))
    _quiet_prefect()
    join = _prestart_prefect()
    from flows.backfill import backfill_flow

    join()
    try:
        state = backfill_flow(
            upstream=args.upstream, warehouse=args.warehouse, prefix=args.prefix,
            from_commit=args.from_commit, to_commit=args.to_commit,
            min_version=args.min_version, max_version=args.max_version,
            since=args.since, until=args.until, dry_run=args.dry_run, trigger=args.trigger,
            objects_per_batch=args.objects_per_batch, return_state=True,
        )  # fmt: skip
        summary = state.result()
    except (StorageError, ValueError, OSError) as exc:
        return _fail(str(exc))
    if args.dry_run:
        objects = summary["objects"]
        lines = [
            f"{o['key']}  etag={o['etag']}  size={o['size']}"
            + (f"  ({o['detail']})" if o["detail"] else "")
            for o in objects
        ]
        total = sum(o["size"] for o in objects)
        lines.append(
            f"dry run: {len(objects)} object(s), {total} bytes would be re-ingested; "
            "nothing was changed"
        )
        human = "\n".join(lines)
    else:
        human = _human_summary(summary)
    _emit(summary, args.json, human)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from kindex_etl.catalog import load_catalog
    from kindex_etl.ingestion.replay import replay
    from kindex_etl.storage import StorageError

    try:
        catalog = load_catalog(args.catalog_dir) if args.catalog_dir else None
        summary = replay(args.warehouse, catalog=catalog).as_dict()
    except (StorageError, ValueError, OSError) as exc:
        return _fail(str(exc))
    _emit(summary, args.json, _human_summary(summary))
    return 0


def cmd_quarantine(args: argparse.Namespace) -> int:
    from kindex_etl.ingestion.replay import open_quarantine
    from kindex_etl.storage import StorageError

    try:
        table = open_quarantine(args.warehouse)
    except (StorageError, ValueError, OSError) as exc:
        return _fail(str(exc))
    rows = table.select(["source_key", "source_etag", "source_row", "reason", "detail"]).to_pylist()
    if args.json:
        print(json.dumps({"rows": rows}, sort_keys=True))
    else:
        for r in rows:
            print(
                f"{r['source_key']}@{r['source_etag']} row {r['source_row']}: "
                f"{r['reason']}: {r['detail']}"
            )
        print(f"{len(rows)} row(s) held back")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from pathlib import Path

    from kindex_etl.contracts.documents import json_schemas

    schemas = json_schemas()
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for kind, schema in schemas.items():
            (out / f"{kind}.schema.json").write_text(json.dumps(schema, indent=2) + "\n")
        print(f"wrote {len(schemas)} schemas to {out}")
    else:
        print(json.dumps(schemas, indent=2))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    _quiet_prefect()
    from kindex_etl.demo import run_demo

    return run_demo(args.workdir, offline=args.offline)


def cmd_reruns(args: argparse.Namespace) -> int:
    from kindex_etl.load.warehouse import open_warehouse
    from kindex_etl.reruns import list_reruns, request_rerun
    from kindex_etl.storage import StorageError

    try:
        # Listing reads only: a mistyped path is an error, never a new folder.
        warehouse = open_warehouse(args.warehouse, create=bool(args.request))
        if args.request:
            _quiet_prefect()
            made = request_rerun(
                warehouse, args.request, reason="requested by hand", upstream=args.upstream
            )
            if made is None:
                print(f"a re-run of {args.request} was already requested", file=sys.stderr)
        records = list_reruns(warehouse.store)
    except (StorageError, ValueError, OSError) as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps({"reruns": records}, sort_keys=True))
        return 0
    for r in records:
        run = f" flow run {r['flowRunId']}" if r.get("flowRunId") else ""
        print(f"{r.get('version')}: {r.get('state')} (requested {r.get('requestedAt')}){run}")
        if r.get("error"):
            print(f"  error: {r['error']}")
        if r.get("state") in ("manual", "announced", "requested", "failed-to-start", "failed"):
            print(f"  run it with: {r.get('howToRun')}")
    print(f"{len(records)} re-run request(s)")
    return 0


def cmd_rerun(args: argparse.Namespace) -> int:
    import importlib.util

    from kindex_etl.gpu.command import run_from_args

    if importlib.util.find_spec("prefect") is None:
        return run_from_args(args)
    from flows.gpu_rerun import gpu_rerun_flow

    return run_from_args(args, run_flow=gpu_rerun_flow)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kindex-etl", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("ingest", help="ingest new upstream CSVs into the warehouse")
    p.add_argument("--upstream", required=True, help="directory or s3://bucket[/prefix]")
    p.add_argument("--warehouse", required=True, help="directory or s3://bucket[/prefix]")
    p.add_argument("--backfill", action="store_true",
                   help="re-read every object, even unchanged ones; no GPU re-runs")  # fmt: skip
    p.add_argument("--no-trigger", action="store_true", help="do not trigger GPU re-runs")
    p.add_argument("--prefix", default="", help="only objects under this key prefix")
    p.add_argument("--json", action="store_true", help="print one JSON summary on stdout")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("backfill", help="re-ingest selected upstream objects (manual backfill)")
    p.add_argument("--upstream", default=None, help="directory or s3://... (KINDEX_UPSTREAM)")
    p.add_argument("--warehouse", default=None, help="directory or s3://... (KINDEX_WAREHOUSE)")
    p.add_argument("--prefix", default="", help="only objects under this key prefix")
    p.add_argument("--from-commit", default=None,
                   help="first commit of benchmarks/commits.txt to take (included)")  # fmt: skip
    p.add_argument("--to-commit", default=None, help="last commit to take (included)")
    p.add_argument("--min-version", default=None,
                   help="only release folders <sha>-<tag> with tag >= this version")  # fmt: skip
    p.add_argument("--max-version", default=None, help="... and <= this version")
    p.add_argument("--since", default=None,
                   help="objects modified at/after this ISO time (UTC if no zone)")  # fmt: skip
    p.add_argument("--until", default=None, help="objects last modified before this ISO time")
    p.add_argument("--objects-per-batch", type=int, default=32,
                   help="objects per commit batch (progress is reported per batch)")  # fmt: skip
    p.add_argument("--dry-run", action="store_true",
                   help="list the objects (key, etag, size); change nothing")  # fmt: skip
    p.add_argument("--trigger", action="store_true",
                   help="request GPU re-runs for versions new to the warehouse")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON summary on stdout")
    p.set_defaults(func=cmd_backfill)

    p = sub.add_parser("replay", help="replay held-back rows (after a catalog update)")
    p.add_argument("--warehouse", required=True)
    p.add_argument("--catalog-dir", default=None, help="directory with gpus.json/kernels.json")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("quarantine", help="list rows and files held back, with reasons")
    p.add_argument("--warehouse", required=True)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_quarantine)

    p = sub.add_parser("reruns", help="list GPU re-run requests and their state")
    p.add_argument("--warehouse", required=True)
    p.add_argument("--request", metavar="VERSION", default=None,
                   help="request a re-run of this version by hand (exactly once)")  # fmt: skip
    p.add_argument("--upstream", default=None, help="where that re-run uploads (with --request)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_reruns)

    from kindex_etl.gpu.command import add_arguments as add_rerun_arguments

    p = sub.add_parser("rerun", help="run a liger-kernel release's benchmarks on this GPU")
    add_rerun_arguments(p)
    p.set_defaults(func=cmd_rerun)

    from kindex_etl.analysis import command as regressions

    p = sub.add_parser("regressions", help="find changes per series; write them and the report")
    regressions.add_arguments(p)
    p.set_defaults(func=regressions.run_from_args)

    p = sub.add_parser("schema", help="export the JSON Schema of each document kind")
    p.add_argument("--out", default=None)
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser("demo", help="lay out an upstream folder, ingest it, query it")
    p.add_argument("--workdir", default="kindex-demo")
    p.add_argument("--offline", action="store_true",
                   help="do not fetch the liger-kernel sdist; use a generated sample")  # fmt: skip
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
