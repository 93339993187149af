"""The document models are the contract: strict, with schemas every consumer can use."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kindex_etl.contracts.documents import DOCUMENT_KINDS, BenchmarkRun, Workload, json_schemas
from tests.helpers import golden_bundle


def test_the_seed_bundle_validates_and_renders_back_unchanged() -> None:
    kinds = {d["kind"]: d for d in golden_bundle().values()}
    assert set(kinds) == {"BenchmarkRun", "BenchmarkProtocol", "ExecutionEnvironment"}
    for kind, doc in kinds.items():
        assert DOCUMENT_KINDS[kind].model_validate(doc).document() == doc


def test_unknown_fields_and_bad_digests_are_refused() -> None:
    run = golden_bundle()["run"]
    with pytest.raises(ValidationError):
        BenchmarkRun.model_validate({**run, "extra": 1})
    bad = {**run, "spec": {**run["spec"], "workloadDigest": "sha256:xyz"}}
    with pytest.raises(ValidationError):
        BenchmarkRun.model_validate(bad)


def test_workload_keeps_a_null_dtype_for_hashing() -> None:
    w = Workload.model_validate({"spec": {"kernel": "k", "parameters": {"h": 1}, "dtype": None}})
    assert w.document()["spec"]["dtype"] is None


def test_workload_has_no_sweep_axis() -> None:
    # Which axis a script swept is not part of what was computed (see docs/catalog.md).
    with pytest.raises(ValidationError):
        Workload.model_validate(
            {"spec": {"kernel": "k", "parameters": {}, "dtype": None, "sweep": {"name": "h"}}}
        )


def test_every_kind_has_a_json_schema() -> None:
    schemas = json_schemas()
    assert set(schemas) == set(DOCUMENT_KINDS)
    assert all(s["type"] == "object" and s["properties"] for s in schemas.values())
