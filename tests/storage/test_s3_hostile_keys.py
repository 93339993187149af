"""Upstream keys are data: a hostile key rejects its object, never the run, on S3 and locally."""

from __future__ import annotations

import pytest

from kindex_etl import IngestOptions, ingest
from kindex_etl.errors import KindexError, UnsafeKey
from kindex_etl.storage import check_key
from tests.helpers import SEED_LINE
from tests.warehouse import HEADER, assert_consistent

HOSTILE_KEYS = [
    "../escape.csv",
    "benchmarks/../../escape.csv",
    "/leading.csv",
    "back\\slash.csv",
    "ctrl\x01char.csv",
    "new\nline.csv",
    "double//slash.csv",
    "./dot.csv",
    "benchmarks/./dot.csv",
]
# moto's server refuses a newline in a key (404); every other one it stores as written.
S3_KEYS = [k for k in HOSTILE_KEYS if "\n" not in k]


@pytest.mark.parametrize("key", HOSTILE_KEYS)
def test_check_key_raises_unsafe_key_which_is_a_value_error(key):
    with pytest.raises(UnsafeKey) as caught:
        check_key(key)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, KindexError)


def test_hostile_s3_keys_are_rejected_objects_and_every_run_completes(s3_client, s3_bucket):
    clean = (HEADER + SEED_LINE + "\n").encode()
    s3_client.put_object(Bucket=s3_bucket, Key="up/benchmarks/clean/benchmark.csv", Body=clean)
    for key in S3_KEYS:
        s3_client.put_object(Bucket=s3_bucket, Key=f"up/{key}", Body=clean)
    listed = {o["Key"] for o in s3_client.list_objects_v2(Bucket=s3_bucket)["Contents"]}
    assert listed == {"up/benchmarks/clean/benchmark.csv", *(f"up/{k}" for k in S3_KEYS)}
    up, wh = f"s3://{s3_bucket}/up", f"s3://{s3_bucket}/wh"
    summary = ingest(up, wh, IngestOptions(trigger=False))
    assert summary.runs_written == 1
    rejected = {r.key for r in summary.objects if r.status == "rejected"}
    assert rejected == set(S3_KEYS)
    assert summary.quarantined_by_reason == {"unsafe_key": len(S3_KEYS)}
    assert summary.rows_read == summary.runs_written + summary.quarantined_rows
    # Nothing was written outside the warehouse prefix; the next run completes as well.
    after = {o["Key"] for o in s3_client.list_objects_v2(Bucket=s3_bucket)["Contents"]}
    assert {k for k in after - listed if not k.startswith("wh/")} == set()
    again = ingest(up, wh, IngestOptions(trigger=False))
    assert again.commits == [] and again.objects_skipped == len(S3_KEYS) + 1
    assert_consistent(wh)
