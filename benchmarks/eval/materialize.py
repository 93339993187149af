"""Lay out upstream's published benchmark history as an upstream folder, from its git mirror.

    python benchmarks/eval/materialize.py --repo /path/to/Liger-Kernel.git --out DIR [--since DATE]

Writes what upstream publishes, byte for byte from git:
- `benchmarks/<folder>/benchmark.csv` for every per-commit folder on the `gh-pages` branch
  (`<short-sha>` or `<short-sha>-<tag>`), and `benchmarks/commits.txt`;
- `benchmark/data/all_benchmark_data.csv`, the cumulative file as it is at `main`'s head.

`--since` keeps only per-commit folders whose commit (history catalog) is on or after DATE and
the cumulative file's rows measured on or after it, to bound a run on a small machine.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from kindex_etl.catalog.history import load_history


def git(repo: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", "--git-dir", str(repo), *args], check=True, capture_output=True
    ).stdout


def folders(repo: Path, ref: str) -> list[str]:
    listing = git(repo, "ls-tree", "--name-only", f"{ref}:benchmarks").decode().split()
    found = set()
    for name in listing:
        kind = git(repo, "cat-file", "-t", f"{ref}:benchmarks/{name}").decode().strip()
        if kind == "tree" and name not in {"detailed"}:
            found.add(name)
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, required=True, help="Liger-Kernel git dir (bare ok)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--pages", default="gh-pages", help="branch with benchmarks/<sha>/")
    parser.add_argument("--main", default="main", help="branch whose head has the cumulative file")
    parser.add_argument("--since", help="YYYY-MM-DD: leave out what was measured before")
    args = parser.parse_args(argv)
    repo = args.repo / ".git" if (args.repo / ".git").exists() else args.repo
    since = datetime.fromisoformat(args.since).replace(tzinfo=UTC) if args.since else None
    history = load_history()
    kept: list[str] = []
    for name in folders(repo, args.pages):
        commit = history.commit(name.split("-")[0])
        if since is not None and (commit is None or commit.date < since):
            continue
        data = git(repo, "show", f"{args.pages}:benchmarks/{name}/benchmark.csv")
        path = args.out / "benchmarks" / name / "benchmark.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        kept.append(name)
    listed = git(repo, "show", f"{args.pages}:benchmarks/commits.txt").decode().split()
    order = [n for n in listed if n in kept] + sorted(set(kept) - set(listed))
    (args.out / "benchmarks" / "commits.txt").write_text("".join(f"{n}\n" for n in order))
    cumulative = git(repo, "show", f"{args.main}:benchmark/data/all_benchmark_data.csv")
    rows = None
    if since is not None:
        text = cumulative.decode()
        reader = csv.reader(io.StringIO(text))
        header = next(reader)
        at = header.index("timestamp")
        keep = [r for r in reader if r and r[at] >= since.strftime("%Y-%m-%d")]
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows([header, *keep])
        cumulative, rows = buffer.getvalue().encode(), len(keep)
    target = args.out / "benchmark" / "data" / "all_benchmark_data.csv"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(cumulative)
    head = git(repo, "rev-parse", args.main).decode().strip()
    pages = git(repo, "rev-parse", args.pages).decode().strip()
    summary = {
        "folders": len(kept),
        "main": head,
        "gh_pages": pages,
        "since": args.since,
        "cumulative_rows": rows if rows is not None else cumulative.count(b"\n") - 1,
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
