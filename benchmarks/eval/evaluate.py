"""Precision and recall of the regressions detector on upstream's real history.

    python benchmarks/eval/materialize.py --repo LIGER.git --out /tmp/upstream
    python benchmarks/eval/evaluate.py --upstream /tmp/upstream --warehouse /tmp/wh [--json OUT]

It ingests the folder into a fresh warehouse with the project's own `kindex-etl ingest` (whose
flow chains the analysis; `kindex-etl regressions` runs after it if the warehouse still has no
regressions table), then reads the `regressions` and `benchmark_runs` tables as any consumer
would and scores them against `events.json`:

- **precision** (per metric): the share of alerts (state `alert`) whose cause is a labelled
  Liger code change: an event of kind `code` on the same kernel, metric and direction (and
  pass, where the event names them), on liger's own provider, whose commit lies inside the
  alert's commit range (before, after].
- **recall** (per metric): of the labelled code changes that upstream's per-commit results can
  show at all (runs of the kernel and metric on one GPU on both sides of the commit), the share
  that some reported change (`alert` or `improvement`) finds in the right range and direction.

The commit range of an alert, by what the table offers:
- `commit`: `before_position`/`after_position` (or the commits `before_commit`/`after_commit`,
  placed with the history catalog): what a commit-ordered detector reports;
- `measured`: from the first commit measured by the alert's "before" point to the last one
  measured by its "after" point (its boundary runs' objects `benchmarks/<sha>[-<tag>]/`, a
  cumulative-file run standing for its release's whole span of commits): the commits a
  release-pooled detector really compared;
- `release`: from `before_release`'s tag to `after_release`'s tag: what a reader of a
  release-level alert takes it to mean.

Alerts that are not a labelled code change are put in the first class that explains them:
`contributed` (a boundary run from the cumulative file, i.e. a contributor's machine, or the
row's `origin` says so), `harness` (a harness revision of the kernel in the range, from
`kindex_etl/catalog/harness.json`, or a labelled harness event), `environment` (a baseline
provider, a labelled environment event, or three or more kernels stepping the same way over
the same range), else `unexplained`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kindex_etl.catalog import load_catalog
from kindex_etl.catalog.history import Harness, History, load_harness, load_history
from kindex_etl.load.warehouse import open_warehouse

HERE = Path(__file__).resolve().parent
PER_COMMIT = re.compile(r"(?:^|/)benchmarks/([0-9a-f]{7,40})(?:-[^/]*)?/[^/]*$")
DIRECTIONS = {"slower", "faster", "larger", "smaller"}
REPORTED = {"alert", "improvement"}
MULTI_KERNEL = 3
VARIANTS = ("commit", "measured", "release")


@dataclass(frozen=True)
class Event:
    id: str
    kind: str
    pr: int | None
    commit: str
    position: int | None
    kernels: tuple[str, ...]
    metric: str
    direction: str
    modes: tuple[str, ...] | None
    measured: tuple[int, int] | None
    evidence: str

    def covers(self, kernel: str, metric: str, mode: str) -> bool:
        return (
            ("*" in self.kernels or kernel in self.kernels)
            and metric == self.metric
            and (self.modes is None or mode in self.modes)
        )


def load_events(path: Path, history: History) -> list[Event]:
    out = []
    for e in json.loads(path.read_text())["events"]:
        measured = None
        if e.get("measured"):
            a, b = (history.position(s.split("-")[0]) for s in e["measured"])
            if a is not None and b is not None:
                measured = (a, b)
        out.append(
            Event(
                id=e["id"],
                kind=e["kind"],
                pr=e.get("pr"),
                commit=e["commit"],
                position=history.position(e["commit"]),
                kernels=tuple(e["kernels"]),
                metric=e["metric"],
                direction=e["direction"],
                modes=tuple(e["modes"]) if e.get("modes") else None,
                measured=measured,
                evidence=e["evidence"],
            )
        )
    return out


# ---------------------------------------------------------------- running the project


def run_project(upstream: Path, warehouse: Path) -> dict[str, Any]:
    """`kindex-etl ingest`, then `kindex-etl regressions` if the ingest did not chain it."""
    env = {
        **os.environ,
        "DO_NOT_TRACK": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    }
    env.setdefault("PREFECT_HOME", str(warehouse.parent / f"{warehouse.name}-prefect"))
    env.setdefault("KINDEX_STATE_DIR", str(warehouse.parent / f"{warehouse.name}-state"))
    cli = [sys.executable, "-m", "kindex_etl.cli"]
    # `-m` puts the working directory first on the path: run from the warehouse's parent so
    # the kindex_etl under test is the one PYTHONPATH (or the installed package) names.
    cwd = warehouse.parent
    timings: dict[str, Any] = {}
    start = time.monotonic()
    done = subprocess.run(
        [
            *cli,
            "ingest",
            "--upstream",
            str(upstream),
            "--warehouse",
            str(warehouse),
            "--no-trigger",
            "--json",
        ],
        env=env,
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    )
    timings["ingest_s"] = round(time.monotonic() - start, 1)
    timings["ingest"] = json.loads(done.stdout.strip().splitlines()[-1])
    if "regressions" not in open_warehouse(str(warehouse), create=False).state.tables:
        start = time.monotonic()
        subprocess.run(
            [*cli, "regressions", "--warehouse", str(warehouse), "--json"],
            env=env,
            cwd=cwd,
            check=True,
            capture_output=True,
            text=True,
        )
        timings["regressions_s"] = round(time.monotonic() - start, 1)
    return timings


# ---------------------------------------------------------------- reading the warehouse


@dataclass
class Runs:
    """Per run: the commit it measured (None for the cumulative file) and its release."""

    position: dict[str, int | None] = field(default_factory=dict)
    version: dict[str, str] = field(default_factory=dict)
    ci: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)


def read_tables(url: str, history: History) -> tuple[list[dict[str, Any]], Runs]:
    warehouse = open_warehouse(url, create=False)
    warehouse.refresh()
    table = warehouse.read_table("regressions")
    rows = [] if table is None else table.to_pylist()

    # The current state of a change is its row with the highest warehouse_seq, then
    # written_seq (docs/tables.md).
    def rank(row: dict[str, Any]) -> tuple[int, int]:
        written = row.get("written_seq")
        return row["warehouse_seq"], -1 if written is None else written

    latest: dict[str, dict[str, Any]] = {}
    for row in rows:
        held = latest.get(row["change_id"])
        if held is None or rank(row) >= rank(held):
            latest[row["change_id"]] = row
    columns = [
        "external_id",
        "source_key",
        "liger_version",
        "kernel",
        "metric",
        "gpu_name",
        "observed_at",
    ]
    runs_table = warehouse.read_table("benchmark_runs", columns)
    runs = Runs()
    ci: dict[tuple[str, str, str], set[int]] = defaultdict(set)
    for run in [] if runs_table is None else runs_table.to_pylist():
        found = PER_COMMIT.search(run["source_key"] or "")
        commit = history.commit(found.group(1)) if found else None
        # A run older than the commit its folder names cannot have measured it: upstream's
        # first automated folder (53a37a5) holds a copy of the cumulative file's rows.
        observed = run["observed_at"]
        if commit is not None and observed is not None and observed < commit.date:
            commit = None
        position = None if commit is None else commit.position
        runs.position[run["external_id"]] = position
        runs.version[run["external_id"]] = run["liger_version"]
        if position is not None:
            ci[(run["kernel"], run["metric"], run["gpu_name"])].add(position)
    runs.ci = {k: sorted(v) for k, v in ci.items()}
    return list(latest.values()), runs


# ---------------------------------------------------------------- ranges


def _position(row: dict[str, Any], history: History, side: str) -> int | None:
    for name in (f"{side}_position", f"{side}_commit_position", f"commit_{side}_position"):
        if isinstance(row.get(name), int):
            return int(row[name])
    for name in (f"{side}_commit", f"commit_{side}"):
        if row.get(name):
            return history.position(str(row[name]))
    return None


def ranges(row: dict[str, Any], runs: Runs, history: History) -> dict[str, tuple[int, int] | None]:
    out: dict[str, tuple[int, int] | None] = dict.fromkeys(VARIANTS)
    lo, hi = _position(row, history, "before"), _position(row, history, "after")
    if lo is not None and hi is not None:
        out["commit"] = (lo, hi)

    def spans(ids: Iterable[str] | None) -> list[tuple[int, int]]:
        found = []
        for run in ids or ():
            p = runs.position.get(run)
            if p is not None:
                found.append((p, p))
            elif run in runs.version and (span := history.version_span(runs.version[run])):
                found.append(span)
        return found

    before, after = spans(row.get("before_run_ids")), spans(row.get("after_run_ids"))
    if before and after:
        out["measured"] = (min(s for s, _ in before), max(e for _, e in after))
    a = history.release(str(row.get("before_release") or ""))
    b = history.release(str(row.get("after_release") or ""))
    if a and b and a.position is not None and b.position is not None:
        out["release"] = (a.position, b.position)
    return out


def inside(position: int | None, span: tuple[int, int] | None) -> bool:
    return position is not None and span is not None and span[0] < position <= span[1]


def contributed(row: dict[str, Any], runs: Runs) -> bool:
    """The row says so, or one of its boundary runs measured no known commit (the cumulative
    file, or a per-commit folder's run older than its commit)."""
    if str(row.get("origin") or "") == "contributed":
        return True
    ids = [*(row.get("before_run_ids") or ()), *(row.get("after_run_ids") or ())]
    return any(runs.position.get(r) is None for r in ids)


# ---------------------------------------------------------------- scoring


class Scorer:
    def __init__(self, events: list[Event], history: History, harness: Harness) -> None:
        self.events = events
        self.history = history
        self.harness = harness
        self.catalog = load_catalog()

    def liger(self, kernel: str, provider: str) -> bool:
        info = self.catalog.kernel(kernel)
        own = info.liger_provider if info is not None else "liger"
        return provider == own or provider.startswith("liger")

    def cause(self, row: dict[str, Any], span: tuple[int, int] | None) -> Event | None:
        if not self.liger(row["kernel"], row["provider"]):
            return None
        for e in self.events:
            if (
                e.kind == "code"
                and e.covers(row["kernel"], row["metric"], row["operation_mode"])
                and e.direction == row["direction"]
                and inside(e.position, span)
            ):
                return e
        return None

    def explain(
        self,
        row: dict[str, Any],
        span: tuple[int, int] | None,
        runs: Runs,
        shifts: Counter[tuple[Any, ...]],
    ) -> str:
        if contributed(row, runs):
            return "contributed"
        kernel, metric, mode = row["kernel"], row["metric"], row["operation_mode"]
        if span is not None and (
            self.harness.between(kernel, span[0], span[1], provider=row["provider"])
            or any(
                e.kind == "harness" and e.covers(kernel, metric, mode) and inside(e.position, span)
                for e in self.events
            )
        ):
            return "harness"
        if not self.liger(kernel, row["provider"]):
            return "environment"
        for e in self.events:
            if e.kind == "environment" and ("*" in e.kernels or kernel in e.kernels):
                # The shift happened between the runs of commits lo and hi: (lo, hi]. Two runs
                # of one commit (lo == hi) shift the point at that commit itself.
                lo, hi = e.measured or (e.position, e.position)
                if lo is None or hi is None or span is None:
                    continue
                hit = span[0] <= hi <= span[1] if lo == hi else lo < span[1] and span[0] < hi
                if hit:
                    return "environment"
        if shifts[(span, row["direction"], row["gpu_name"])] >= MULTI_KERNEL:
            return "environment"
        return "unexplained"

    def observable(self, event: Event, runs: Runs) -> bool:
        if event.position is None:
            return False
        for (kernel, metric, _gpu), positions in runs.ci.items():
            if (
                kernel in event.kernels
                and metric == event.metric
                and positions[0] < event.position <= positions[-1]
            ):
                return True
        return False

    def score(self, rows: list[dict[str, Any]], runs: Runs) -> dict[str, Any]:
        spans = [ranges(r, runs, self.history) for r in rows]
        report: dict[str, Any] = {"variants": {}}
        for variant in VARIANTS:
            if not any(s[variant] for s in spans):
                continue
            kernels_at: dict[tuple[Any, ...], set[str]] = defaultdict(set)
            for row, s in zip(rows, spans, strict=True):
                if row["state"] in REPORTED:
                    kernels_at[(s[variant], row["direction"], row["gpu_name"])].add(row["kernel"])
            shifts = Counter({k: len(v) for k, v in kernels_at.items()})
            per_metric: dict[str, Any] = {}
            for metric in ("speed", "memory"):
                alerts = [
                    (r, s[variant])
                    for r, s in zip(rows, spans, strict=True)
                    if r["state"] == "alert" and r["metric"] == metric
                ]
                classes: Counter[str] = Counter()
                caught: Counter[str] = Counter()
                for row, span in alerts:
                    event = self.cause(row, span)
                    if event is not None:
                        classes["code"] += 1
                        caught[event.id] += 1
                    else:
                        classes[self.explain(row, span, runs, shifts)] += 1
                labelled = [e for e in self.events if e.kind == "code" and e.metric == metric]
                seen = [e for e in labelled if self.observable(e, runs)]
                found = {}
                for e in seen:
                    hits = [
                        r
                        for r, s in zip(rows, spans, strict=True)
                        if r["state"] in REPORTED
                        and r["metric"] == metric
                        and r["direction"] == e.direction
                        and self.liger(r["kernel"], r["provider"])
                        and e.covers(r["kernel"], r["metric"], r["operation_mode"])
                    ]
                    right = [
                        r
                        for r, s in zip(rows, spans, strict=True)
                        if r in hits and inside(e.position, s[variant])
                    ]
                    found[e.id] = {"right_range": len(right), "same_direction_anywhere": len(hits)}
                recalled = sum(1 for v in found.values() if v["right_range"])
                per_metric[metric] = {
                    "alerts": len(alerts),
                    "precision": round(classes["code"] / len(alerts), 3) if alerts else None,
                    "classes": dict(classes.most_common()),
                    "labelled_code_events": len(labelled),
                    "observable_code_events": len(seen),
                    "recalled": recalled,
                    "recall": round(recalled / len(seen), 3) if seen else None,
                    "per_event": found,
                    "unobservable": [e.id for e in labelled if e not in seen],
                }
            report["variants"][variant] = per_metric
        states = Counter((r["state"], r["metric"]) for r in rows)
        report["states"] = {f"{s}/{m}": n for (s, m), n in sorted(states.items())}
        report["columns"] = sorted(rows[0]) if rows else []
        return report


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "| range | metric | alerts | precision | recall (found / observable) | alerts by class |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for variant, metrics in report["variants"].items():
        for metric, m in metrics.items():
            precision = "n/a" if m["precision"] is None else f"{m['precision']:.0%}"
            recall = "n/a" if m["recall"] is None else f"{m['recall']:.0%}"
            classes = ", ".join(f"{k} {v}" for k, v in m["classes"].items())
            lines.append(
                f"| {variant} | {metric} | {m['alerts']} | {precision} | {recall} "
                f"({m['recalled']} / {m['observable_code_events']}) | {classes} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", type=Path, help="folder from materialize.py")
    parser.add_argument("--warehouse", type=Path, required=True, help="a fresh folder")
    parser.add_argument("--reuse", action="store_true", help="score an analysed warehouse as is")
    parser.add_argument("--events", type=Path, default=HERE / "events.json")
    parser.add_argument("--json", type=Path, help="write the full report here")
    parser.add_argument(
        "--split-at",
        type=int,
        help="also score the history in two parts: changes and events at or before this "
        "commit position, and after it (the detector's thresholds are not fitted to either)",
    )
    args = parser.parse_args(argv)
    history, harness = load_history(), load_harness()
    events = load_events(args.events, history)
    timings: dict[str, Any] = {}
    if not args.reuse:
        if args.upstream is None:
            parser.error("--upstream is needed unless --reuse")
        if args.warehouse.exists() and any(args.warehouse.iterdir()):
            parser.error(f"{args.warehouse} is not empty (use --reuse to score it as is)")
        timings = run_project(args.upstream.resolve(), args.warehouse.resolve())
    rows, runs = read_tables(str(args.warehouse), history)
    report = Scorer(events, history, harness).score(rows, runs)
    report["timings"] = timings
    report["events"] = {k: v for k, v in Counter(e.kind for e in events).items()}
    print(markdown(report))
    if args.split_at is not None:
        report["parts"] = {}
        for name, keep in (
            (f"at or before {args.split_at}", lambda p: p is not None and p <= args.split_at),
            (f"after {args.split_at}", lambda p: p is not None and p > args.split_at),
        ):
            part_rows = [r for r in rows if keep(r.get("after_position"))]
            part_events = [e for e in events if e.kind != "code" or keep(e.position)]
            part = Scorer(part_events, history, harness).score(part_rows, runs)
            report["parts"][name] = part["variants"]
            print(f"\n{name}:\n{markdown(part)}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    print(json.dumps({"states": report["states"], "timings": timings.get("ingest_s")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
