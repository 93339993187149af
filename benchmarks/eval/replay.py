"""Upstream's real history replayed as deployed: one per-commit file an hour, daily upkeep.

    python benchmarks/eval/materialize.py --repo LIGER.git --out /tmp/upstream
    python benchmarks/eval/replay.py --upstream /tmp/upstream --workdir /tmp/replay \
        [--day-hours 8] [--cumulative last|first|none]

The deployment runs `kindex-etl ingest` every hour (its analysis chained, incremental: it reads
only the series that hour touched) and, daily, compaction, vacuum and a full analysis. This
does the same on upstream's own history, as cron would (each command a subprocess): the
per-commit folders `benchmarks/<sha>[-<tag>]/` arrive in upstream's commit order (history
catalog positions), one an hour, into an upstream folder the ingest watches; the cumulative
file (contributors' rows among CI's) arrives first, last or never. Every `--day-hours` hours
and at the end, before the day's full analysis, a copy of the warehouse is analysed in full
and its changes compared with what the hourly analyses had left: any change whose current
state differs is something an hourly analysis announced (or missed) that the full analysis
would not have. Then the day's upkeep runs on the warehouse itself, and at the end one
command lists the warehouse's runs against a clean ingest of everything at once.

Prints one line per hour and one JSON object at the end: hours, the per-hour wall and analysis
seconds, every comparison (changes compared, how many differ, and by which transition) and
whether the end matches the clean ingest (same runs; the same changes in the same states,
retracted ones aside, and announced alerts that rule 6 holds where one ingest, which never
announced them, says `pending`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import DeltaTable

from kindex_etl.catalog.history import load_history

# PYTHONSAFEPATH: `-m` would put the working directory first on the path, so run from the
# repository's root the commands would import its kindex_etl whatever PYTHONPATH names.
ENV = {
    **os.environ,
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PYTHONSAFEPATH": "1",
}


def kindex(*args: str) -> dict[str, Any]:
    """One `kindex-etl` command, as cron runs it; its JSON summary."""
    command = [sys.executable, "-m", "kindex_etl.cli", *args, "--json", "-q"]
    done = subprocess.run(command, env=ENV, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def commit_order(upstream: Path) -> list[str]:
    """The per-commit folders in upstream's history order (a tag's folder after its commit's)."""
    history = load_history()
    names = [p.name for p in (upstream / "benchmarks").iterdir() if p.is_dir()]

    def position(name: str) -> tuple[int, str]:
        commit = history.commit(name.split("-")[0])
        return (commit.position if commit is not None else sys.maxsize, name)

    return sorted(names, key=position)


def delta_columns(table: Path, columns: list[str]) -> pa.Table:
    """Columns of a Delta table's current files. deltalake 1.6.6 reads them too, but its
    readers aborted this script at its exit, after the output, 1 time in 4 (SIGABRT:
    docs/reading.md); its log's file list alone never did."""
    files = DeltaTable(str(table)).file_uris()
    if not files:  # a table whose commits so far added no file (an hour with no change)
        return pa.table({c: pa.array([], pa.null()) for c in columns})
    return ds.dataset(files, format="parquet").to_table(columns)


def current_rows(warehouse: Path, columns: list[str]) -> dict[str, dict[str, Any]]:
    """`columns` of each change's current row: the highest warehouse_seq, then written_seq."""
    table = Path(warehouse) / "regressions"
    if not (table / "_delta_log").exists():
        return {}
    wanted = list(dict.fromkeys(["change_id", "warehouse_seq", "written_seq", *columns]))
    latest: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}
    for row in delta_columns(table, wanted).to_pylist():
        written = row["written_seq"]
        rank = (row["warehouse_seq"], -1 if written is None else written)
        if row["change_id"] not in latest or rank > latest[row["change_id"]][0]:
            latest[row["change_id"]] = (rank, row)
    return {change: row for change, (_rank, row) in latest.items()}


def current_states(warehouse: Path) -> dict[str, str]:
    """Each change's current state."""
    return {change: row["state"] for change, row in current_rows(warehouse, ["state"]).items()}


def live(states: dict[str, str]) -> dict[str, str]:
    return {change: state for change, state in states.items() if state != "retracted"}


def compare_with_full(warehouse: Path, scratch: Path) -> dict[str, Any]:
    """What a full analysis of a copy would change in the hourly analyses' states."""
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(warehouse, scratch)
    hourly = current_states(scratch)
    kindex("regressions", "--warehouse", str(scratch))
    full = current_states(scratch)
    moved = Counter(
        f"{hourly.get(c, 'absent')}->{full.get(c, 'absent')}"
        for c in hourly.keys() | full.keys()
        if hourly.get(c) != full.get(c)
    )
    shutil.rmtree(scratch)
    return {
        "changes": len(full),
        "alerts": sum(s == "alert" for s in full.values()),
        "differ": sum(moved.values()),
        "moved": dict(sorted(moved.items())),
    }


def runs_of(warehouse: Path) -> list[str]:
    ids = delta_columns(warehouse / "benchmark_runs", ["external_id"])["external_id"]
    return sorted(ids.to_pylist())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", type=Path, required=True, help="folder from materialize.py")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/kindex-replay"))
    parser.add_argument("--day-hours", type=int, default=8, help="hours between daily upkeeps")
    parser.add_argument("--cumulative", choices=["first", "last", "none"], default="last")
    args = parser.parse_args(argv)
    shutil.rmtree(args.workdir, ignore_errors=True)
    watched, warehouse = args.workdir / "upstream", args.workdir / "warehouse"
    cumulative = Path("benchmark/data/all_benchmark_data.csv")
    arrivals = [Path("benchmarks") / name for name in commit_order(args.upstream)]
    if args.cumulative == "first":
        arrivals.insert(0, cumulative)
    elif args.cumulative == "last":
        arrivals.append(cumulative)

    hours: list[dict[str, Any]] = []
    days: list[dict[str, Any]] = []
    # Every change that was ever committed as `alert` was announced (an event per alert row):
    # each is checked against the end's states.
    announced: dict[str, int] = {}

    def note_announced(hour: int) -> None:
        for change, state in current_states(warehouse).items():
            if state == "alert":
                announced.setdefault(change, hour)

    started = time.perf_counter()
    for hour, arrival in enumerate(arrivals, 1):
        source = args.upstream / arrival
        if source.is_dir():
            shutil.copytree(source, watched / arrival)
        else:
            (watched / arrival).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, watched / arrival)
        at = time.perf_counter()
        summary = kindex(
            "ingest", "--upstream", str(watched), "--warehouse", str(warehouse), "--no-trigger"
        )
        analysis = summary.get("analysis") or {}
        hours.append(
            {
                "hour": hour,
                "object": str(arrival),
                "wall_s": round(time.perf_counter() - at, 2),
                "incremental": analysis.get("incremental"),
                "analysis_s": analysis.get("elapsed_s"),
            }
        )
        note_announced(hour)
        print(json.dumps(hours[-1]), file=sys.stderr, flush=True)
        if hour % args.day_hours == 0 or hour == len(arrivals):
            day = {"after_hour": hour, **compare_with_full(warehouse, args.workdir / "copy")}
            for command in ("compact", "vacuum", "regressions"):
                kindex(command, "--warehouse", str(warehouse))
            note_announced(hour)
            days.append(day)
            print(json.dumps(day), file=sys.stderr, flush=True)

    clean = args.workdir / "clean"
    kindex("ingest", "--upstream", str(watched), "--warehouse", str(clean), "--no-trigger")
    final = current_states(warehouse)
    taken_back = {c: final.get(c, "absent") for c in announced if final.get(c) != "alert"}
    # Rule 6 holds an announced alert while it is found at all: one ingest of everything never
    # announced it, so there it may be `pending`. Every other change must match.
    once = live(current_states(clean))
    held = {c for c in announced if final.get(c) == "alert" and once.get(c) == "pending"}
    result = {
        "hours": len(hours),
        "announced_alerts": len(announced),
        "announced_then_not_alert": len(taken_back),
        "announced_end_states": dict(sorted(Counter(taken_back.values()).items())),
        "wall_s": round(time.perf_counter() - started, 1),
        "hour_wall_s": [h["wall_s"] for h in hours],
        "hour_analysis_s": [h["analysis_s"] for h in hours],
        "incremental_hours": sum(bool(h["incremental"]) for h in hours),
        "days": days,
        "same_runs_as_one_ingest": runs_of(warehouse) == runs_of(clean),
        # Retracted changes aside: the clean ingest never reported what later runs undid.
        "held_alerts_pending_in_one_ingest": len(held),
        "final_changes_as_one_ingest": {c: s for c, s in live(final).items() if c not in held}
        == {c: s for c, s in once.items() if c not in held},
    }
    print(json.dumps(result))
    agreed = (
        all(d["differ"] == 0 for d in days)
        and result["final_changes_as_one_ingest"]
        and not taken_back
    )
    return 0 if agreed and result["same_runs_as_one_ingest"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
