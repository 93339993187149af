"""Precision and recall per step size, and the time to analyse 100,000 series.

Series are generated from the upstream sample's real points (`kindex_etl.analysis.calibration.
synthetic`: real medians and p20-p80 spreads, run-to-run noise resampled from the real A/A
pairs the calibration uses: same-release runs of one series in a warehouse of the sample and
our two H200 runs of tests/fixtures/h200_rerun_0.8.5), a fifth of them A/A and a fifth each
with a 5, 10, 20 and 50 % step at a random release. They are written as a warehouse (runs
Parquet per release, the environments table, `_kindex/snapshot.json`), and a separate process
analyses it the way `kindex-etl regressions` does (snapshot, bucketed by series, detect), so
its time and peak RSS are the analysis' own.

    python benchmarks/bench_regressions.py --series 100000 --workdir /tmp/kbr
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.realistic import sample_csv  # noqa: E402
from kindex_etl.analysis.calibration import (  # noqa: E402
    STEPS,
    default_calibration,
    read_points,
    residual_pool,
    synthetic,
    warehouse_pairs,
)
from kindex_etl.storage import open_store  # noqa: E402

SAMPLE = sample_csv()
PAIRS = [
    REPO / "tests/fixtures/h200_rerun_0.8.5/benchmark.csv",
    REPO / "tests/fixtures/h200_rerun_0.8.5/repeat/benchmark.csv",
]
ENV = "sha256:" + "e" * 64


def aa_warehouse(workdir: Path) -> str:
    """The sample and our two H200 runs of 0.8.5, ingested: the calibration's A/A source."""
    from kindex_etl.api import IngestOptions, ingest

    shutil.rmtree(workdir, ignore_errors=True)
    up = workdir / "up"
    for name, src in (("sample", SAMPLE), *((f"h200-{i}", p) for i, p in enumerate(PAIRS))):
        (up / name).mkdir(parents=True)
        shutil.copy(src, up / name / src.name)
        if src != SAMPLE:
            shutil.copy(src.parent / "environment.json", up / name / "environment.json")
    ingest(str(up), str(workdir / "wh"), IngestOptions(trigger=False))
    return str(workdir / "wh")


def generate(workdir: Path, series: int, releases: int, seed: int) -> dict[str, tuple[float, str]]:
    cal = default_calibration()
    points = read_points([SAMPLE])
    pairs = warehouse_pairs(open_store(aa_warehouse(workdir.with_name(workdir.name + "-aa"))))
    pool = residual_pool(pairs[pairs["metric_name"] == "speed"], cal.settings.noise)
    steps = (0.0, *STEPS)
    copies = math.ceil(series / (len(points) * len(steps)))
    syn = synthetic(
        points,
        releases=releases,
        steps=steps,
        model=cal.settings.noise,
        pool=pool,
        rng=np.random.default_rng(seed),
        copies=copies,
        prefix="b",
    )
    t = syn.runs
    keys = t.column("series_key").to_pylist()
    # A workload digest per generated series, spread like real digests (the bucketing key).
    digest = {k: "sha256:" + hashlib.sha256(k.encode()).hexdigest() for k in syn.truth}
    n = t.num_rows
    observed = pa.array(
        np.datetime64("2026-01-01T00:00:00", "ms")
        + t.column("release_rank").to_numpy().astype("timedelta64[D]"),
    ).cast(pa.timestamp("ms", tz="UTC"))
    runs = pa.table(
        {
            "external_id": t.column("external_id"),
            "status": pa.array(["passed"] * n),
            "kernel": t.column("kernel"),
            "operation_mode": t.column("operation_mode"),
            "metric": t.column("metric"),
            "provider": t.column("provider"),
            "workload_digest": pa.array([digest[k] for k in keys]),
            "workload_slug": t.column("series_key"),
            "protocol_digest": pc.binary_join_element_wise(
                "proto", t.column("metric"), t.column("operation_mode"), "/"
            ),
            "environment_digest": pa.array([ENV] * n),
            "gpu_name": pa.array(["NVIDIA H100 80GB HBM3"] * n),
            "liger_version": t.column("liger_version"),
            "observed_at": observed,
            "x_value": pa.array(["0"] * n),
            "value_median": t.column("value_median"),
            "value_p20": t.column("value_p20"),
            "value_p80": t.column("value_p80"),
        }
    )
    shutil.rmtree(workdir, ignore_errors=True)
    tables: dict[str, list[str]] = {"benchmark_runs": [], "execution_environments": []}
    for version in sorted(set(runs.column("liger_version").to_pylist())):
        key = f"benchmark_runs/release={version}/part-bench-00000.parquet"
        (workdir / key).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(
            runs.filter(pc.equal(runs.column("liger_version"), version)),
            workdir / key,
            compression="zstd",
        )
        tables["benchmark_runs"].append(key)
    env_key = "execution_environments/part-bench.parquet"
    (workdir / env_key).parent.mkdir(parents=True)
    pq.write_table(
        pa.table(
            {
                "digest": [ENV],
                "product": ["NVIDIA H100"],
                "form_factor": ["80GB HBM3"],
                "software": ["{}"],
            }
        ),
        workdir / env_key,
    )
    tables["execution_environments"].append(env_key)
    (workdir / "_kindex").mkdir()
    (workdir / "_kindex/snapshot.json").write_text(json.dumps({"seq": 1, "tables": tables}))
    return {digest[k]: (step, release or "") for k, (step, release) in syn.truth.items()}


ANALYSE = """
import json, resource, sys, time
t0 = time.perf_counter()
from dataclasses import replace
from kindex_etl.analysis.calibration import default_calibration
from kindex_etl.analysis.run import detect_changes
from kindex_etl.storage import open_store
# Synthetic series step independently, tens of kernels at each release, on every provider: the
# many-kernels and baseline rules would rightly call those steps environment changes. Both off
# here: this measures the detector.
import kindex_etl.analysis.run as run
run.mark_baseline_steps = lambda rows: None
cal = default_calibration()
cal = replace(cal, settings=replace(cal.settings, environment_kernels=10**9))
t1, c1 = time.perf_counter(), time.process_time()
r = detect_changes(open_store(sys.argv[1]), calibration=cal)
t2, c2 = time.perf_counter(), time.process_time()
rows = [{k: c[k] for k in ("workload_digest", "after_release", "state", "direction")}
        for c in r.changes]
json.dump({"import_s": t1 - t0, "analyse_s": t2 - t1, "analyse_cpu_s": c2 - c1,
           "series": r.series, "runs": r.runs,
           "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "changes": rows}, sys.stdout)
"""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--series", type=int, default=100_000)
    parser.add_argument("--releases", type=int, default=8)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/kindex-bench-regressions"))
    parser.add_argument("--seed", type=int, default=20261201)
    args = parser.parse_args()
    started = time.perf_counter()
    truth = generate(args.workdir, args.series, args.releases, args.seed)
    generated = time.perf_counter() - started
    proc = subprocess.run(
        [sys.executable, "-c", ANALYSE, str(args.workdir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    out = json.loads(proc.stdout)
    alerts = [c for c in out.pop("changes") if c["state"] in ("alert", "improvement")]
    hits = {
        c["workload_digest"]
        for c in alerts
        if truth[c["workload_digest"]][0] > 0
        and c["after_release"] == truth[c["workload_digest"]][1]
        and c["direction"] in ("slower", "larger")
    }
    false_by_series: dict[str, int] = {}
    for c in alerts:
        if c["workload_digest"] not in hits or truth[c["workload_digest"]][0] == 0:
            false_by_series[c["workload_digest"]] = false_by_series.get(c["workload_digest"], 0) + 1
    aa = [d for d, (s, _) in truth.items() if s == 0]
    aa_false = sum(false_by_series.get(d, 0) for d in aa)
    per_step = {}
    for step in STEPS:
        injected = [d for d, (s, _) in truth.items() if s == step]
        tp = sum(d in hits for d in injected)
        fp = sum(false_by_series.get(d, 0) for d in injected) + aa_false
        per_step[f"{step:.2f}"] = {
            "series": len(injected),
            "recall": round(tp / len(injected), 4),
            # Alerts on the A/A fifth plus this step's fifth: the share that is the true one.
            "precision": round(tp / (tp + fp), 4) if tp + fp else None,
        }
    result = {
        "series": out["series"],
        "runs": out["runs"],
        "releases": args.releases,
        "analyse_seconds": round(out["analyse_s"], 2),
        "analyse_cpu_seconds": round(out["analyse_cpu_s"], 2),
        "import_seconds": round(out["import_s"], 2),
        "peak_rss_mib": round(out["peak_rss_mib"], 1),
        "generate_seconds": round(generated, 2),
        "aa_series": len(aa),
        "aa_series_with_false_alarm": sum(1 for d in aa if false_by_series.get(d)),
        "aa_false_alarm_rate": round(sum(1 for d in aa if false_by_series.get(d)) / len(aa), 4),
        "per_step": per_step,
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
