"""An in-process ingest of this checkout alternated with the same ingest of another revision.

    python benchmarks/ab_ingest.py --base 76d915f --upstream /tmp/b/r5/upstream [--repeat 3]

The machine is shared and noisy (runs of the same code move by 15 % or more), so a change is
judged against the code before it in one loop: base, ours, base, ours... Each run is
`benchmarks/ingest_memory.py` of its own tree (the base in a temporary `git worktree`, put
first on `PYTHONPATH`), on the same upstream. Prints one JSON line a run: the tree, seconds,
CPU seconds (system alone), peak RSS, Arrow's pool peak and CPU seconds per pipeline thread.
Environment settings reach both trees alike (`KINDEX_WRITE_AHEAD=1` to compare a knob).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
THREADS = ("MainThread", "kindex-builder", "kindex-writer", "kindex-reader")


def run(tree: Path, upstream: str, warehouse: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, str(tree / "benchmarks" / "ingest_memory.py"),
         "--upstream", upstream, "--warehouse", warehouse],
        cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, check=True, capture_output=True,
        text=True,
    ).stdout  # fmt: skip
    result = json.loads(out.strip().splitlines()[-1])
    threads = result["thread_cpu_seconds"]
    return {
        "seconds": result["seconds"],
        "cpu_seconds": result["cpu_seconds"],
        "system_cpu_seconds": result["system_cpu_seconds"],
        "peak_rss_mib": result["peak_rss_mib"],
        "arrow_pool_peak_mib": result["arrow_pool_peak_mib"],
        "thread_cpu_seconds": {name: threads.get(name) for name in THREADS},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the revision to compare against")
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kindex-ab-") as tmp:
        base = Path(tmp, "base")
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(base), args.base],
            check=True,
        )
        try:
            for _ in range(args.repeat):
                for name, tree in ((args.base, base), ("checkout", REPO)):
                    result = run(tree, args.upstream, str(Path(tmp, "warehouse")))
                    print(json.dumps({"tree": name, **result}), flush=True)
        finally:
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)], check=False
            )


if __name__ == "__main__":
    main()
