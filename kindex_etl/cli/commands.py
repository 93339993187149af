"""What each subcommand does: check first, then (where there is a flow) Prefect, then report.

Every default comes from `kindex_etl.config` (the `KINDEX_*` settings), named in the help.
Commands that only read (`quarantine`, `reruns` without `--request`, `schema` without `--out`,
`backfill --dry-run` for the warehouse, `server status`) never create a file or folder.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from kindex_etl.cli import checks
from kindex_etl.cli.registry import Command
from kindex_etl.config import DEFAULT_OBJECTS_PER_BATCH, settings

if TYPE_CHECKING:
    from kindex_etl.ingestion import IngestOptions

# -- shared --------------------------------------------------------------------------------


def _say(args: argparse.Namespace, text: str) -> None:
    """A status line on stderr (stdout is for results), unless --quiet."""
    if not getattr(args, "quiet", False):
        print(f"kindex-etl: {text}", file=sys.stderr, flush=True)


def _emit(args: argparse.Namespace, data: dict[str, Any], human: str) -> None:
    if args.json:
        print(json.dumps(data, sort_keys=True))
    elif not getattr(args, "quiet", False):
        print(human)


def _prefect_logging(args: argparse.Namespace) -> None:
    # Run logs go to the API at INFO (the Prefect UI shows progress); the terminal shows
    # Prefect's own console lines only with --verbose/--debug: errors are our one line.
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "INFO")
    loud = args.verbose or args.debug
    os.environ["PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL"] = "INFO" if loud else "CRITICAL"


def _start_prefect(args: argparse.Namespace) -> None:
    """Choose and check the Prefect API (before anything imports Prefect); say which."""
    from kindex_etl.cli.server import choose_api

    _prefect_logging(args)
    cfg = settings()
    api = choose_api(cfg)
    _say(args, api.describe())
    if api.url is not None:  # a server that outlives this command (not a temporary one)
        from pathlib import Path

        from kindex_etl import flow_runs

        ledgers = Path(cfg.state_dir).expanduser() / "flow-runs"
        flow_runs.crash_orphans(ledgers)  # runs of killed commands: Crashed, not Running
        flow_runs.keep_ledger(ledgers)


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
    found = s.get("analysis")
    if found:
        from kindex_etl.cli.findings import analysis_human

        lines.append(f"regressions: {analysis_human(found)}")
    parts = [f"{k} {s[k + '_s']:.2f} s" for k in ("ingest",) if s.get(k + "_s") is not None]
    if found:
        parts.append(f"analysis {found['elapsed_s']:.2f} s")
    lines.append(f"took {s['elapsed_s']:.2f} s" + (f" ({', '.join(parts)})" if parts else ""))
    return "\n".join(lines)


def _urls(p: argparse.ArgumentParser, *, upstream: bool = True, warehouse: bool = True) -> None:
    if upstream:
        p.add_argument(
            "--upstream",
            default=None,
            metavar="URL",
            help="directory or s3://bucket[/prefix] with the upstream CSVs "
            "(default: $KINDEX_UPSTREAM, else ./upstream)",
        )
    if warehouse:
        p.add_argument(
            "--warehouse",
            default=None,
            metavar="URL",
            help="directory or s3://bucket[/prefix] of the warehouse "
            "(default: $KINDEX_WAREHOUSE, else ./warehouse)",
        )


def _allow_empty(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allow-empty",
        action="store_true",
        help="succeed when no upstream CSV lies under the upstream URL and prefix "
        "(by default that is an error: most often a typo)",
    )


def _json_flag(p: argparse.ArgumentParser, what: str = "one JSON object") -> None:
    p.add_argument("--json", action="store_true", help=f"print {what} on stdout")


# -- ingest --------------------------------------------------------------------------------


def _ingest_arguments(p: argparse.ArgumentParser) -> None:
    _urls(p)
    p.add_argument(
        "--backfill",
        action="store_true",
        help="re-read every object, even unchanged ones; no GPU re-runs",
    )
    p.add_argument(
        "--no-trigger",
        action="store_true",
        help="do not request GPU re-runs for new liger versions",
    )
    p.add_argument("--prefix", default="", help="only objects under this key prefix")
    p.add_argument(
        "--no-regressions",
        action="store_true",
        help="skip the regressions flow that follows an ingest that committed runs (it stays "
        "owed: the next ingest or backfill without this flag, or `kindex-etl regressions`, "
        "runs it)",
    )
    _allow_empty(p)
    _json_flag(p, "one JSON summary")


def _answered_idle(
    args: argparse.Namespace, upstream: str, warehouse: str, options: IngestOptions
) -> bool:
    """Answer a run with nothing to do without starting Prefect; False if there is work.

    Nothing new upstream and nothing to recover means no commit and no trigger: the flow run
    would only record that it found nothing, and starting Prefect for that is most of a
    command's cost (README, "Start-up"). Scheduled runs are flow runs whatever they find.
    """
    from kindex_etl.ingestion import idle_summary

    summary = idle_summary(upstream, warehouse, options)
    if summary is None:
        return False
    if _owes_analysis(args, warehouse):
        return False
    _say(args, "nothing to do: answered without a flow run")
    _emit(args, summary.as_dict(), _human_summary(summary.as_dict()))
    return True


def _owes_analysis(args: argparse.Namespace, warehouse: str) -> bool:
    """Whether an earlier run left an analysis owed that this command must finish (issue 54:
    a stop after the commit lost it for good); says so. Never with --no-regressions."""
    from kindex_etl.analysis.owed import owed_analysis
    from kindex_etl.load.warehouse import existing_warehouse

    if getattr(args, "no_regressions", False) or getattr(args, "dry_run", False):
        return False
    found = existing_warehouse(warehouse)
    owed = owed_analysis(found.store) if found is not None else None
    if owed is not None:
        _say(args, f"nothing new upstream, but {owed.describe()}: running it")
    return owed is not None


def run_ingest(args: argparse.Namespace) -> int:
    import time

    from kindex_etl.cli.display import showing

    started = time.monotonic()

    cfg = settings()
    upstream, warehouse = args.upstream or cfg.upstream, args.warehouse or cfg.warehouse
    checks.store(upstream, what="upstream")
    if not args.allow_empty:
        checks.upstream_objects(upstream, args.prefix)  # before the warehouse is created
    checks.store(warehouse, what="warehouse", create=True)
    from kindex_etl.ingestion import IngestOptions

    options = IngestOptions(backfill=args.backfill, prefix=args.prefix)
    if _answered_idle(args, upstream, warehouse, options):
        return 0
    _start_prefect(args)
    from flows.ingest import run_ingest_flow

    with showing(args.quiet, args.verbose):
        state = run_ingest_flow(
            upstream=upstream,
            warehouse=warehouse,
            backfill=args.backfill,
            trigger=not args.no_trigger,
            prefix=args.prefix,
            regressions=not args.no_regressions,
            allow_empty=args.allow_empty,
            return_state=True,
        )
        summary = state.result()
    # The command's time, as its user waited for it: Prefect's start-up and the analysis too.
    summary["elapsed_s"] = time.monotonic() - started
    if not summary["commits"] and summary.get("analysis"):
        _say(args, "nothing else to do: the owed analysis is done")
    _emit(args, summary, _human_summary(summary))
    return 0


INGEST = Command(
    "ingest",
    "ingest new upstream CSVs into the warehouse",
    _ingest_arguments,
    run_ingest,
    description="Ingest every upstream CSV whose key and ETag are new into the warehouse, one "
    "commit per batch; progress on stderr, the summary on stdout.",
)


# -- backfill ------------------------------------------------------------------------------


def _backfill_arguments(p: argparse.ArgumentParser) -> None:
    _urls(p)
    p.add_argument("--prefix", default="", help="only objects under this key prefix")
    p.add_argument(
        "--from-commit",
        default=None,
        metavar="SHA",
        help="first commit of benchmarks/commits.txt to take (included)",
    )
    p.add_argument(
        "--to-commit", default=None, metavar="SHA", help="last commit to take (included)"
    )
    p.add_argument(
        "--min-version",
        default=None,
        metavar="V",
        help="only release folders <sha>-<tag> with tag >= this version",
    )
    p.add_argument(
        "--max-version",
        default=None,
        metavar="V",
        help="only release folders with tag <= this version",
    )
    p.add_argument(
        "--since",
        default=None,
        metavar="TIME",
        help="objects modified at/after this ISO time (UTC if no zone)",
    )
    p.add_argument(
        "--until", default=None, metavar="TIME", help="objects last modified before this ISO time"
    )
    p.add_argument(
        "--objects-per-batch",
        type=int,
        default=DEFAULT_OBJECTS_PER_BATCH,
        metavar="N",
        help="objects per commit batch (progress is reported per batch)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="list the objects (key, etag, size); change nothing"
    )
    p.add_argument(
        "--trigger",
        action="store_true",
        help="request GPU re-runs for versions new to the warehouse",
    )
    p.add_argument(
        "--no-regressions",
        action="store_true",
        help="skip the analysis that follows (it stays owed: the next ingest, backfill or "
        "`kindex-etl regressions` runs it)",
    )
    _allow_empty(p)
    _json_flag(p, "one JSON summary")


def run_backfill(args: argparse.Namespace) -> int:
    from kindex_etl.cli.display import showing
    from kindex_etl.ingestion import idle_summary
    from kindex_etl.ingestion.backfill import backfill_options, backfill_result

    cfg = settings()
    upstream, warehouse = args.upstream or cfg.upstream, args.warehouse or cfg.warehouse
    filters = {
        "prefix": args.prefix,
        "from_commit": args.from_commit,
        "to_commit": args.to_commit,
        "min_version": args.min_version,
        "max_version": args.max_version,
        "since": args.since,
        "until": args.until,
    }
    selection, entries = checks.backfill_filters(checks.store(upstream, what="upstream"), filters)
    if not args.allow_empty:
        checks.upstream_objects(upstream, selection.list_prefix)  # a typo'd prefix, say
    if not args.dry_run:
        checks.store(warehouse, what="warehouse", create=True)
    elif "://" in warehouse:
        # A dry run creates nothing (a local warehouse may not exist yet); a bucket must answer.
        checks.store(warehouse, what="warehouse")
    options = backfill_options(
        selection,
        dry_run=args.dry_run,
        trigger=args.trigger,
        objects_per_batch=args.objects_per_batch,
    )
    idle = idle_summary(upstream, warehouse, options)
    if idle is not None and not _owes_analysis(args, warehouse):
        # A dry run only lists, and an empty selection has nothing to do: no flow run.
        _emit_backfill(args, backfill_result(idle, selection, entries, dry_run=args.dry_run))
        return 0
    _start_prefect(args)
    from flows.backfill import backfill_flow, dask_task_runner

    runner = dask_task_runner()  # KINDEX_DASK_ADDRESS / _WORKERS: the objects are read on Dask
    chosen = backfill_flow if runner is None else backfill_flow.with_options(task_runner=runner)
    with showing(args.quiet, args.verbose):
        state = chosen(
            upstream=upstream,
            warehouse=warehouse,
            dry_run=args.dry_run,
            trigger=args.trigger,
            objects_per_batch=args.objects_per_batch,
            allow_empty=args.allow_empty,
            regressions=not args.no_regressions,
            return_state=True,
            **filters,
        )
        summary = state.result()
    _emit_backfill(args, summary)
    return 0


def _emit_backfill(args: argparse.Namespace, summary: dict[str, Any]) -> None:
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
    _emit(args, summary, human)


BACKFILL = Command(
    "backfill",
    "re-ingest selected upstream objects (manual backfill)",
    _backfill_arguments,
    run_backfill,
)


# -- replay, reprocess, reruns (quarantine, regressions: findings.py) --------------------------


def _replay_arguments(p: argparse.ArgumentParser) -> None:
    _urls(p, upstream=False)
    p.add_argument(
        "--catalog-dir",
        default=None,
        metavar="DIR",
        help="directory with gpus.json/kernels.json to try "
        "(default: $KINDEX_CATALOG_DIR, else the packaged catalog)",
    )
    _json_flag(p, "one JSON summary")


def run_replay(args: argparse.Namespace) -> int:
    from kindex_etl.catalog import load_catalog
    from kindex_etl.ingestion.replay import replay

    cfg = settings()
    warehouse = args.warehouse or cfg.warehouse
    checks.warehouse(warehouse)
    catalog_dir = args.catalog_dir or cfg.catalog_dir
    catalog = load_catalog(catalog_dir) if catalog_dir else None
    summary = replay(warehouse, catalog=catalog).as_dict()
    _emit(args, summary, _human_summary(summary))
    return 0


REPLAY = Command(
    "replay", "replay held-back rows (after a catalog update)", _replay_arguments, run_replay
)


def run_reprocess(args: argparse.Namespace) -> int:
    from kindex_etl.catalog import load_catalog
    from kindex_etl.ingestion.reprocess import reprocess

    cfg = settings()
    warehouse = args.warehouse or cfg.warehouse
    checks.warehouse(warehouse)
    catalog_dir = args.catalog_dir or cfg.catalog_dir
    report = reprocess(warehouse, catalog=load_catalog(catalog_dir) if catalog_dir else None)
    r = report.as_dict()
    human = (
        f"catalog {r['catalog_version']}: {r['runs_before']} runs and {r['held_before']} held "
        f"back before, {r['runs_after']} runs and {r['held_after']} held back after\n"
        f"moved (an id or digest changed): {r['moved']}, released from quarantine: "
        f"{r['released']}, newly held back: {r['newly_held']}\n"
        + (
            f"commit {r['commit']}: {r['files_retired']} file(s) retired, kept for older "
            "snapshots until `kindex-etl vacuum`"
            if r["commit"] is not None
            else "nothing would change: nothing committed"
        )
    )
    _emit(args, r, human)
    return 0


REPROCESS = Command(
    "reprocess",
    "re-derive every run and held-back row with the current catalog, in one commit",
    _replay_arguments,
    run_reprocess,
)


def _reruns_arguments(p: argparse.ArgumentParser) -> None:
    _urls(p, upstream=False)
    p.add_argument(
        "--request",
        metavar="VERSION",
        default=None,
        help="request a re-run of this version by hand (exactly once)",
    )
    p.add_argument(
        "--upstream",
        default=None,
        metavar="URL",
        help="where that re-run uploads (with --request; default: $KINDEX_UPSTREAM)",
    )
    _json_flag(p, '{"reruns": [...]}')


def run_reruns(args: argparse.Namespace) -> int:
    from kindex_etl.load.warehouse import open_warehouse
    from kindex_etl.reruns import list_reruns, request_rerun

    cfg = settings()
    warehouse_url = args.warehouse or cfg.warehouse
    # A mistyped path is an error, never a new folder (a request too: it needs a warehouse
    # whose release it re-measures).
    checks.warehouse(warehouse_url)
    warehouse = open_warehouse(warehouse_url, create=False)
    if args.request:
        _start_prefect(args)
        made = request_rerun(
            warehouse,
            args.request,
            reason="requested by hand",
            upstream=args.upstream or cfg.upstream,
        )
        if made is None:
            _say(args, f"a re-run of {args.request} was already requested")
    records = list_reruns(warehouse.store)
    from kindex_etl.cli import rerun_states

    if rerun_states.needs_prefect(records):
        # "started" says only that flow runs were created: ask Prefect where they are.
        if not args.request:
            _start_prefect(args)
        records = rerun_states.with_live_states(records)
    if args.json:
        print(json.dumps({"reruns": records}, sort_keys=True))
        return 0
    if args.quiet:
        return 0
    for r in records:
        run = f" flow run {r['flowRunId']}" if r.get("flowRunId") else ""
        print(f"{r.get('version')}: {r.get('state')} (requested {r.get('requestedAt')}){run}")
        if r.get("waitingFor"):
            pools = ", ".join(r["waitingFor"])
            print(f"  waiting for a worker of work pool {pools}: none has taken it yet")
        if r.get("error"):
            print(f"  error: {r['error']}")
        if r.get("state") in ("manual", "announced", "requested", "failed-to-start", "failed"):
            print(f"  run it with: {r.get('howToRun')}")
    print(f"{len(records)} re-run request(s)")
    return 0


RERUNS = Command(
    "reruns", "list GPU re-run requests and their state", _reruns_arguments, run_reruns
)


def _rerun_arguments(p: argparse.ArgumentParser) -> None:
    from kindex_etl.gpu.command import add_arguments

    add_arguments(p)


def run_rerun(args: argparse.Namespace) -> int:
    import importlib.util

    from kindex_etl.gpu.command import run_from_args

    # On a GPU host with only torch there is no Prefect: the harness runs alone. Elsewhere the
    # command hands the flow over (kindex_etl never imports flows itself).
    if importlib.util.find_spec("prefect") is None:
        return run_from_args(args)
    from flows.gpu_rerun import gpu_rerun_flow

    return run_from_args(args, run_flow=gpu_rerun_flow)


RERUN = Command(
    "rerun", "run a liger-kernel release's benchmarks on this GPU", _rerun_arguments, run_rerun
)


# -- schema, server, demo ------------------------------------------------------------------


def _schema_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="write one file per kind (or table) into DIR instead of printing",
    )
    p.add_argument(
        "--tables",
        action="store_true",
        help="the Parquet tables (columns, types, meaning) instead of the "
        "JSON Schema of each document kind",
    )
    p.add_argument(
        "--format",
        choices=("json", "markdown"),
        default="json",
        help="with --tables: JSON, or the Markdown of docs/tables.md",
    )


def all_tables() -> dict[str, Any]:
    """Every warehouse table's schema: the contracts' and those of later stages."""
    from kindex_etl.analysis.schema import REGRESSIONS_SCHEMA
    from kindex_etl.contracts.dictionary import TABLE_SCHEMAS
    from kindex_etl.report.triage import TRIAGE_SCHEMA

    return {**TABLE_SCHEMAS, "regressions": REGRESSIONS_SCHEMA, "triage": TRIAGE_SCHEMA}


def run_schema(args: argparse.Namespace) -> int:
    from pathlib import Path

    if args.tables:
        from kindex_etl.contracts.dictionary import markdown, table_schemas

        schemas = all_tables()
        if args.format == "markdown":
            text = markdown(schemas)
            files = {"tables.md": text}
        else:
            tables = table_schemas(schemas)
            text = json.dumps(tables, indent=2) + "\n"
            files = {
                f"{name.replace('/', '_')}.table.json": json.dumps(spec, indent=2) + "\n"
                for name, spec in tables.items()
            }
    else:
        from kindex_etl.contracts.documents import json_schemas

        kinds = json_schemas()
        text = json.dumps(kinds, indent=2) + "\n"
        files = {f"{k}.schema.json": json.dumps(s, indent=2) + "\n" for k, s in kinds.items()}
    if not args.out:
        sys.stdout.write(text)
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (out / name).write_text(content)
    _say(args, f"wrote {len(files)} file(s) to {out}")
    return 0


SCHEMA = Command(
    "schema",
    "the JSON Schema of every document kind, or (--tables) the Parquet tables",
    _schema_arguments,
    run_schema,
)


def _server_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "action",
        choices=("status", "stop"),
        help="status: is the local Prefect server running, where; "
        "stop: stop it now (it also stops itself after $KINDEX_SERVER_IDLE_S idle)",
    )
    _json_flag(p)


def run_server(args: argparse.Namespace) -> int:
    from kindex_etl.cli.server import LocalServer

    cfg = settings()
    server = LocalServer(cfg.state_dir, cfg.server_idle_s)
    if args.action == "stop":
        was = server.state.exists() and server.stop()
        _emit(args, {"stopped": was}, "stopped" if was else "no local server was running")
        return 0
    url = server.running_url() if server.state.exists() else None
    info = server.info() or {}
    data = {
        "running": url is not None,
        "url": url,
        "home": str(server.home),
        "pid": info.get("pid") if url else None,
    }
    _emit(args, data, f"running at {url} (PREFECT_HOME={server.home})" if url else "not running")
    return 0


SERVER = Command(
    "server",
    "the local Prefect server that commands share (status, stop)",
    _server_arguments,
    run_server,
)


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--workdir",
        default="kindex-demo",
        metavar="DIR",
        help="where to lay out upstream/ and warehouse/ (default: ./kindex-demo)",
    )
    p.add_argument(
        "--offline",
        action="store_true",
        help="do not fetch the liger-kernel sdist; use a generated sample (also $KINDEX_OFFLINE=1)",
    )


def run_demo(args: argparse.Namespace) -> int:
    _start_prefect(args)
    from kindex_etl.demo import run_demo as demo

    return demo(args.workdir, offline=args.offline)


DEMO = Command("demo", "lay out an upstream folder, ingest it, query it", _demo_arguments, run_demo)
