"""Fanning a backfill out: workers normalize, the committer absorbs, and the warehouse holds
what the sequential path builds, in the same commits and files (the batch ids are the same).

No Prefect here: `normalize_objects` is called as a worker would be (its result pickled, as
Dask does), with a normalizer whose series numbers differ from the committer's, the way they
do in another process. The Dask run itself is tests/flows/test_backfill_dask.py.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from kindex_etl.catalog import default_catalog
from kindex_etl.contracts.upstream import UPSTREAM_COLUMNS
from kindex_etl.extract.read import read_batches
from kindex_etl.ingestion import fanout
from kindex_etl.ingestion.fanout import NormalizedObject, normalize_objects
from kindex_etl.ingestion.run import (
    IngestOptions,
    ingest_batch,
    ingest_normalized_batch,
    plan,
)
from kindex_etl.normalize.columnar import ColumnarNormalizer
from kindex_etl.storage import open_store
from tests.flows.conftest import build_upstream
from tests.helpers import REPO, SEED_LINE, row, tree_digest, write_csv

_spec = importlib.util.spec_from_file_location(
    "diff_warehouses", REPO / "scripts" / "diff_warehouses.py"
)
assert _spec is not None and _spec.loader is not None
diff_warehouses = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(diff_warehouses)

BACKFILL = IngestOptions(backfill=True, trigger=False, max_objects_per_commit=2)
HEADER = ",".join(UPSTREAM_COLUMNS)


def _hostile_upstream(root: Path) -> None:
    """The upstream layout (cumulative file repeating the per-commit files) plus bad input."""
    build_upstream(root)
    bad = root / "benchmarks" / "zz-bad"
    bad.mkdir(parents=True)
    (bad / "gzip.csv").write_bytes(gzip.compress(f"{HEADER}\n{SEED_LINE}\n".encode()))
    # Same run as the seed row (kept first, in batch order), other values: a conflict.
    write_csv(bad / "a-seed.csv", [row()])
    write_csv(bad / "b-conflict.csv", [row(y_value_50="0.5"), row(gpu_name="Mystery GPU 9")])
    malformed = bad / "c-malformed.csv"
    write_csv(malformed, [row(timestamp="2026-06-11 10:00:00")])
    with malformed.open("a") as fh:
        fh.write("only,three,fields\n")
    late = write_csv(
        bad / "d-late.csv",
        [row(timestamp=f"2026-06-11 11:{i // 60:02d}:{i % 60:02d}") for i in range(400)],
    )
    with late.open("ab") as fh:
        fh.write(SEED_LINE.encode().replace(b"H100", b"H\xff00") + b"\n")


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Several blocks per object, so d-late.csv turns bad after its first blocks."""
    real = read_batches

    def small(store, key, *, block_size=4096):  # type: ignore[no-untyped-def]
        return real(store, key, block_size=block_size)

    for module in ("kindex_etl.ingestion.run", "kindex_etl.ingestion.fanout"):
        monkeypatch.setattr(f"{module}.read_batches", small)


def _worker(upstream: str, batch: list, shift: int) -> list[NormalizedObject]:  # type: ignore[type-arg]
    """As a worker process: its own normalizer, other series numbers, a pickled result."""
    fanout._normalizer = None
    normalizer = fanout._normalizer_for(default_catalog())
    for i in range(shift):
        normalizer.series_index(f"not/a/series/{i}")
    out = normalize_objects(upstream, batch, default_catalog())
    return pickle.loads(pickle.dumps(out))  # type: ignore[no-any-return]


def _log(warehouse: Path) -> list[dict[str, object]]:
    records = []
    for path in sorted((warehouse / "_kindex" / "log").glob("*.json")):
        record = json.loads(path.read_text())
        records.append({k: record[k] for k in ("batch", "objects", "files", "counts")})
    return records


@pytest.mark.usefixtures("small_blocks")
def test_fanned_out_backfill_builds_the_sequential_warehouse(tmp_path: Path) -> None:
    up = tmp_path / "upstream"
    _hostile_upstream(up)
    seq, fan = tmp_path / "sequential", tmp_path / "fanned"

    planned = plan(str(up), str(seq), BACKFILL)
    assert len(planned.batches) > 3
    for batch in planned.batches:
        ingest_batch(str(up), str(seq), BACKFILL, batch)

    # All batches normalized "ahead", before any commit: as a window of workers would.
    fanned_plan = plan(str(up), str(fan), BACKFILL)
    assert fanned_plan.batches == planned.batches
    made = [_worker(str(up), b, shift=7 * i + 3) for i, b in enumerate(fanned_plan.batches)]
    outcomes = [
        ingest_normalized_batch(str(up), str(fan), BACKFILL, b, n)
        for b, n in zip(fanned_plan.batches, made, strict=True)
    ]

    assert diff_warehouses.compare(str(seq), str(fan), set()) == []
    assert _log(seq) == _log(fan)
    # The same files (same batch ids); their bytes may differ only in dictionary order.
    assert set(tree_digest(seq)) == set(tree_digest(fan))

    reasons: dict[str, int] = {}
    for o in outcomes:
        for reason, n in o.reasons.items():
            reasons[reason] = reasons.get(reason, 0) + n
    # Every path of the absorb was taken: conflicts found only by the committer, rows and
    # files held back by the workers, a file that turned bad after its first blocks.
    assert {"conflicting_duplicate", "unknown_gpu", "malformed_row", "compressed_file",
            "bad_encoding"} <= set(reasons)  # fmt: skip
    statuses = {r.key: r.status for o in outcomes for r in o.reports}
    assert statuses["benchmarks/zz-bad/d-late.csv"] == "rejected"
    assert statuses["benchmarks/zz-bad/gzip.csv"] == "rejected"

    # A second backfill of the same objects writes no run, fanned out as sequentially; what
    # it holds back again (the conflict, the bad files) it holds back alike.
    again = [
        ingest_normalized_batch(str(up), str(fan), BACKFILL, b, _worker(str(up), b, shift=1))
        for b in fanned_plan.batches
    ]
    for batch in planned.batches:
        ingest_batch(str(up), str(seq), BACKFILL, batch)
    assert sum(r.runs for o in again for r in o.reports) == 0
    assert sum(r.duplicates for o in again for r in o.reports) == sum(
        r.runs + r.duplicates for o in outcomes for r in o.reports
    )
    assert diff_warehouses.compare(str(seq), str(fan), set()) == []
    assert _log(seq) == _log(fan)


def test_worker_output_is_pure_and_keyed_by_the_committer(tmp_path: Path) -> None:
    up = tmp_path / "upstream"
    build_upstream(up)
    store = open_store(str(up))
    planned = plan(str(up), str(tmp_path / "w"), BACKFILL)
    batch = planned.batches[0]

    first = _worker(str(up), batch, shift=0)
    second = _worker(str(up), batch, shift=11)  # a retry elsewhere: same content
    assert [o.key for o in first] == [c.key for c in batch]
    for a, b in zip(first, second, strict=True):
        assert a.rejected is None and a.rows > 0
        assert len(a.blocks) == len(b.blocks)
        assert [d.series_id for d in a.descriptors] == [d.series_id for d in b.descriptors]
        for x, y in zip(a.iter_blocks(), b.iter_blocks(), strict=True):
            assert x.runs.equals(y.runs) and x.json_lines.equals(y.json_lines)
            assert np.array_equal(x.descriptor_ids, y.descriptor_ids)
            # Each run's descriptor is the one that made it.
            series = x.runs.column("series_id").to_pylist()
            assert series == [a.descriptors[i].series_id for i in x.descriptor_ids]

    # The committer's keys from a worker's runs equal the keys its own normalize gives.
    committer = ColumnarNormalizer(default_catalog())
    for obj, candidate in zip(first, batch, strict=True):
        for block, rb in zip(obj.iter_blocks(), read_batches(store, candidate.key), strict=True):
            own = committer.normalize(
                rb.batch, source_key=obj.key, source_etag=obj.etag, lines=rb.lines
            )
            keys, fps = committer.keys_of_stored(block.runs)
            assert np.array_equal(keys, own.keys)
            assert np.array_equal(fps, own.fingerprints)


def test_a_fanned_out_commit_that_loses_a_race_commits_nothing_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kindex_etl.ingestion.batch import Ingestor
    from kindex_etl.ingestion.commit import commit_sources
    from kindex_etl.ingestion.run import _source
    from kindex_etl.load.warehouse import open_warehouse

    up = tmp_path / "upstream"
    build_upstream(up)
    wh = tmp_path / "warehouse"
    batch = plan(str(up), str(wh), BACKFILL).batches[0]
    normalized = _worker(str(up), batch, shift=5)

    real = Ingestor.process
    raced: list[int] = []

    def process_then_another_writer_commits(self, sources, **kw):  # type: ignore[no-untyped-def]
        staged = real(self, sources, **kw)
        if not raced:  # another backfill commits the same objects while ours stages
            raced.append(1)
            other = Ingestor(open_warehouse(str(wh)), default_catalog())
            store = open_store(str(up))
            raced.append(commit_sources(other, lambda: [_source(store, c) for c in batch]).commit)
        return staged

    monkeypatch.setattr(Ingestor, "process", process_then_another_writer_commits)
    ours = ingest_normalized_batch(str(up), str(wh), BACKFILL, batch, normalized)
    assert raced[1] is not None  # the other writer committed first
    assert ours.commit is None  # redone on the new head from the same worker output: nothing new
    assert sum(r.runs for r in ours.reports) == 0
    assert sum(r.duplicates for r in ours.reports) == sum(o.rows for o in normalized)
    objects = [o["key"] for rec in _log(wh) for o in rec["objects"]]  # type: ignore[attr-defined]
    assert sorted(objects) == sorted(c.key for c in batch)  # each object committed once
