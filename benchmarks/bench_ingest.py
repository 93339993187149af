"""Ingest speed and memory against DuckDB's plain CSV-to-Parquet copy of the same file.

    python benchmarks/bench_ingest.py --rows 5000000 [--workdir /tmp/kindex-bench] [--repeat 1]
    python benchmarks/bench_ingest.py --rows 5000000 --data realistic --sdist-dir /tmp/sd

Writes an upstream CSV of the requested size, then times, in the same run and on the same
file. `--data sample` (the default): the real upstream sample, or a generated one, replicated
with shifted timestamps so every row is a distinct run (2,448 distinct descriptors, easy on
the per-descriptor caches). `--data realistic`: `benchmarks/realistic.py`, as varied as the
real per-commit history (~9,500 combinations, ~12,000 timestamps and 62 shapes per 80,000
rows, one row in six held back), from the data files of the sdists in `--sdist-dir`
(`pip download --no-deps --no-binary :all: -d DIR liger-kernel==0.8.5`). Timed:
  * DuckDB: COPY (SELECT * FROM read_csv(...)) TO ... (FORMAT parquet, COMPRESSION zstd),
    three times around ours (two before, one after)
  * the default command, `kindex-etl ingest --json --no-trigger`, end to end, as a subprocess
    (Prefect start-up, Parquet and the zstd JSON documents, and the analysis it chains after
    the ingest, included): `seconds` and `chained_ratio`; the analysis' own seconds
    (`analysis_seconds`, from the command's summary) and the ingest's part without it
    (`ratio`); peak RSS of the command's process and of its whole process tree (the analysis'
    worker processes included; the shared local Prefect server is not a child: not counted)
  * with `--no-regressions`, the ingest alone (`--no-regressions` passed on): `seconds`,
    `ratio` (issue 31's figure)
The machine is shared and noisy: compare the ratio, not the seconds. The reference is the
median of DuckDB's copies run just before and after ours (`--duckdb-before 2 --duckdb-after
1`; `duckdb_runs` lists them): one copy of a 5M-row file took 4.5 s to 8.4 s in one session.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO.parent / "shared" / "upstream-sample" / "all_benchmark_data.csv"


def base_table() -> pa.Table:
    if SAMPLE.is_file():
        from kindex_etl.contracts.upstream import UPSTREAM_COLUMNS

        # Every column as text, exactly as upstream wrote it.
        types = {name: pa.string() for name in UPSTREAM_COLUMNS}
        return pcsv.read_csv(
            SAMPLE,
            convert_options=pcsv.ConvertOptions(strings_can_be_null=False, column_types=types),
        )
    from kindex_etl.demo import sample_rows

    return pa.Table.from_pylist(sample_rows())


def write_upstream(path: Path, rows: int) -> None:
    base = base_table()
    ts = pc.strptime(base.column("timestamp"), format="%Y-%m-%d %H:%M:%S", unit="s")
    path.parent.mkdir(parents=True, exist_ok=True)
    with pcsv.CSVWriter(
        path, base.schema, write_options=pcsv.WriteOptions(quoting_style="needed")
    ) as writer:
        written, shift = 0, 0
        while written < rows:
            take = min(base.num_rows, rows - written)
            shifted = pc.strftime(
                pc.add(ts, pa.scalar(shift * 7, pa.duration("s"))), format="%Y-%m-%d %H:%M:%S"
            )
            t = base.set_column(base.schema.get_field_index("timestamp"), "timestamp", shifted)
            writer.write_table(t.slice(0, take))
            written += take
            shift += 1


def duckdb_copy(csv: Path, out: Path) -> float:
    import duckdb

    out.unlink(missing_ok=True)
    start = time.perf_counter()
    duckdb.sql(
        f"COPY (SELECT * FROM read_csv('{csv}')) TO '{out}' (FORMAT parquet, COMPRESSION zstd)"
    )
    return time.perf_counter() - start


def _tree_rss(root: int) -> tuple[int, int]:
    """(RSS of root, RSS of root and all its descendants), bytes, from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            ppid, pages = int(fields[1]), int(fields[21])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
        rss[int(entry)] = pages * os.sysconf("SC_PAGE_SIZE")
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return rss.get(root, 0), total


def _high_water(pid: int) -> int:
    """The process's peak RSS so far (VmHWM), bytes: kept by the kernel, so a spike between
    two samples still counts (sampled RSS missed ~130 MiB of a 20M ingest's peak)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def timed_command(cmd: list[str], env: dict[str, str]) -> tuple[float, int, int, str]:
    """(seconds, peak RSS of the process, of its process tree, stdout) of one command.

    The process's peak is its VmHWM; the tree's is sampled (its children's RSS every 50 ms,
    added to the process's own high-water mark at that moment or after), so it is at least
    the process's peak."""
    peak_self = peak_tree = 0
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    done = threading.Event()

    def sample() -> None:
        nonlocal peak_self, peak_tree
        while not done.is_set():
            own, tree = _tree_rss(proc.pid)
            high = max(_high_water(proc.pid), own)
            peak_self, peak_tree = max(peak_self, high), max(peak_tree, tree - own + high)
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    elapsed = time.perf_counter() - start
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[3]} failed ({proc.returncode}):\n{err[-4000:]}")
    return elapsed, peak_self, peak_tree, out


def kindex_ingest(
    csv_dir: Path, warehouse: Path, env: dict[str, str], *, regressions: bool = True
) -> dict[str, float]:
    """The ingest command end to end: as deployed (its analysis chained), or without it."""
    shutil.rmtree(warehouse, ignore_errors=True)
    cli = [sys.executable, "-m", "kindex_etl.cli"]
    elapsed, peak_self, peak_tree, out = timed_command(
        [*cli, "ingest", "--upstream", str(csv_dir), "--warehouse", str(warehouse),
         "--json", "--no-trigger", *([] if regressions else ["--no-regressions"])],
        env,
    )  # fmt: skip
    summary = json.loads(out)
    result = {
        "seconds": elapsed,
        "peak_rss_ingest_mib": peak_self / 2**20,
        "peak_rss_tree_mib": peak_tree / 2**20,
        "runs_written": summary["runs_written"],
        "quarantined_rows": summary["quarantined_rows"],
        "pipeline_seconds": summary["elapsed_s"],
    }
    if regressions:
        analysis = summary.get("analysis") or {}
        result.update(
            analysis_seconds=float(analysis.get("elapsed_s") or 0.0),
            analysis_report_seconds=float(analysis.get("report_s") or 0.0),
            changes=analysis.get("changes", 0),
            alerts=analysis.get("alerts", 0),
            analysis_workers=analysis.get("workers", 1),
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--workdir", default="/tmp/kindex-bench")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the generated CSV")
    parser.add_argument("--data", choices=("sample", "realistic"), default="sample")
    parser.add_argument("--sdist-dir", default=None, help="liger-kernel sdists (realistic data)")
    parser.add_argument(
        "--no-regressions", action="store_true", help="time the ingest alone (no regressions run)"
    )
    parser.add_argument("--duckdb-before", type=int, default=2, help="DuckDB copies before ours")
    parser.add_argument("--duckdb-after", type=int, default=1, help="DuckDB copies after ours")
    args = parser.parse_args()

    work = Path(args.workdir)
    upstream = work / "upstream"
    csv = upstream / "benchmark" / "data" / "all_benchmark_data.csv"
    if not csv.exists() or csv.stat().st_size == 0 or not args.keep:
        shutil.rmtree(upstream, ignore_errors=True)
        t = time.perf_counter()
        if args.data == "realistic":
            sys.path.insert(0, str(REPO))
            from benchmarks import realistic

            realistic.write(csv, args.rows, Path(args.sdist_dir) if args.sdist_dir else None)
        else:
            write_upstream(csv, args.rows)
        print(
            f"wrote {csv} ({csv.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t:.1f} s",
            file=sys.stderr,
        )

    env = {
        **os.environ,
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_HOME": str(work / "prefect-home"),
        "PYTHONPATH": str(REPO),
    }
    # A tiny ingest that commits first: it migrates a new Prefect home's database and starts
    # the shared local Prefect server (or finds it running), so the timed ingest is any
    # command but the day's first. An empty upstream would not do: a command with nothing to
    # do never starts Prefect, and the first timed run then paid the server's start (~5 s).
    # The day's first command is `bench_startup.py`'s figure.
    tiny = work / "warm-upstream" / "benchmark" / "data" / "all_benchmark_data.csv"
    tiny.parent.mkdir(parents=True, exist_ok=True)
    with csv.open("rb") as source:
        tiny.write_bytes(b"".join(source.readline() for _ in range(50)))
    kindex_ingest(work / "warm-upstream", work / "warm-warehouse", env)

    results = []
    for _ in range(args.repeat):
        # DuckDB's copy takes seconds where ours takes tens of them, and one copy's time moves
        # by a third on this shared machine: its median over copies run before and after ours
        # (the machine's speed drifts) is the reference.
        ducks = [duckdb_copy(csv, work / "duckdb.parquet") for _ in range(args.duckdb_before)]
        ours = kindex_ingest(upstream, work / "warehouse", env, regressions=not args.no_regressions)
        ducks += [duckdb_copy(csv, work / "duckdb.parquet") for _ in range(args.duckdb_after)]
        duck = statistics.median(ducks)
        results.append(
            {
                "rows": args.rows,
                "data": args.data,
                "duckdb_seconds": round(duck, 2),
                "duckdb_runs": [round(d, 2) for d in ducks],
                **{k: round(v, 2) for k, v in ours.items()},
                # The ingest's part (issue 31's figure): without the analysis it chains.
                "ratio": round((ours["seconds"] - ours.get("analysis_seconds", 0.0)) / duck, 2),
            }
        )
        if "analysis_seconds" in ours:
            # Issue 30's figure: the default command, its analysis chained after the ingest.
            results[-1]["chained_ratio"] = round(ours["seconds"] / duck, 2)
        print(json.dumps(results[-1]))
    if not args.keep:
        shutil.rmtree(work / "warehouse", ignore_errors=True)


if __name__ == "__main__":
    main()
