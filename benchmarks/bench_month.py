"""A month as deployed, longer than the test suite's: the schedules together on one warehouse.

    python benchmarks/bench_month.py [--days 30] [--day-hours 24] [--store local|s3]
                                     [--workdir /tmp/kindex-month]

Runs `tests/month.py`'s month (issue 32): an hourly ingest with its chained analysis for every
simulated hour (real upstream data split per release, the fixtures, two stepped series), the
daily maintenance (compaction, then vacuum), a replay after a catalog fix, a reprocess and two
crashes, with the reader's check after every step; then compares the end with one clean ingest.
Flows run on Prefect's real engine (`prefect_test_harness`, started once); S3 is moto's server
on 127.0.0.1. Prints one JSON object: commands run, seconds per simulated day, the warehouse's
live files and log length at the end, and the start-up of a `kindex-etl ingest` with nothing to
do at the end (a subprocess, as cron runs it). The machine is shared: quote the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("KINDEX_LOCAL_SERVER", "0")


def _moto() -> tuple[subprocess.Popen[bytes], str]:
    import socket
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench-secret",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
        AWS_ENDPOINT_URL=endpoint,
    )
    import boto3

    boto3.session.Session().client("s3").create_bucket(Bucket="kindex-month")
    return server, endpoint


def _startup_s(upstream: str, warehouse: str) -> float:
    """A `kindex-etl ingest` with nothing new, timed as a subprocess (what cron starts)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "kindex_etl.cli", "ingest", "-q", "--json",
         "--upstream", upstream, "--warehouse", warehouse],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"the closing ingest failed: {done.stderr}")
    return time.perf_counter() - started


def run(args: argparse.Namespace) -> dict[str, Any]:
    from prefect.testing.utilities import prefect_test_harness

    from flows.ingest import run_ingest_flow
    from flows.maintenance import maintenance_flow
    from kindex_etl import IngestOptions, ingest, load_catalog
    from kindex_etl.cli import main as cli
    from kindex_etl.load.faults import SimulatedCrash, crash_at
    from kindex_etl.storage import open_store
    from tests.month import Month, reader_sees, run_month

    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    os.environ["PREFECT_HOME"] = str(work / "prefect-home")
    moto = None
    if args.store == "s3":
        moto, _ = _moto()
        up, wh = "s3://kindex-month/upstream", "s3://kindex-month/warehouse"
    else:
        up, wh = str(work / "upstream"), str(work / "warehouse")
    month = Month(up, wh, work / "catalog-fix")
    commands = 0

    def command(argv: list[str]) -> dict[str, Any]:
        nonlocal commands
        commands += 1
        with tempfile.TemporaryFile("w+") as out:
            saved = sys.stdout
            sys.stdout = out
            try:
                code = cli([*argv, "--json"])
            finally:
                sys.stdout = saved
            out.seek(0)
            if code != 0:
                raise SystemExit(f"{argv} exited {code}")
            result: dict[str, Any] = json.loads(out.read())
        return result

    def crash(point: str) -> None:
        nonlocal commands
        commands += 1
        try:
            with crash_at(point):
                if point.startswith("compact"):
                    maintenance_flow(warehouse=wh, retention_s=0.0)
                else:
                    run_ingest_flow(upstream=up, warehouse=wh)
        except SimulatedCrash:
            return
        raise SystemExit(f"no crash at {point}")

    try:
        with prefect_test_harness(server_startup_timeout=120):
            started = time.perf_counter()
            run_month(
                month, args.days * args.day_hours, day_hours=args.day_hours, crash=crash,
                command=command, setenv=os.environ.__setitem__,
            )  # fmt: skip
            elapsed = time.perf_counter() - started
        # The flow runs (hourly ingests, maintenance); commands and crashes counted as made.
        commands += sum(s.what.endswith(("ingest", "maintenance")) for s in month.steps)
        clean = str(work / "clean")
        # The catalog the month ended with: the fixed one from hour 5 on, else the packaged one.
        fixed = load_catalog(month.catalog_dir) if month.catalog_dir.is_dir() else None
        ingest(up, clean, IngestOptions(trigger=False, catalog=fixed))
        same = reader_sees(wh).runs == reader_sees(clean).runs
        store = open_store(wh)
        snap = json.loads(store.get_bytes("_kindex/snapshot.json"))
        startup = _startup_s(up, wh)
        runs = len(reader_sees(wh).runs)
    finally:
        if moto is not None:
            moto.terminate()
    steps = month.steps
    return {
        "store": args.store,
        "days": args.days,
        "hours": args.days * args.day_hours,
        "commands": commands,
        "seconds": round(elapsed, 1),
        "seconds_per_day": round(elapsed / args.days, 2),
        "ingest_hour_s": sorted(round(s.seconds, 2) for s in steps if s.what.endswith("ingest")),
        "maintenance_s": [round(s.seconds, 2) for s in steps if s.what.endswith("maintenance")],
        "runs": runs,
        "commits": snap["seq"],
        "live_files_end": sum(len(v) for v in snap["tables"].values()),
        "startup_end_s": round(startup, 2),
        "same_runs_as_one_clean_ingest": same,
        "load_average": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=30, help="simulated days")
    parser.add_argument("--day-hours", type=int, default=24, help="hourly ingests a day")
    parser.add_argument("--store", choices=("local", "s3"), default="local")
    parser.add_argument("--workdir", default="/tmp/kindex-month", help="scratch folder")
    args = parser.parse_args()
    if args.day_hours < 4:
        # The first maintenance is crashed right after its compaction commits, and a day of
        # fewer hourly objects gives the compaction nothing to commit.
        parser.error("--day-hours must be at least 4")
    result = run(args)
    hours = result.pop("ingest_hour_s")
    result["ingest_hour_s_median"] = hours[len(hours) // 2]
    result["ingest_hour_s_max"] = hours[-1]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
