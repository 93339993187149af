"""Synthetic liger-only steps injected into upstream's real history: what the detector finds.

    python benchmarks/eval/materialize.py --repo LIGER.git --out /tmp/upstream
    python benchmarks/eval/inject.py --upstream /tmp/upstream --workdir /tmp/inject \
        [--trials 12] [--seed 50] [--json OUT]

A reference analysis of the untouched folder gives the commits where five or more kernels
stepped (`environment` commits) and every kernel's harness revisions of liger's own path
(`script` commits, `kindex_etl/catalog/harness.json`); every other commit is `quiet`. Each trial
then draws, seeded, one injection per class and metric where it can (one kernel per commit, no
kernel twice, no commit measured twice): from a per-commit folder on, every later folder's rows
of that kernel's liger provider (and that metric) are multiplied by a factor, speed x0.8, x1.2
or x1.5 and memory x1.05 or x1.2, as a code change that stays would move them. A code change
touches the kernel's source, so the trial's sources catalog names that commit for that kernel
(the diff a real change brings; `KINDEX_SOURCES_JSON`). The trial's folder is ingested with
`kindex-etl ingest` (its analysis chained) into a fresh warehouse.

An injection is found when the kernel's liger series holds a reported change (`alert` for a
slower or larger step, `improvement` for a faster one) on that metric whose commit range
(before, after] holds the injected commit. Cross-talk: the changes of the reference analysis
that are not the injected kernels' and end in another state. Prints one JSON object: found per
class and metric, per factor, cross-talk, and every injection with its outcome (the specs, so
a run can be repeated).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import random
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
from deltalake import DeltaTable
from replay import current_rows  # the same folder: a script run as `python benchmarks/eval/...`

from kindex_etl.analysis.rules import is_liger
from kindex_etl.catalog.history import load_harness, load_history

SPEED = (0.8, 1.2, 1.5)
MEMORY = (1.05, 1.2)
Y = ("y_value_50", "y_value_20", "y_value_80")
ENV = {**os.environ, "DO_NOT_TRACK": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}


def folders(upstream: Path) -> list[tuple[int, str]]:
    """The per-commit folders with their commit's position, in history order."""
    history = load_history()
    out = []
    for p in (upstream / "benchmarks").iterdir():
        pos = history.position(p.name.split("-")[0]) if p.is_dir() else None
        if pos is not None:
            out.append((pos, p.name))
    return sorted(out)


def ingest(upstream: Path, warehouse: Path, sources: Path | None) -> None:
    env = {**ENV, "PREFECT_HOME": str(warehouse.parent / "prefect")}
    if sources is not None:
        env["KINDEX_SOURCES_JSON"] = str(sources)
    command = [sys.executable, "-m", "kindex_etl.cli", "ingest", "--upstream", str(upstream),
               "--warehouse", str(warehouse), "--no-trigger", "--json", "-q"]  # fmt: skip
    done = subprocess.run(command, env=env, cwd=warehouse.parent, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"ingest failed ({done.returncode}): {done.stderr[-2000:]}")


def changes(warehouse: Path) -> dict[str, dict[str, Any]]:
    """Each change's current row, retracted ones aside."""
    columns = ["state", "kernel", "provider", "metric", "direction", "before_position",
               "after_position", "after_commit", "kernels_at_step"]  # fmt: skip
    rows = current_rows(warehouse, columns)
    return {k: v for k, v in rows.items() if v["state"] != "retracted"}


def kernel_names(warehouse: Path) -> dict[str, str]:
    """Upstream's kernel name (`source_kernel`: `dyt_beta=True`) -> the warehouse's (`dyt`)."""
    files = DeltaTable(str(warehouse / "benchmark_runs")).file_uris()
    table = ds.dataset(files, format="parquet").to_table(["source_kernel", "kernel"])
    pairs = table.group_by(["source_kernel", "kernel"]).aggregate([]).to_pylist()
    return {p["source_kernel"]: p["kernel"] for p in pairs}


def classes(reference: dict[str, dict[str, Any]], order: list[tuple[int, str]]) -> dict[int, str]:
    """Per folder position: `environment` where five or more kernels stepped, else `quiet`."""
    shared = {r["after_position"] for r in reference.values() if (r["kernels_at_step"] or 0) >= 5}
    return {pos: ("environment" if pos in shared else "quiet") for pos, _ in order}


def kernels_in(path: Path) -> dict[str, set[str]]:
    """metric -> upstream kernel names with liger rows in a folder's CSV."""
    out: dict[str, set[str]] = defaultdict(set)
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            if is_liger(row["kernel_name"], row["kernel_provider"]):
                out[row["metric_name"]].add(row["kernel_name"])
    return out


def draw(
    rng: random.Random,
    upstream: Path,
    order: list[tuple[int, str]],
    kinds: dict[int, str],
) -> list[dict[str, Any]]:
    """One trial's injections: per class and metric, one (kernel, commit, factor), with two
    measured folders before it and two from it on, no kernel or commit twice."""
    harness = load_harness()
    present = {pos: kernels_in(upstream / "benchmarks" / name / "benchmark.csv")
               for pos, name in order}  # fmt: skip
    positions = [pos for pos, _ in order]
    # A commit measured twice (`0a62700` and `0a62700-v0.6.4`, a week apart) is one point: a
    # step from the second folder on would split its own point, which no code change does.
    twice = {pos for pos in positions if positions.count(pos) > 1}
    used_k: set[str] = set()
    used_c: set[int] = set()
    specs = []
    for kind in ("quiet", "environment", "script"):
        for metric in ("speed", "memory"):
            options = []
            for i, pos in enumerate(positions[2:-1], start=2):
                for kernel in sorted(present[pos].get(metric, ())):
                    seen = sum(kernel in present[p].get(metric, ()) for p in positions[:i])
                    later = sum(kernel in present[p].get(metric, ()) for p in positions[i:])
                    if seen < 2 or later < 2 or kernel in used_k or pos in used_c | twice:
                        continue
                    revised = any(
                        positions[i - 1] < r <= pos
                        for r in harness.revisions(kernel, provider="liger")
                    ) if harness.known(kernel) else False  # fmt: skip
                    own = "script" if revised else kinds[pos]
                    if own == kind:
                        options.append((kernel, pos))
            if not options:
                continue
            kernel, pos = rng.choice(options)
            factor = rng.choice(SPEED if metric == "speed" else MEMORY)
            used_k.add(kernel)
            used_c.add(pos)
            specs.append({"class": kind, "metric": metric, "kernel": kernel, "position": pos,
                          "folder": dict(order)[pos], "factor": factor})  # fmt: skip
    return specs


def inject(upstream: Path, out: Path, order: list[tuple[int, str]], specs: list[dict[str, Any]]):
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(upstream, out)
    for pos, name in order:
        active = [s for s in specs if s["position"] <= pos]
        if not active:
            continue
        path = out / "benchmarks" / name / "benchmark.csv"
        text = path.read_text()
        reader = csv.DictReader(io.StringIO(text))
        rows = list(reader)
        for row in rows:
            for s in active:
                if (
                    row["kernel_name"] == s["kernel"]
                    and row["metric_name"] == s["metric"]
                    and is_liger(row["kernel_name"], row["kernel_provider"])
                ):
                    for y in Y:
                        if row.get(y):
                            row[y] = repr(float(row[y]) * s["factor"])
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=reader.fieldnames or [], lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        path.write_text(buffer.getvalue())


def sources_with(specs: list[dict[str, Any]], out: Path) -> Path:
    from importlib import resources

    doc = json.loads(resources.files("kindex_etl.catalog").joinpath("sources.json").read_text())
    history = load_history()
    for s in specs:
        sha = history.at(s["position"]).sha[:7]
        doc["kernels"].setdefault(s["kernel"], []).append(sha)
    out.write_text(json.dumps(doc))
    return out


def found(spec: dict[str, Any], rows: dict[str, dict[str, Any]], names: dict[str, str]) -> bool:
    larger = "larger" if spec["metric"] == "memory" else "slower"
    want = "faster" if spec["factor"] < 1 else larger
    state = "improvement" if spec["factor"] < 1 else "alert"
    kernel = names.get(spec["kernel"], spec["kernel"])
    return any(
        r["kernel"] == kernel
        and r["metric"] == spec["metric"]
        and is_liger(r["kernel"], r["provider"])
        and r["state"] == state
        and r["direction"] == want
        and (r["before_position"] or -1) < spec["position"] <= (r["after_position"] or -1)
        for r in rows.values()
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", type=Path, required=True, help="folder from materialize.py")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/kindex-inject"))
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--seed", type=int, default=50)
    parser.add_argument("--json", type=Path, help="write the result here too")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    order = folders(args.upstream)
    ref_wh = args.workdir / "reference" / "warehouse"
    if not (ref_wh / "regressions").exists():
        shutil.rmtree(ref_wh.parent, ignore_errors=True)
        ref_wh.parent.mkdir(parents=True)
        ingest(args.upstream, ref_wh, None)
    reference = changes(ref_wh)
    names = kernel_names(ref_wh)
    kinds = classes(reference, order)
    rng = random.Random(args.seed)
    outcomes: list[dict[str, Any]] = []
    crosstalk: list[int] = []
    for trial in range(args.trials):
        specs = draw(rng, args.upstream, order, kinds)
        root = args.workdir / f"trial-{trial}"
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir()
        inject(args.upstream, root / "upstream", order, specs)
        ingest(root / "upstream", root / "warehouse", sources_with(specs, root / "sources.json"))
        rows = changes(root / "warehouse")
        injected = {names.get(s["kernel"], s["kernel"]) for s in specs}
        moved = sum(
            1
            for cid, r in reference.items()
            if r["kernel"] not in injected and rows.get(cid, {}).get("state") != r["state"]
        )
        crosstalk.append(moved)
        for s in specs:
            outcomes.append({**s, "trial": trial, "found": found(s, rows, names)})
        shutil.rmtree(root / "upstream")
        hits = sum(o["found"] for o in outcomes[-len(specs) :])
        line = {"trial": trial, "found": hits, "of": len(specs), "crosstalk": moved}
        print(json.dumps(line), file=sys.stderr, flush=True)
    by_class: dict[str, Counter[str]] = defaultdict(Counter)
    for o in outcomes:
        for key in (o["class"], f"{o['class']}/{o['metric']}", f"x{o['factor']}"):
            by_class[key]["injected"] += 1
            by_class[key]["found"] += o["found"]
    result = {
        "trials": args.trials,
        "seed": args.seed,
        "found": {
            k: {**v, "share": round(v["found"] / v["injected"], 3)}
            for k, v in sorted(by_class.items())
        },
        "crosstalk_changes_per_trial": crosstalk,
        "injections": outcomes,
    }
    text = json.dumps(result, indent=1)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
