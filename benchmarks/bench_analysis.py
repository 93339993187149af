"""The full analysis of a warehouse, in parts: detection, commit, report (issues 30 and 33).

    python benchmarks/bench_analysis.py --warehouse /tmp/kindex-bench/warehouse

Runs `kindex-etl regressions` in-process on a copy of the warehouse (a local folder; the
original is left as it was), so every run starts from the same state, and prints one JSON
line: runs, series, changes, the seconds of the whole analysis and of its report, and the
process's peak RSS. Make the warehouse with `bench_ingest.py --keep --no-regressions`, whose
ingest time in the same session is the budget ("a full analysis takes at most as long as its
ingest"); the machine is shared, so compare within a session.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--warehouse", required=True, type=Path)
    p.add_argument(
        "--workers", type=int, default=None, help="analysis processes (default: one per CPU)"
    )
    args = p.parse_args(argv)
    from kindex_etl.analysis.run import run_regressions

    with tempfile.TemporaryDirectory(prefix="kindex-bench-analysis-") as tmp:
        copy = Path(tmp) / "warehouse"
        shutil.copytree(args.warehouse, copy)
        found = run_regressions(str(copy), workers=args.workers)
        print(
            json.dumps(
                {
                    "runs": found.runs,
                    "series": found.series,
                    "changes": len(found.changes),
                    "alerts": len(found.alerts),
                    "analysis_seconds": found.elapsed_s,
                    "report_seconds": found.report_s,
                    "workers": found.workers,
                    "peak_rss_mib": round(
                        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
                    ),
                    # The largest worker's (each holds a bucket or a kernel's page at a time).
                    "peak_rss_worker_mib": round(
                        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1
                    ),
                }
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
