"""The fast columnar normalizer agrees with the per-row reference, document for document."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
from hypothesis import given
from hypothesis import strategies as st

from kindex_etl.catalog import default_catalog
from kindex_etl.contracts.device_protocol import metric_name
from kindex_etl.contracts.documents import BenchmarkRun
from kindex_etl.contracts.upstream import DEVICE_TIME_COLUMNS, GPU_STATE_COLUMNS, UPSTREAM_COLUMNS
from kindex_etl.demo import sample_rows
from kindex_etl.normalize.columnar import (
    ColumnarNormalizer,
    DescriptorTable,
    _descriptor_columns,
    _groups,
)
from kindex_etl.normalize.descriptors import Rejected
from kindex_etl.normalize.reference import descriptor_key, normalize_row
from tests.helpers import SAMPLE_CSV, row, seed_row

EDGE_ROWS = [
    seed_row(),
    row(y_value_50="nan", y_value_20="nan", y_value_80="nan"),
    row(y_value_20="inf", timestamp="2026-06-10 21:03:43"),
    row(y_value_80="nan", timestamp="2026-06-10 21:03:44"),
    row(y_value_50=".5", y_value_20="5", y_value_80="1e-05", timestamp="2026-06-10 21:03:45"),
    row(metric_name="memory", metric_unit="MB", y_value_50="1024.25", y_value_20="nan"),
    row(kernel_name="never_seen", extra_benchmark_config_str="", kernel_operation_mode=""),
    row(extra_benchmark_config_str='{"B": 1, "S": 4096, "dtype": "torch.float16", "eps": 1e-06}'),
    row(x_value="llama_3_8b", x_name="model", x_label="model config"),
    row(kernel_name="x" * 120, timestamp="2026-06-10 21:03:46"),
]


def _batch(rows: list[dict[str, str]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {c: pa.array([r[c] for r in rows], pa.string()) for c in UPSTREAM_COLUMNS}
    )


def _check_agrees(rows: list[dict[str, str]]) -> int:
    catalog = default_catalog()
    normalizer = ColumnarNormalizer(catalog)
    batch = _batch(rows)
    out = normalizer.normalize(
        batch, source_key="k", source_etag="e", lines=np.arange(2, len(rows) + 2)
    )
    lines = out.json_lines.to_pylist()
    assert all(line.endswith("\n") for line in lines)
    expected = []
    for r in rows:
        try:
            expected.append(normalize_row(catalog, r).run)
        except Rejected:
            continue
    assert len(lines) == len(expected) == out.runs.num_rows
    for line, reference in zip(lines, expected, strict=True):
        document = json.loads(line)
        assert document == reference
        assert BenchmarkRun.model_validate(document).document() == reference
    ids = out.runs.column("external_id").to_pylist()
    assert ids == [d["spec"]["sourceNative"]["externalId"] for d in expected]
    return len(lines)


def test_edge_rows_agree_with_the_reference():
    assert _check_agrees(EDGE_ROWS) == len(EDGE_ROWS)


def test_metadata_name_is_cut_at_100_characters():
    normalizer = ColumnarNormalizer(default_catalog())
    out = normalizer.normalize(
        _batch([EDGE_ROWS[-1]]), source_key="k", source_etag="e", lines=np.array([2])
    )
    [name] = out.runs.column("name").to_pylist()
    # liger-<kernel>-... with a 120-character kernel: the cut falls inside the kernel name.
    assert name == ("liger-" + "x" * 120)[:100]
    assert len(name) == 100


def test_generated_sample_agrees():
    assert _check_agrees(sample_rows()) == len(sample_rows())


def test_upstream_sample_agrees():
    types = {c: pa.string() for c in UPSTREAM_COLUMNS}
    table = pcsv.read_csv(
        SAMPLE_CSV,
        convert_options=pcsv.ConvertOptions(column_types=types, strings_can_be_null=False),
    )
    assert _check_agrees(table.to_pylist()) == 2448


def test_an_unexpected_error_resolving_a_key_holds_its_rows_back(monkeypatch):
    from kindex_etl.normalize.descriptors import Resolver

    real = Resolver.resolve

    def resolve(self, key):
        if key.provider == "liger":
            raise KeyError("a catalog entry this key trips over")
        return real(self, key)

    monkeypatch.setattr(Resolver, "resolve", resolve)
    rows = [seed_row(), row(kernel_provider="liger")]
    batch = pa.RecordBatch.from_pylist(
        rows, schema=pa.schema([(c, pa.string()) for c in UPSTREAM_COLUMNS])
    )
    nb = ColumnarNormalizer(default_catalog()).normalize(
        batch, source_key="k", source_etag="e", lines=np.array([2, 3])
    )
    assert nb.runs.num_rows == 1
    held = nb.quarantine.to_pylist()
    assert [(h["reason"], h["source_row"]) for h in held] == [("unprocessable_row", 3)]
    assert "KeyError" in held[0]["detail"]


def test_a_batch_dictionaries_hold_only_its_own_descriptors():
    # Buffered batches must not each pin every descriptor resolved so far in the process.
    normalizer = ColumnarNormalizer(default_catalog())
    rows = sample_rows()
    first = normalizer.normalize(
        _batch(rows), source_key="k", source_etag="e", lines=np.arange(2, len(rows) + 2)
    )
    assert len(normalizer.table.descriptors) > 2
    later = normalizer.normalize(
        _batch([rows[1], rows[0], rows[1]]), source_key="k", source_etag="e", lines=np.arange(3)
    )
    series = later.runs.column("series_id").chunk(0)
    assert len(series.dictionary) == len(set(series.to_pylist())) <= 2
    earlier = first.runs.column("series_id").to_pylist()
    assert series.to_pylist() == [earlier[1], earlier[0], earlier[1]]


def test_cached_rejections_pin_no_frames():
    # A cached exception keeps the frames it passed through, locals (whole batches) included.
    normalizer = ColumnarNormalizer(default_catalog())
    rows = [
        seed_row(),
        row(gpu_name="a GPU no catalog places"),
        row(extra_benchmark_config_str="{"),
    ]
    for _ in range(2):
        out = normalizer.normalize(
            _batch(rows), source_key="k", source_etag="e", lines=np.arange(2, 5)
        )
        assert out.runs.num_rows == 1
    resolver = normalizer.table.resolver
    cached = [
        *(found[1] for found in resolver._shared.values() if isinstance(found, tuple)),
        *resolver._environments.values(),
        *resolver._workloads.values(),
    ]
    rejected = [c for c in cached if isinstance(c, Rejected)]
    assert {r.reason for r in rejected} >= {"unknown_gpu", "bad_config"}
    assert all(r.__traceback__ is None and r.__context__ is None for r in rejected)


def test_a_reset_drops_descriptors_and_resolver_caches_but_keeps_run_keys():
    # A long ingest's descriptor memory is bounded by the cap: the resolver's caches (shared
    # parts, workloads) go with the descriptors, while run keys stay the same in the process.
    normalizer = ColumnarNormalizer(default_catalog())
    rows = sample_rows()
    lines = np.arange(2, len(rows) + 2)
    before = normalizer.normalize(_batch(rows), source_key="k", source_etag="e", lines=lines)
    old = normalizer.table.resolver
    assert old._shared and old._workloads
    normalizer.reset_descriptors()
    assert normalizer.table.descriptors == [] and normalizer.table.resolver is not old
    assert not normalizer.table.resolver._shared and not normalizer.table.resolver._workloads
    after = normalizer.normalize(_batch(rows), source_key="k", source_etag="e", lines=lines)
    assert np.array_equal(after.keys, before.keys)
    assert after.runs.to_pylist() == before.runs.to_pylist()
    assert after.json_lines.equals(before.json_lines)


def test_prepare_then_build_of_kept_rows_is_normalize_filtered():
    # An ingest builds only the rows dedup keeps, on another thread: the same runs, documents
    # and externalIds as normalizing everything and filtering.
    normalizer = ColumnarNormalizer(default_catalog())
    rows = sample_rows()
    lines = np.arange(2, len(rows) + 2)
    whole = ColumnarNormalizer(default_catalog()).normalize(
        _batch(rows), source_key="k", source_etag="e", lines=lines
    )
    prepared = normalizer.prepare(_batch(rows), source_key="k", source_etag="e", lines=lines)
    keep = np.arange(len(prepared.good)) % 3 != 1
    runs, json_lines = prepared.build(keep)
    mask = pa.array(keep)
    assert runs.to_pylist() == whole.runs.filter(mask).to_pylist()
    assert json_lines.equals(whole.json_lines.filter(mask))
    assert prepared.external_ids(~keep) == (
        whole.runs.column("external_id").filter(pa.array(~keep)).to_pylist()
    )
    assert prepared.versions(keep) == set(runs.column("liger_version").to_pylist())


def test_descriptor_chunks_stop_merging_at_their_bound(monkeypatch):
    # Merging every chunk copied the whole descriptor table at once: chunks stay at most
    # MAX_CHUNK_DESCRIPTORS, and the columns taken across many chunks are those of one table.
    from kindex_etl.normalize import columnar

    monkeypatch.setattr(columnar, "MAX_CHUNK_DESCRIPTORS", 4)
    rows = sample_rows()
    chunked = ColumnarNormalizer(default_catalog())
    whole = ColumnarNormalizer(default_catalog())
    for start in range(0, len(rows), 3):  # a few new descriptors per batch, as an ingest adds
        part = rows[start : start + 3]
        lines = np.arange(2, len(part) + 2)
        got = chunked.normalize(_batch(part), source_key="k", source_etag="e", lines=lines)
        with monkeypatch.context() as unbounded:
            unbounded.setattr(columnar, "MAX_CHUNK_DESCRIPTORS", 1 << 30)
            want = whole.normalize(_batch(part), source_key="k", source_etag="e", lines=lines)
        assert got.runs.to_pylist() == want.runs.to_pylist()
        assert got.json_lines.equals(want.json_lines)
    table = chunked.table
    assert len(table.descriptors) > 12
    sizes = [c.num_rows for c in table._stored.chunks]
    assert max(sizes) <= 4 and sum(sizes) == len(table.descriptors)
    assert max(c.num_rows for c in whole.table._stored.chunks) > 4
    ids = np.arange(len(table.descriptors))
    assert table.columns_of(ids)["series_id"].to_pylist() == [
        d.series_id for d in table.descriptors
    ]


def test_descriptor_columns_made_per_part_equal_those_made_per_descriptor():
    # The columns a batch's runs take are made from each descriptor's parts (shared part,
    # workload, protocol, implementation); the plain rendering from each descriptor is the
    # reference: every column, every row, on keys that share parts in every way.
    rows = [
        *EDGE_ROWS,
        *sample_rows(),
        row(gpu_name="NVIDIA GeForce RTX 4090 Ü"),
        row(x_value='8"192', x_label='seq "len"'),
        row(extra_benchmark_config_str='{"B": 2, "note": "a \\"quoted\\" \\\\ value"}'),
        row(kernel_operation_mode="backward", kernel_provider="huggingface"),
        row(liger_version="0.1.0"),
    ]
    types = {c: pa.string() for c in UPSTREAM_COLUMNS}
    rows += pcsv.read_csv(
        SAMPLE_CSV,
        convert_options=pcsv.ConvertOptions(column_types=types, strings_can_be_null=False),
    ).to_pylist()
    table = DescriptorTable(default_catalog())
    # In pieces, as an ingest adds them: each `columns_of` converts the descriptors and parts
    # added since the last, and takes rows kept in earlier conversions too.
    keys = list(dict.fromkeys(descriptor_key(r) for r in rows))
    for start, end in itertools.pairwise((0, 7, 60, 200, len(keys))):
        for key in keys[start:end]:
            table.id_of(key)
        ids = np.arange(len(table.descriptors) % 3, len(table.descriptors), 2)
        taken = table.columns_of(ids)
        expected = _descriptor_columns([table.descriptors[i] for i in ids.tolist()])
        assert list(taken) == list(expected)
        for name, column in expected.items():
            assert taken[name].to_pylist() == column.to_pylist(), name
            assert taken[name].type == column.type, name
    assert len(table.descriptors) > 100
    assert len(table.resolver.parts.shared) < len(table.descriptors)


@given(st.lists(st.integers(-(2**62), 2**62), max_size=300))
def test_groups_are_np_uniques_groups_numbered_by_first_appearance(values: list[int]) -> None:
    combined = np.asarray(values, dtype=np.int64)
    first, inverse = _groups(combined)
    uniq, u_first, u_inverse = np.unique(combined, return_index=True, return_inverse=True)
    # The same groups (each row's value is its group's), and each group's first row.
    assert (combined[first][inverse] == combined).all()
    assert sorted(first.tolist()) == sorted(u_first.tolist())
    # Numbered by first appearance: group i's first row comes before group i+1's.
    assert first.tolist() == sorted(first.tolist())
    assert len(first) == len(uniq) and len(inverse) == len(u_inverse.reshape(-1))


def test_device_time_rows_with_the_gpus_state_agree_with_the_reference():
    """Issue 53: a device-time CSV's GPU_STATE_COLUMNS reach the runs' gpu_* columns and
    sourceNative.deviceTime.gpu alike in both normalizers; empty or malformed fields are null
    and left out of the document, which is then what it was before the columns existed."""
    metric = metric_name("cuda_graph")
    state = dict(zip(GPU_STATE_COLUMNS, ("1530", "2619", "612.4", "61", "4", "true"), strict=True))
    rows = [
        row(metric_name=metric, **{DEVICE_TIME_COLUMNS[0]: "0.2"}, **state),
        row(
            metric_name=metric,
            timestamp="2026-06-10 21:03:43",
            **{DEVICE_TIME_COLUMNS[0]: "nan"},
            **{**state, "gpu_power_w": "", "gpu_throttled": "false", "gpu_sm_clock_mhz": "fast"},
        ),
        row(
            metric_name=metric,
            timestamp="2026-06-10 21:03:44",
            **{DEVICE_TIME_COLUMNS[0]: "0.3"},
            **dict.fromkeys(GPU_STATE_COLUMNS, ""),
        ),
        row(timestamp="2026-06-10 21:03:45", **{DEVICE_TIME_COLUMNS[0]: ""}, **state),
    ]
    catalog = default_catalog()
    batch = pa.RecordBatch.from_pydict(
        {c: pa.array([r[c] for r in rows], pa.string()) for c in (*UPSTREAM_COLUMNS,
                                                                  *DEVICE_TIME_COLUMNS)}
    )  # fmt: skip
    out = ColumnarNormalizer(catalog).normalize(
        batch, source_key="k", source_etag="e", lines=np.arange(2, len(rows) + 2)
    )
    docs = [json.loads(line) for line in out.json_lines.to_pylist()]
    assert docs == [normalize_row(catalog, r).run for r in rows]
    runs = out.runs.select(list(GPU_STATE_COLUMNS)).to_pylist()
    assert runs == [
        {"gpu_sm_clock_mhz": 1530, "gpu_mem_clock_mhz": 2619, "gpu_power_w": 612.4,
         "gpu_temperature_c": 61, "gpu_throttle_reasons": 4, "gpu_throttled": True},
        {"gpu_sm_clock_mhz": None, "gpu_mem_clock_mhz": 2619, "gpu_power_w": None,
         "gpu_temperature_c": 61, "gpu_throttle_reasons": 4, "gpu_throttled": False},
        dict.fromkeys(GPU_STATE_COLUMNS),
        dict.fromkeys(GPU_STATE_COLUMNS),  # upstream's timer: no state, whatever the CSV says
    ]  # fmt: skip
    native = [d["spec"]["sourceNative"].get("deviceTime") for d in docs]
    full = {"smClockMHz": 1530, "memClockMHz": 2619, "powerW": 612.4, "temperatureC": 61}
    assert native[0]["gpu"] == {**full, "throttleReasons": 4, "throttled": True}
    partial = {"memClockMHz": 2619, "temperatureC": 61, "throttleReasons": 4, "throttled": False}
    assert native[1]["gpu"] == partial
    assert "gpu" not in native[2] and native[3] is None
    # Every line stays its model's canonical rendering.
    for doc in docs:
        assert BenchmarkRun.model_validate(doc).document() == doc
