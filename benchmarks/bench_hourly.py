"""An hourly ingest on a large warehouse, as deployed: the default command with its analysis.

    python benchmarks/bench_hourly.py --warehouse /tmp/kindex-bench/warehouse \
        --csv /tmp/kindex-bench/upstream/benchmark/data/all_benchmark_data.csv \
        [--rows 3000] [--kernel NAME] [--compact] [--repeat 2]

Makes one new upstream object from the last `--rows` rows of `--csv` (the file
`bench_ingest.py --keep` wrote), every timestamp moved to one new hour, so its runs are new
runs of series the warehouse already holds: like a per-commit file of upstream's, it touches
most series (`--kernel`: only that kernel's rows, a narrow one). Each repeat copies the
warehouse (made by `bench_ingest.py --keep`, its analysis chained), runs the daily job on the
copy first with `--compact` (compact, which checkpoints, vacuum, a full analysis), then times
`kindex-etl ingest --json --no-trigger` as a subprocess and prints one JSON line: the wall time, the
ingest's and the chained analysis' seconds, the changes it looked at and whether it wrote the
report (an hourly analysis does not), how many processes it used, and the new changes and
alerts it committed. To compare commits, run it from each checkout's own folder (the
commands are `python -m kindex_etl.cli`, and `-m` puts the working directory before
`PYTHONPATH`); the machine is shared: alternate them.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

HOUR = "2030-01-01 07:00:00"  # later than any run of the realistic data


def hourly_object(source: Path, out: Path, rows: int, kernel: str | None, hour: str = HOUR) -> int:
    """The last `rows` rows of `source` (of `kernel` only, if given), measured at `hour`."""
    with source.open(newline="") as fh:
        reader = csv.DictReader(fh)
        fields = list(reader.fieldnames or [])
        kept: deque[dict[str, str]] = deque(maxlen=rows)
        for row in reader:
            if kernel is None or row["kernel_name"] == kernel:
                kept.append(row)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, quoting=csv.QUOTE_ALL)
        writer.writeheader()
        for row in kept:
            writer.writerow({**row, "timestamp": hour})
    return len(kept)


def kindex(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "kindex_etl.cli", *args]
    env = {**os.environ, "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    return subprocess.run(command, env=env, capture_output=True, text=True, check=True)


def once(warehouse: Path, upstream: Path, compact: bool, tmp: Path) -> dict[str, object]:
    copy = tmp / "warehouse"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(warehouse, copy)
    if compact:
        # The daily job as deployed (`flows.maintenance`): compaction (which checkpoints),
        # vacuum, then a full analysis, which the next hourly one starts from.
        kindex("compact", "--warehouse", str(copy), "--json")
        kindex("vacuum", "--warehouse", str(copy), "--json")
        kindex("regressions", "--warehouse", str(copy), "-q")
    started = time.perf_counter()
    done = kindex("ingest", "--upstream", str(upstream), "--warehouse", str(copy), "--json",
                  "--no-trigger")  # fmt: skip
    wall = time.perf_counter() - started
    summary = json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])
    analysis = summary.get("analysis") or {}
    return {
        "wall_s": round(wall, 2),
        "ingest_s": summary.get("ingest_s"),
        "runs_written": summary.get("runs_written"),
        "analysis_s": analysis.get("elapsed_s"),
        # The changes it looked at: a full analysis's are every series' (and it writes the
        # report), an hourly one's those of the series its ingest touched.
        "analysed_changes": analysis.get("changes"),
        "report_written": analysis.get("report") is not None,
        "analysis_workers": analysis.get("workers"),
        "new_changes": analysis.get("new_changes"),
        "new_alerts": analysis.get("new_alerts"),
        "compacted_first": compact,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--warehouse", required=True, type=Path)
    p.add_argument("--csv", required=True, type=Path, help="the upstream CSV it was made from")
    p.add_argument("--rows", type=int, default=3000)
    p.add_argument("--kernel", help="only this kernel's rows (a narrow hourly object)")
    p.add_argument("--compact", action="store_true", help="run the daily job first")
    p.add_argument("--repeat", type=int, default=1)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kindex-bench-hourly-") as name:
        tmp = Path(name)
        upstream = tmp / "upstream"
        rows = hourly_object(args.csv, upstream / "hourly" / "benchmark.csv", args.rows,
                             args.kernel)  # fmt: skip
        for _ in range(args.repeat):
            result = once(args.warehouse, upstream, args.compact, tmp)
            print(json.dumps({"rows": rows, "kernel": args.kernel, **result}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
