"""Command start-up: what `kindex-etl ingest` costs end to end with little or nothing to do.

    python benchmarks/bench_startup.py [--objects 2000] [--repeat 3] [--workdir /tmp/kindex-startup]
        [--cases noop_first noop_warm ...]

Lays out an upstream of N one-row objects and ingests it once (untimed), then times
`kindex-etl ingest -q --json` as a subprocess, in two kinds of run:

  * noop_*  nothing new upstream: answered from the plan, without a flow run (README,
            "Start-up"); `noop_first` with no local Prefect server and a fresh state folder,
            `noop_warm` with the server running
  * work_*  one new object (a real flow run, one commit):
      first   the first command of the day: no local Prefect server yet, so it starts one
              (`prefect server start --background`)
      warm    the next commands: the local server is running and reused
      server  with PREFECT_API_URL set to a running server (here: that same local one)
      temp    KINDEX_LOCAL_SERVER=0: Prefect's own temporary server per command (the old way)

Goals (issue 12), for the no-op ingest of 2,000 objects: warm under 3 s, first of the day under
10 s. The machine is shared: report the range and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROW = (
    "megatron_rms_norm,torch,full,speed,ms,H,hidden size,2048,0.1086,0.1076,0.1096,"
    '"{{""S"": 4096, ""B"": 1}}",NVIDIA H100 80GB HBM3,2026-06-10 21:03:{s:02d},0.8.0\n'
)
CASES = ("noop_first", "noop_warm", "work_first", "work_warm", "work_server", "work_temp")
HEADER = (
    "kernel_name,kernel_provider,kernel_operation_mode,metric_name,metric_unit,x_name,x_label,"
    "x_value,y_value_50,y_value_20,y_value_80,extra_benchmark_config_str,gpu_name,timestamp,"
    "liger_version\n"
)


def lay_out(upstream: Path, objects: int) -> None:
    for i in range(objects):
        path = upstream / "benchmarks" / f"{i:07x}-v0.8.0" / "benchmark.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(HEADER + ROW.format(s=i % 60))


def ingest(env: dict[str, str], upstream: Path, warehouse: Path) -> tuple[float, dict]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "kindex_etl.cli", "ingest", "-q", "--json", "--no-trigger",
         "--upstream", str(upstream), "--warehouse", str(warehouse)],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"ingest failed ({done.returncode}): {done.stderr}")
    return seconds, json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--objects", type=int, default=2000, help="one-row upstream objects")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per case")
    ap.add_argument("--workdir", default="/tmp/kindex-startup", help="scratch folder")
    ap.add_argument(
        "--cases", nargs="+", choices=CASES, default=list(CASES), help="which cases to time"
    )
    args = ap.parse_args()

    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    upstream, warehouse, state = work / "up", work / "wh", work / "state"
    lay_out(upstream, args.objects)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "KINDEX_"))}
    base.update(PYTHONPATH=str(REPO), DO_NOT_TRACK="1", KINDEX_STATE_DIR=str(state))
    results: dict[str, list[float]] = {case: [] for case in args.cases}
    added = [args.objects]

    def cli(*argv: str, env: dict[str, str] = base) -> str:
        return subprocess.run(
            [sys.executable, "-m", "kindex_etl.cli", *argv],
            env=env, capture_output=True, text=True, check=False,
        ).stdout  # fmt: skip

    def noop(env: dict[str, str]) -> float:
        seconds, summary = ingest(env, upstream, warehouse)
        assert summary["objects_skipped"] == summary["objects_seen"] == added[0], summary
        return seconds

    def one_new(env: dict[str, str]) -> float:
        path = upstream / "benchmarks" / f"{added[0]:07x}-v0.8.0" / "benchmark.csv"
        path.parent.mkdir(parents=True)
        path.write_text(HEADER + ROW.format(s=added[0] % 60))
        added[0] += 1
        seconds, summary = ingest(env, upstream, warehouse)
        assert summary["objects_ingested"] == 1 and len(summary["commits"]) == 1, summary
        return seconds

    try:
        if set(results) <= {"noop_first", "noop_warm"}:
            # Only answers without Prefect are timed: fill in-process, no server to start.
            fill = "from kindex_etl import IngestOptions, ingest; import sys; " + (
                "ingest(sys.argv[1], sys.argv[2], IngestOptions(trigger=False))"
            )
            subprocess.run(
                [sys.executable, "-c", fill, str(upstream), str(warehouse)], env=base, check=True
            )
        else:
            _, filled = ingest(base, upstream, warehouse)  # untimed: fills, starts the server
            assert filled["objects_ingested"] == args.objects, filled
        cli("server", "stop")
        for i in range(args.repeat if "noop_first" in results else 0):
            results["noop_first"].append(
                noop({**base, "KINDEX_STATE_DIR": str(work / f"fresh-state-{i}")})
            )
        for _ in range(args.repeat if "work_first" in results else 0):
            cli("server", "stop")  # the first command of the day finds no server
            results["work_first"].append(one_new(base))
        warm = {"noop_warm", "work_warm", "work_server"} & set(results)
        if warm - {"noop_warm"}:
            one_new(base)  # untimed: the server running, whichever cases ran before
            url = json.loads(cli("server", "status", "--json"))["url"]
        for _ in range(args.repeat if warm else 0):
            if "noop_warm" in results:
                results["noop_warm"].append(noop(base))
            if "work_warm" in results:
                results["work_warm"].append(one_new(base))
            if "work_server" in results:
                results["work_server"].append(one_new({**base, "PREFECT_API_URL": url}))
        cli("server", "stop")
        temp = {**base, "KINDEX_LOCAL_SERVER": "0", "PREFECT_HOME": str(work / "temp-home")}
        for _ in range(args.repeat if "work_temp" in results else 0):
            results["work_temp"].append(one_new(temp))
    finally:
        cli("server", "stop")
    out: dict[str, object] = {"objects": args.objects, "load": round(os.getloadavg()[0], 2)}
    for case, seconds in results.items():
        if seconds:
            out[f"{case}_s"] = [round(s, 2) for s in seconds]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
