"""What delta-rs' own upkeep (`optimize.compact`, `vacuum`) does to a kindex warehouse.

    python benchmarks/delta_rs_probe.py [--workdir /tmp/kindex-delta-probe]
        [--upstream PATH_TO_A_CSV_OR_FOLDER]

Builds a small warehouse from the upstream rows (`--upstream`: a CSV, or every `*.csv` under a
folder; default: the real sample next to the repo, else `kindex_etl.demo.sample_rows()`), split
round-robin into 4 objects, each ingested by its own `kindex_etl.api.ingest` call: 4 small files
per `benchmark_runs` partition. Then, each on a fresh copy: (1) `observed_at`'s type in our
files and in one `DeltaTable.optimize.compact()` wrote, and whether `pa.concat_tables` of the
two works without promotion; (2) per partition, whether the compacted rows are the inputs in
Delta log add order or newest commit first; (3) the versions after two `compact()` in a row;
(4) `vacuum` lite and `full=True` at retention 0: tombstoned files, a planted orphan Parquet
file and a planted `notes.txt`, deleted or not; files outside the table folder changed or not;
(5) one more kindex ingest after a compaction (the files the runs table lists), and after a
compaction and a vacuum (whether it fails, and how). Prints short lines, then one JSON object.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
from deltalake import DeltaTable

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO.parent / "shared" / "upstream-sample" / "all_benchmark_data.csv"
RUNS = "benchmark_runs"
OBJECTS = 4
KEY = ["external_id", "source_key", "source_row"]  # identifies a run row and where it came from
TS_FORMAT = "%Y-%m-%d %H:%M:%S"
CSV_OPTIONS = pcsv.WriteOptions(quoting_style="needed")
# Retention 0: the probe must see what a vacuum deletes now, not in 7 days.
NO_RETENTION: dict[str, Any] = {"retention_hours": 0, "enforce_retention_duration": False}


def base_table(upstream: Path | None) -> pa.Table:
    # Imported here, not at the top: ruff sorts kindex_etl as first-party only inside the repo.
    from kindex_etl.contracts.upstream import UPSTREAM_COLUMNS
    from kindex_etl.demo import sample_rows

    path = upstream or (SAMPLE if SAMPLE.is_file() else None)
    if path is None:
        return pa.Table.from_pylist(sample_rows())
    # Every column as text, exactly as upstream wrote it.
    types = {name: pa.string() for name in UPSTREAM_COLUMNS}
    options = pcsv.ConvertOptions(strings_can_be_null=False, column_types=types)
    files = sorted(path.rglob("*.csv")) if path.is_dir() else [path]
    return pa.concat_tables([pcsv.read_csv(f, convert_options=options) for f in files])


def ingest(upstream: Path, warehouse: Path) -> dict[str, Any]:
    from kindex_etl.api import ingest as kindex_ingest
    from kindex_etl.ingestion import IngestOptions

    # No GPU re-run requests; the Python API chains no analysis (only the command does).
    return kindex_ingest(str(upstream), str(warehouse), IngestOptions(trigger=False)).as_dict()


def build(workdir: Path, base: pa.Table) -> tuple[Path, Path, int]:
    """The warehouse after 4 ingests; an upstream folder with one more, new object; its rows."""
    up, wh, up_next = workdir / "upstream", workdir / "warehouse", workdir / "upstream-next"
    # Round-robin, so that every release (partition) gets one file from every commit.
    parts = [base.take(list(range(i, base.num_rows, OBJECTS))) for i in range(OBJECTS)]
    up.mkdir(parents=True)
    for i, part in enumerate(parts):
        pcsv.write_csv(part, up / f"part{i}.csv", write_options=CSV_OPTIONS)
        ingest(up, wh)
    shutil.copytree(up, up_next)  # keeps size and mtime, the local etag: nothing new but part4
    # The first object's runs a year later: new runs in the same partitions.
    ts = pc.strptime(parts[0].column("timestamp"), format=TS_FORMAT, unit="s")
    later = pc.strftime(pc.add(ts, pa.scalar(365 * 86400, pa.duration("s"))), format=TS_FORMAT)
    column = parts[0].schema.get_field_index("timestamp")
    new = parts[0].set_column(column, "timestamp", later)
    pcsv.write_csv(new, up_next / "part4.csv", write_options=CSV_OPTIONS)
    return wh, up_next, parts[0].num_rows


def copy(warehouse: Path, workdir: Path, name: str) -> tuple[Path, Path]:
    dst = workdir / "copies" / name
    shutil.copytree(warehouse, dst)
    return dst, dst / RUNS


def commit(table: Path, version: int) -> list[dict[str, Any]]:
    text = (table / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def live(table: Path) -> list[str]:
    return pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).column("path").to_pylist()


def rows(table: Path) -> int:
    return DeltaTable(str(table)).to_pyarrow_dataset().count_rows()


def version(table: Path) -> int:
    return DeltaTable(str(table)).version()


def digest(root: Path, skip: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and skip not in p.parents
    }


def probe_compaction(warehouse: Path, workdir: Path) -> dict[str, Any]:
    """Facts 1 to 3 on one copy: types, row order, a second compaction."""
    _, t = copy(warehouse, workdir, "compact")
    v0, ours = version(t), set(live(t))
    adds = [[a["add"]["path"] for a in commit(t, v) if "add" in a] for v in range(v0 + 1)]
    started = time.perf_counter()
    metrics = DeltaTable(str(t)).optimize.compact()
    seconds = round(time.perf_counter() - started, 3)
    v1 = version(t)
    written = [a["add"]["path"] for a in commit(t, v1) if "add" in a]
    DeltaTable(str(t)).optimize.compact()  # the default target again, right away
    v2 = version(t)

    def keys(paths: list[str]) -> pa.Table:
        return pa.concat_tables([pq.read_table(t / p, columns=KEY) for p in paths])

    partitions = sorted({p.split("/")[0] for p in ours})
    order = {"partitions": len(partitions), "log_add_order": 0, "newest_commit_first": 0}
    for part in partitions:
        commits = [[p for p in c if p in ours and p.startswith(part + "/")] for c in adds]
        got = keys([p for p in written if p.startswith(part + "/")])
        by_add = got.equals(keys([p for c in commits for p in c]))
        newest = got.equals(keys([p for c in reversed(commits) for p in c]))
        order["log_add_order"] += by_add
        order["newest_commit_first"] += newest
    ours_file = sorted(ours)[0]
    theirs_file = next(p for p in written if p.split("/")[0] == ours_file.split("/")[0])
    a, b = pq.read_table(t / ours_file), pq.read_table(t / theirs_file)
    try:
        pa.concat_tables([a, b])
        concat = "ok"
    except pa.ArrowInvalid as e:
        concat = f"{type(e).__name__}: {str(e).splitlines()[0].rstrip(': ')}"
    promoted = pa.concat_tables([a, b], promote_options="permissive")
    return {
        "types": {
            "observed_at": {
                "ours": str(a.schema.field("observed_at").type),
                "compacted": str(b.schema.field("observed_at").type),
            },
            "columns_of_another_type": {
                f.name: [str(a.schema.field(f.name).type), str(f.type)]
                for f in b.schema
                if f.type != a.schema.field(f.name).type
            },
            "concat_tables_without_promote": concat,
            "concat_tables_permissive_observed_at": str(promoted.schema.field("observed_at").type),
        },
        "row_order_partitions": order,
        "compaction": {"files_before": len(ours), "seconds": seconds}
        | {k: metrics[k] for k in ("numFilesAdded", "numFilesRemoved")},
        "idempotence_versions": {"before": v0, "after_first": v1, "after_second": v2},
    }


def probe_vacuum(warehouse: Path, workdir: Path, *, full: bool) -> dict[str, Any]:
    root, t = copy(warehouse, workdir, "vacuum-full" if full else "vacuum-lite")
    DeltaTable(str(t)).optimize.compact()
    v0 = version(t)
    tombstoned = {a["remove"]["path"] for v in range(v0 + 1) for a in commit(t, v) if "remove" in a}
    kept = sorted(live(t))[0]
    part = kept.split("/")[0]
    # What a killed writer leaves: a valid Parquet file that no log entry names.
    orphan, notes = f"{part}/part-deadbeefdeadbeef-00000.parquet", f"{part}/notes.txt"
    shutil.copy(t / kept, t / orphan)
    (t / notes).write_text("a file a person left here\n")
    outside, rows_before = digest(root, t), rows(t)
    returned = DeltaTable(str(t)).vacuum(dry_run=False, full=full, **NO_RETENTION)
    return {
        "tombstoned_deleted": f"{sum(not (t / p).exists() for p in tombstoned)}/{len(tombstoned)}",
        "orphan_parquet_deleted": not (t / orphan).exists(),
        "notes_txt_deleted": not (t / notes).exists(),
        "paths_returned": len(returned),
        "versions": [v0, version(t)],
        "rows_unchanged": rows(t) == rows_before,
        "outside_table_unchanged": digest(root, t) == outside,
        "files_outside_table": len(outside),
    }


def probe_kindex_after(
    warehouse: Path, up_next: Path, new_rows: int, workdir: Path, *, vacuum: bool
) -> dict[str, Any]:
    """Fact 5: our next ingest on a table whose log kindex did not write."""
    root, t = copy(warehouse, workdir, "ingest-after-vacuum" if vacuum else "ingest-after-compact")
    rows_before, ours = rows(t), set(live(t))
    DeltaTable(str(t)).optimize.compact()
    compacted = set(live(t))
    out: dict[str, Any] = {"files_after_compaction": len(compacted)}
    if vacuum:
        out["vacuum_deleted"] = len(DeltaTable(str(t)).vacuum(dry_run=False, **NO_RETENTION))
    try:
        out["objects_ingested"] = ingest(up_next, root)["objects_ingested"]
    except Exception as e:  # the failure is the fact measured
        out["exception"] = f"{type(e).__module__}.{type(e).__qualname__}"
        out["message"] = str(e)[:200]
    after = set(live(t))
    out |= {
        "files_after_ingest": len(after),
        "compacted_files_still_listed": len(after & compacted),
        "pre_compaction_files_listed_again": len(after & ours),
        "rows": rows(t),
        "rows_expected": rows_before + new_rows,
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description="What delta-rs upkeep does to a warehouse.")
    default_workdir = Path(tempfile.gettempdir()) / "kindex-delta-probe"
    parser.add_argument("--workdir", type=Path, default=default_workdir)
    parser.add_argument("--upstream", type=Path, default=None, help="a CSV, or a folder of CSVs")
    args = parser.parse_args()
    started = time.perf_counter()
    workdir: Path = args.workdir
    # Only what this script creates is removed: --workdir may be a folder in use.
    for sub in ("upstream", "upstream-next", "warehouse", "copies"):
        shutil.rmtree(workdir / sub, ignore_errors=True)
    base = base_table(args.upstream)
    warehouse, up_next, new_rows = build(workdir, base)
    facts: dict[str, Any] = {
        "deltalake": deltalake.__version__,
        "pyarrow": pa.__version__,
        "upstream_rows": base.num_rows,
        "runs_version_after_ingests": version(warehouse / RUNS),
    }
    facts |= probe_compaction(warehouse, workdir)
    facts["vacuum"] = {
        m: probe_vacuum(warehouse, workdir, full=m == "full") for m in ("lite", "full")
    }
    facts["kindex_ingest_after"] = {
        case: probe_kindex_after(warehouse, up_next, new_rows, workdir, vacuum=flag)
        for case, flag in (("compact", False), ("compact_and_vacuum", True))
    }
    facts["seconds"] = round(time.perf_counter() - started, 2)
    for key in ("types", "row_order_partitions", "idempotence_versions", "compaction"):
        print(f"{key}: {facts[key]}")
    for group in ("vacuum", "kindex_ingest_after"):
        for case, value in facts[group].items():
            print(f"{group} {case}: {value}")
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
