"""Protocol, environment, workload and implementation tables: one row per digest new to the
warehouse, and the documents that go with them."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from kindex_etl.catalog import default_catalog
from kindex_etl.contracts.digests import digest
from kindex_etl.load import layout
from kindex_etl.load.descriptor_tables import descriptor_tables
from kindex_etl.normalize.descriptors import Resolver
from kindex_etl.normalize.reference import descriptor_key
from tests.helpers import read_jsonl_zst, row, seed_row


def _descriptors():  # the seed row, its memory twin and the same run of another provider
    resolver = Resolver(default_catalog())
    rows = [seed_row(), row(metric_name="memory", metric_unit="MB"), row(kernel_provider="liger")]
    return [resolver.resolve(descriptor_key(r)) for r in rows]


def test_one_row_per_new_digest_and_digests_recomputable(tmp_path: Path) -> None:
    ds = _descriptors()
    digests, files = descriptor_tables(tmp_path, "b1", ds, known=set())
    by_key = {f.key: f for f in files}
    protocols = pq.read_table(by_key[layout.table_key(layout.PROTOCOLS, "b1")].path).to_pylist()
    assert {p["digest"] for p in protocols} == {ds[0].protocol_digest, ds[1].protocol_digest}
    workloads = pq.read_table(by_key[layout.table_key(layout.WORKLOADS, "b1")].path).to_pylist()
    assert len(workloads) == 1  # one computation: speed, memory and both providers share it
    assert digest(json.loads(workloads[0]["descriptor"])) == workloads[0]["digest"]
    impls = pq.read_table(by_key[layout.table_key(layout.IMPLEMENTATIONS, "b1")].path)
    assert sorted(impls.column("provider").to_pylist()) == ["liger", "torch"]
    docs = read_jsonl_zst(by_key[layout.documents_key(layout.PROTOCOLS, "b1")].path)
    assert sorted(digest(d) for d in docs) == sorted(p["digest"] for p in protocols)
    assert ds[0].workload_digest in digests and ds[0].environment_digest in digests


def test_known_digests_are_not_written_again(tmp_path: Path) -> None:
    ds = _descriptors()
    first, _ = descriptor_tables(tmp_path / "a", "b1", ds, known=set())
    digests, files = descriptor_tables(tmp_path / "b", "b2", ds, known=first)
    assert digests == set() and files == []
