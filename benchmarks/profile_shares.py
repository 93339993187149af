"""Where a profiled command spent its time: shares of a py-spy raw profile.

    py-spy record --subprocesses --rate 50 --format raw -o /tmp/an.raw -- \
        python -m kindex_etl.cli regressions --warehouse /tmp/kb39/warehouse -q
    python benchmarks/profile_shares.py /tmp/an.raw [--top 40]

Counts active samples (threads waiting on a lock, a queue or a socket left out) over every
process, and prints the share of samples under each kindex-etl frame (inclusive) and in each
innermost frame (self). Without py-spy's `--native`, time in C (Arrow, compression) is
charged to the Python line that called it.
"""

from __future__ import annotations

import argparse
from collections import Counter

IDLE = ("(idle)", "wait (threading", "select (", "_recv")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("profile")
    p.add_argument("--top", type=int, default=40)
    args = p.parse_args(argv)
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    with open(args.profile) as fh:
        for line in fh:
            stack, _, count = line.rstrip().rpartition(" ")
            if not stack:
                continue
            frames, n = stack.split(";"), int(count)
            if any(mark in f for f in frames[-2:] for mark in IDLE):
                continue
            total += n
            own[frames[-1]] += n
            for frame in {f for f in frames if "kindex_etl" in f or "flows/" in f}:
                inclusive[frame] += n
    print(f"{total} active samples")
    for title, counts in (("inclusive (kindex-etl frames)", inclusive), ("self", own)):
        print(f"--- {title}")
        for frame, n in counts.most_common(args.top):
            print(f"{n / max(total, 1):6.1%}  {frame[:120]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
