"""A backfill sequential against the same backfill fanned out over 2 Dask workers.

    python benchmarks/bench_backfill.py [--files 8] [--rows-per-file 250000] [--repeat 2]
        [--workers 2] [--workdir /tmp/kindex-bench-backfill] [--keep]

Writes an upstream of `--files` per-commit files (`benchmarks/<sha>/benchmark.csv`, listed
in `benchmarks/commits.txt`) of distinct runs (the sample replicated with shifted timestamps,
as `bench_ingest.py`), then runs `kindex-etl backfill --json --objects-per-batch 1` as a
subprocess into a fresh warehouse, alternating, `--repeat` times each: without Dask
(`sequential`); with `KINDEX_DASK_WORKERS` (`dask_local`: the command starts a local cluster
of that many worker processes on 127.0.0.1, and its workers import Prefect and kindex-etl
before their first task); with `KINDEX_DASK_ADDRESS` (`dask_cluster`: an existing cluster of
as many workers, started here once and warmed, as a long-lived cluster would be).
All use one local Prefect server of their own (`KINDEX_STATE_DIR` under the workdir, started
by a warm-up command and stopped at the end), which the Dask workers reach too. Reported per
run: wall seconds (Prefect and, with Dask, the cluster's start included), `pipeline_seconds`
(the flow's own time from planning to summary), peak RSS of the command's process tree, and
the load average; then the speed-up of the medians. The two warehouses are compared with
`scripts/diff_warehouses.py` after the first round. `--data realistic --sdist-dir DIR`: each
file from `benchmarks/realistic.py` (as varied as the real history) instead of the sample.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_ingest import timed_command, write_upstream  # noqa: E402

VARIANTS = ("sequential", "dask_local", "dask_cluster")


def write_commits(
    upstream: Path, files: int, rows: int, data: str = "sample", sdist_dir: Path | None = None
) -> None:
    entries = [f"{0xB000000 + i:07x}" for i in range(files)]
    for i, entry in enumerate(entries):
        if data == "realistic":
            from benchmarks import realistic

            realistic.write(upstream / "benchmarks" / entry / "benchmark.csv", rows, sdist_dir)
        else:
            write_upstream(upstream / "benchmarks" / entry / "benchmark.csv", rows)
        # Each file its own runs: shift its timestamps past every other file's.
        path = upstream / "benchmarks" / entry / "benchmark.csv"
        shifted = path.with_suffix(".tmp")
        _shift_file(path, shifted, days=400 * (i + 1))
        shifted.replace(path)
    (upstream / "benchmarks" / "commits.txt").write_text("\n".join(entries) + "\n")


def _shift_file(src: Path, dst: Path, days: int) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv

    from kindex_etl.contracts.upstream import UPSTREAM_COLUMNS

    types = {name: pa.string() for name in UPSTREAM_COLUMNS}
    t = pcsv.read_csv(
        src, convert_options=pcsv.ConvertOptions(strings_can_be_null=False, column_types=types)
    )
    ts = pc.strptime(t.column("timestamp"), format="%Y-%m-%d %H:%M:%S", unit="s")
    moved = pc.strftime(pc.add(ts, pa.scalar(days * 86400, pa.duration("s"))), "%Y-%m-%d %H:%M:%S")
    t = t.set_column(t.schema.get_field_index("timestamp"), "timestamp", moved)
    pcsv.write_csv(t, dst, write_options=pcsv.WriteOptions(quoting_style="needed"))


def backfill(upstream: Path, warehouse: Path, env: dict[str, str]) -> dict[str, float]:
    shutil.rmtree(warehouse, ignore_errors=True)
    cmd = [
        sys.executable, "-m", "kindex_etl.cli", "backfill", "--upstream", str(upstream),
        "--warehouse", str(warehouse), "--json", "--objects-per-batch", "1",
    ]  # fmt: skip
    load_before = os.getloadavg()[0]
    elapsed, _, peak, out = timed_command(cmd, env)
    summary = json.loads(out)
    return {
        "seconds": round(elapsed, 2),
        "pipeline_seconds": round(summary["elapsed_s"], 2),
        "peak_rss_tree_mib": round(peak / 2**20, 1),
        "runs_written": summary["runs_written"],
        "commits": len(summary["commits"]),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--rows-per-file", type=int, default=250_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--workdir", default="/tmp/kindex-bench-backfill")
    parser.add_argument("--keep", action="store_true", help="keep the generated upstream")
    parser.add_argument("--data", choices=("sample", "realistic"), default="sample")
    parser.add_argument("--sdist-dir", default=None, help="liger-kernel sdists (realistic data)")
    parser.add_argument(
        "--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS), help="which to run"
    )
    args = parser.parse_args()

    work = Path(args.workdir)
    upstream = work / "upstream"
    if not args.keep or not (upstream / "benchmarks" / "commits.txt").exists():
        shutil.rmtree(upstream, ignore_errors=True)
        t = time.perf_counter()
        sdists = Path(args.sdist_dir) if args.sdist_dir else None
        write_commits(upstream, args.files, args.rows_per_file, args.data, sdists)
        print(f"wrote {args.files} files in {time.perf_counter() - t:.1f} s", file=sys.stderr)

    base = {
        **os.environ,
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "KINDEX_STATE_DIR": str(work / "state"),
        "PYTHONPATH": str(REPO),
    }
    base.pop("PREFECT_API_URL", None)
    base.pop("KINDEX_DASK_ADDRESS", None)
    from distributed import LocalCluster

    os.environ.update({k: base[k] for k in ("DO_NOT_TRACK", "PREFECT_SERVER_ANALYTICS_ENABLED")})
    cluster = LocalCluster(
        n_workers=args.workers, threads_per_worker=1, processes=True, host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
    )  # fmt: skip
    every = {
        "sequential": {**base, "KINDEX_DASK_WORKERS": "0"},
        "dask_local": {**base, "KINDEX_DASK_WORKERS": str(args.workers)},
        "dask_cluster": {**base, "KINDEX_DASK_ADDRESS": cluster.scheduler_address},
    }
    variants = {name: every[name] for name in VARIANTS if name in args.variants}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    try:
        # Warm-up: starts the local Prefect server (every variant then finds it running),
        # and the existing cluster's workers import what their tasks need.
        tiny = work / "warm-upstream"
        write_commits(tiny, 1, 100)
        backfill(tiny, work / "warm-warehouse", every["dask_cluster"])
        for i in range(args.repeat):
            for name, env in variants.items():
                result = backfill(upstream, work / f"warehouse-{name}", env)
                runs[name].append(result)
                print(json.dumps({"variant": name, **result}), flush=True)
            if i == 0 and "sequential" in variants:
                for name in [v for v in variants if v != "sequential"]:
                    subprocess.run(
                        [sys.executable, str(REPO / "scripts" / "diff_warehouses.py"),
                         str(work / "warehouse-sequential"), str(work / f"warehouse-{name}")],
                        check=True,
                    )  # fmt: skip
    finally:
        cluster.close()
        subprocess.run(
            [sys.executable, "-m", "kindex_etl.cli", "server", "stop"], env=base, check=False
        )
    med = {k: statistics.median(r["seconds"] for r in v) for k, v in runs.items()}
    pipe = {k: statistics.median(r["pipeline_seconds"] for r in v) for k, v in runs.items()}
    summary: dict[str, object] = {
        "rows": args.files * args.rows_per_file,
        "data": args.data,
        "files": args.files,
        "workers": args.workers,
        "cpus": os.cpu_count(),
        **{f"{k}_s": round(v, 2) for k, v in med.items()},
    }
    # Speed-ups are against the sequential run, when it ran.
    for name in [v for v in med if v != "sequential" and "sequential" in med]:
        summary[f"speedup_{name}"] = round(med["sequential"] / med[name], 2)
        summary[f"pipeline_speedup_{name}"] = round(pipe["sequential"] / pipe[name], 2)
    print(json.dumps(summary))
    if not args.keep:
        shutil.rmtree(upstream, ignore_errors=True)


if __name__ == "__main__":
    main()
