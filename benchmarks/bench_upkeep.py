"""The daily upkeep on a large warehouse: `kindex-etl compact`, then `kindex-etl vacuum`.

    python benchmarks/bench_upkeep.py --warehouse /tmp/kindex-bench/warehouse \\
        --csv /tmp/kindex-bench/upstream/benchmark/data/all_benchmark_data.csv \\
        [--hours 24] [--rows 3000] [--repeat 1] [--workdir /tmp/kindex-upkeep]

Copies `--warehouse` (made by `bench_ingest.py --keep`) and ingests a day into the copy:
`--hours` hourly objects, each the last `--rows` rows of `--csv` at a new hour, each its own
`kindex-etl ingest --no-regressions` (the upkeep is measured here, not the analysis). Then, on
a fresh copy of that day's warehouse per repeat, times `kindex-etl compact --json` and
`kindex-etl vacuum --retention-s 0 --json` (retention 0: the compacted files are deleted now,
as a week later) as subprocesses: wall seconds, peak RSS of the command and of its process
tree, and what each says it did. One JSON line per repeat. To compare commits, run it from
each checkout's own folder (the commands are `python -m kindex_etl.cli`, and `-m` puts the
working directory before `PYTHONPATH`); the day's warehouse is kept in `--workdir` and reused
when its hours match. The machine is shared: alternate them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_hourly import hourly_object, kindex
from benchmarks.bench_ingest import timed_command

ENV = {**os.environ, "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}


def day(warehouse: Path, source: Path, workdir: Path, hours: int, rows: int) -> Path:
    """The warehouse after a day of hourly ingests (made once per `hours`, then reused)."""
    done = workdir / f"day-{hours}x{rows}"
    if (done / "_kindex").is_dir():
        return done
    shutil.rmtree(done, ignore_errors=True)
    shutil.copytree(warehouse, done)
    upstream = workdir / "upstream"
    for h in range(hours):
        obj = upstream / "benchmarks" / f"{h:04d}" / "benchmark.csv"
        hourly_object(source, obj, rows, None, hour=f"2030-01-02 {h % 24:02d}:00:00")
        kindex("ingest", "--upstream", str(upstream), "--warehouse", str(done), "--no-trigger",
               "--no-regressions", "-q")  # fmt: skip
    return done


def measure(day_warehouse: Path, workdir: Path) -> dict[str, object]:
    copy = workdir / "copy"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(day_warehouse, copy)
    out: dict[str, object] = {}
    for name, args in (("compact", []), ("vacuum", ["--retention-s", "0"])):
        cmd = [sys.executable, "-m", "kindex_etl.cli", name, "--warehouse", str(copy), "--json"]
        seconds, peak, tree, stdout = timed_command(cmd + args, ENV)
        out[name] = {
            "seconds": round(seconds, 2),
            "peak_rss_mib": round(peak / 2**20),
            "peak_rss_tree_mib": round(tree / 2**20),
            "result": json.loads(stdout.strip().splitlines()[-1]),
        }
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--warehouse", required=True, type=Path)
    p.add_argument("--csv", required=True, type=Path)
    p.add_argument("--hours", type=int, default=24)
    p.add_argument("--rows", type=int, default=3000)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--workdir", type=Path, default=Path("/tmp/kindex-upkeep"))
    a = p.parse_args()
    a.workdir.mkdir(parents=True, exist_ok=True)
    day_warehouse = day(a.warehouse, a.csv, a.workdir, a.hours, a.rows)
    for _ in range(a.repeat):
        print(json.dumps(measure(day_warehouse, a.workdir)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
