"""The series key: what may be compared, recomputable from a run and its environment."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import rfc8785

from kindex_etl.analysis import series
from kindex_etl.analysis.run import detect_changes
from kindex_etl.analysis.series import (
    BUCKET_FIELDS,
    SERIES_FIELDS,
    RunSource,
    _split_by_group,
    bucket_name,
    iter_parquet,
    series_key,
    software_class,
    version_order,
)
from kindex_etl.storage import open_store
from tests.analysis.helpers import add_rerun, build_warehouse, series_rows

FLAT = [0.1] * 4
HIGH = [0.2] * 4


def _keys(warehouse: str) -> dict[str, set[str]]:
    """series key -> gpu names of its runs."""
    out: dict[str, set[str]] = {}
    for bucket in RunSource.open(open_store(warehouse)).buckets():
        for key, gpu in zip(
            bucket.column("series_key").to_pylist(),
            bucket.column("gpu_name").to_pylist(),
            strict=True,
        ):
            out.setdefault(key, set()).add(gpu)
    return out


def test_key_is_sha256_of_the_canonical_fields_and_recomputable(tmp_path: Path) -> None:
    wh = build_warehouse(tmp_path, [series_rows([0.1, 0.1], releases=("0.1.0", "0.2.0"))])
    run = ds.dataset(f"{wh}/benchmark_runs", format="parquet").to_table().to_pylist()[0]
    env = ds.dataset(f"{wh}/execution_environments", format="parquet").to_table().to_pylist()[0]
    fields = {
        "kernel": run["kernel"],
        "operation_mode": run["operation_mode"],
        "metric": run["metric"],
        "provider": run["provider"],
        "workload_digest": run["workload_digest"],
        "protocol_digest": run["protocol_digest"],
        "gpu_product": env["product"],
        "gpu_form_factor": env["form_factor"],
        "software_class": "upstream",
        "origin": run["origin"],  # null here: `benchmarks/0000/` names no commit
    }
    assert set(fields) == set(SERIES_FIELDS)
    expected = "sha256:" + hashlib.sha256(rfc8785.dumps(fields)).hexdigest()
    assert series_key(fields) == expected
    assert set(_keys(wh)) == {expected}


def test_series_never_mix_gpus_form_factors_workloads_or_passes(tmp_path: Path) -> None:
    releases = ("0.1.0", "0.2.0", "0.3.0", "0.4.0")
    groups = [
        series_rows(FLAT, releases=releases, gpu="NVIDIA H100 80GB HBM3"),
        series_rows(HIGH, releases=releases, gpu="NVIDIA H100 PCIe", day=2),
        series_rows(HIGH, releases=releases, gpu="NVIDIA A100-SXM4-80GB", day=3),
        series_rows(HIGH, releases=releases, config='{"S": 8192, "B": 1}', day=4),
        series_rows(HIGH, releases=releases, mode="forward", day=5),
    ]
    wh = build_warehouse(tmp_path, groups)
    keys = _keys(wh)
    assert len(keys) == 5
    assert all(len(gpus) == 1 for gpus in keys.values())
    # A step only "across" series is no change of any series.
    assert detect_changes(open_store(wh)).changes == []


def test_a_step_between_gpus_over_releases_is_not_a_change(tmp_path: Path) -> None:
    first = series_rows([0.1] * 4, releases=("0.1.0", "0.2.0", "0.3.0", "0.4.0"))
    later = series_rows(
        [0.3] * 4, releases=("0.5.0", "0.6.0", "0.7.0", "0.8.0"), gpu="NVIDIA A100-SXM4-80GB", day=2
    )
    wh = build_warehouse(tmp_path, [first, later])
    assert detect_changes(open_store(wh)).changes == []


def test_software_class_separates_our_reruns_from_upstream(tmp_path: Path) -> None:
    releases = ("0.1.0", "0.2.0", "0.3.0", "0.4.0")
    wh = build_warehouse(tmp_path, [series_rows(FLAT, releases=releases)])
    soft = {
        "torch": "2.11.0+cu130",
        "triton": "3.6.0",
        "cuda": "13.0",
        "driver": "580.1",
        "hostCpu": "Intel(R) Xeon(R) Processor",
        "python": "3.12.3",
    }
    add_rerun(tmp_path, wh, series_rows(HIGH, releases=releases, day=9), soft, "r1")
    keys = _keys(wh)
    assert len(keys) == 2
    assert detect_changes(open_store(wh)).changes == []


def test_software_class_keeps_minor_versions_and_the_host() -> None:
    a = {
        "torch": "2.11.0+cu130",
        "triton": "3.6.0",
        "cuda": "13.0",
        "driver": "580.1",
        "hostCpu": "Xeon",
        "python": "3.12.3",
    }
    assert software_class({}) == "upstream"
    assert software_class(json.dumps(a)) == software_class(
        {**a, "driver": "580.2", "torch": "2.11.1"}
    )
    assert software_class(a) != software_class({**a, "torch": "2.12.0"})
    assert software_class(a) != software_class({**a, "hostCpu": "EPYC"})
    assert software_class(a) == "cuda=13,hostCpu=Xeon,torch=2.11,triton=3.6"


def test_releases_are_in_pep440_order_not_string_order(tmp_path: Path) -> None:
    releases = ("0.8.0", "0.9.0", "0.9.1", "0.10.0", "0.10.1", "0.11.0")
    values = [0.1, 0.1, 0.1, 0.15, 0.15, 0.15]
    wh = build_warehouse(tmp_path, [series_rows(values, releases=releases)])
    changes = detect_changes(open_store(wh)).changes
    assert [(c["before_release"], c["after_release"], c["state"]) for c in changes] == [
        ("0.9.1", "0.10.0", "alert")
    ]
    assert sorted(["0.10.0", "0.9.0", "1.0.0rc1", "1.0.0"], key=version_order) == [
        "0.9.0",
        "0.10.0",
        "1.0.0rc1",
        "1.0.0",
    ]


def test_spilled_buckets_hold_whole_series_and_find_the_same(tmp_path: Path) -> None:
    groups = [
        series_rows([0.1, 0.1, 0.1, 0.1, 0.2, 0.2, 0.2, 0.2], x=str(x), day=1 + i)
        for i, x in enumerate((1024, 2048, 4096, 8192, 16384))
    ]
    wh = build_warehouse(tmp_path, groups)
    store = open_store(wh)
    whole = detect_changes(store).changes
    spilled_source = RunSource.open(store, bucket_rows=4)
    buckets = list(spilled_source.buckets())
    assert len(buckets) > 1
    seen = [set(b.column("series_key").to_pylist()) for b in buckets]
    assert sum(len(s) for s in seen) == len(set().union(*seen)) == 5
    spilled = detect_changes(store, bucket_rows=4).changes
    assert len(whole) == 5
    assert whole == spilled


def test_runs_are_spilled_a_row_group_at_a_time_into_hashed_series_buckets(
    tmp_path: Path,
) -> None:
    # A compacted release file holds a million runs or more: it is read a row group at a
    # time, and each group is split in one sort by a hash of what a series' runs share,
    # every bucket keeping its rows in file order.
    n = 12
    table = pa.table(
        {
            "kernel": ["rope"] * n,
            "operation_mode": ["full", "forward"] * (n // 2),
            "metric": ["speed"] * n,
            # One popular workload and a rare one; the rare one's digest is missing once.
            "workload_digest": ["sha256:ab"] * 9 + ["sha256:cd", None, "sha256:cd"],
            "protocol_digest": ["sha256:p"] * n,
            "provider": [f"p{i % 6}" for i in range(n)],
            "n": list(range(n)),
        }
    )
    pq.write_table(table, tmp_path / "runs.parquet", row_group_size=8)
    store = open_store(str(tmp_path))
    groups = list(iter_parquet(store, "runs.parquet"))
    assert [g.num_rows for g in groups] == [8, 4]
    assert pa.concat_tables(groups).equals(table)

    def fields(row: dict[str, object]) -> tuple[object, ...]:
        return tuple(row[f] for f in BUCKET_FIELDS)

    seen: dict[tuple[object, ...], str] = {}
    for group in groups:
        parts = list(_split_by_group(group, 1))
        got = [n for _, p in parts for n in p.column("n").to_pylist()]
        assert sorted(got) == sorted(group.column("n").to_pylist())
        for name, part in parts:
            rows = part.to_pylist()
            assert [r["n"] for r in rows] == sorted(r["n"] for r in rows)  # file order kept
            for r in rows:
                assert name == bucket_name(fields(r), 1)
                # Runs that share the series fields share a bucket, whatever their row group.
                assert seen.setdefault(fields(r), name) == name
    # Every provider and pass of one workload lands in the same bucket: a step is judged
    # against the other providers measured in the same runs, and `full` against its passes.
    assert "provider" not in BUCKET_FIELDS and "operation_mode" not in BUCKET_FIELDS
    by_workload: dict[tuple[object, ...], set[object]] = {}
    for part_name, part in _split_by_group(table, 1):
        for r in part.to_pylist():
            by_workload.setdefault(fields(r), set()).add(r["provider"])
            assert seen[fields(r)] == part_name
    assert by_workload[("rope", "speed", "sha256:ab")] == {f"p{i}" for i in range(6)}


def test_dictionary_columns_split_and_read_back_as_their_strings(tmp_path: Path) -> None:
    """A full analysis reads the repeating strings as dictionaries: the same buckets, the same
    rows in the same order, and strings again when a bucket is read back."""
    table = pa.table(
        {
            "kernel": ["rope", "rope", "swiglu", "rope", "swiglu", "rope"],
            "operation_mode": ["full", "forward", "full", "full", "full", None],
            "metric": ["speed"] * 6,
            "workload_digest": ["sha256:a", "sha256:b", "sha256:a", "sha256:a", "sha256:c", "s"],
            "protocol_digest": ["sha256:p"] * 6,
            "commit_sha": pa.nulls(6, pa.string()),
            "n": list(range(6)),
        }
    )
    names = [f for f in table.column_names if f != "n"]
    encoded = series._encoded(table, names)
    assert all(pa.types.is_dictionary(encoded.schema.field(f).type) for f in names)
    plain = [(n, p.column("n").to_pylist()) for n, p in _split_by_group(table, 1)]
    assert [(n, p.column("n").to_pylist()) for n, p in _split_by_group(encoded, 1)] == plain
    spill = series._BucketFiles(tmp_path, encoded.schema, series.spill_budget(1))
    # The second half encoded on its own, as another row group is: its own dictionaries in
    # the same bucket (an IPC file would refuse the replacement).
    for half in (encoded.slice(0, 3), series._encoded(table.slice(3), names)):
        for name, part in _split_by_group(half, 1):
            spill.add(name, part, 0)
    back = {p.stem: series.read_bucket(p) for p in spill.close()}
    assert {n: back[n].column("n").to_pylist() for n in back} == dict(plain)
    for got in back.values():
        assert got.schema == table.schema
        rows = table.take(pa.array(got.column("n").to_pylist()))
        assert got.equals(rows)
