"""Credentials from an AWS profile (`AWS_PROFILE` with `~/.aws/credentials`, or
`AWS_SHARED_CREDENTIALS_FILE`) reach the Delta publish too: delta-rs's own chain knows no
profiles, so `delta.storage_options` hands it what boto3 resolved (found by review: every ingest
committed and then failed to publish)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.s3_fixtures import TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY

SCRIPT = """
import sys
from deltalake import DeltaTable
from kindex_etl.load import delta
from kindex_etl.storage import open_store
wh = sys.argv[1]
print("boto3 sees the snapshot:", open_store(wh).head("_kindex/snapshot.json") is not None)
sys.stdout.flush()
dt = DeltaTable(wh + "/benchmark_runs", storage_options=delta.storage_options(open_store(wh)))
# The log and its file list, read from S3 with the profile's keys. Not to_pyarrow_table():
# deltalake 1.6 then aborts at exit one time in two (docs/reading.md).
print("rows", sum(dt.get_add_actions(flatten=True).column("num_records").to_pylist()))
"""


@pytest.mark.parametrize("where", ["AWS_SHARED_CREDENTIALS_FILE", "HOME"])
def test_delta_reads_with_credentials_from_a_profile(
    tmp_path: Path, s3_bucket: str, where: str
) -> None:
    from kindex_etl import IngestOptions, ingest
    from tests.warehouse import put_objects, synthetic_csv

    upstream, wh = str(tmp_path / "up"), f"s3://{s3_bucket}/warehouse"
    put_objects(upstream, {"benchmarks/0000/benchmark.csv": synthetic_csv(["0.8.0"])})
    ingest(upstream, wh, IngestOptions(trigger=False))

    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    creds = home / ".aws" / "credentials"
    creds.write_text(
        f"[kindex]\naws_access_key_id = {TEST_ACCESS_KEY_ID}\n"
        f"aws_secret_access_key = {TEST_SECRET_ACCESS_KEY}\n"
    )
    (home / ".aws" / "config").write_text("[profile kindex]\nregion = us-east-1\n")
    gone = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_CONFIG_FILE")
    env = {k: v for k, v in os.environ.items() if k not in gone}
    env["AWS_PROFILE"] = "kindex"
    if where == "HOME":
        env["HOME"] = str(home)
        env.pop("AWS_SHARED_CREDENTIALS_FILE", None)
    else:
        env["AWS_SHARED_CREDENTIALS_FILE"] = str(creds)
        env["AWS_CONFIG_FILE"] = str(home / ".aws" / "config")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, wh], env=env, capture_output=True, text=True, timeout=90
    )
    assert TEST_SECRET_ACCESS_KEY not in done.stderr
    assert "boto3 sees the snapshot: True" in done.stdout  # the rest of kindex-etl works
    assert done.returncode == 0, done.stderr[-2000:]
    assert "rows " in done.stdout


INGEST = """
import sys
from kindex_etl import IngestOptions, ingest
ingest(sys.argv[2], sys.argv[1], IngestOptions(trigger=False))
"""


def test_an_ingest_with_profile_credentials_commits_and_publishes(
    tmp_path: Path, s3_bucket: str
) -> None:
    from deltalake import DeltaTable

    from kindex_etl.load import delta, layout
    from kindex_etl.load.warehouse import open_warehouse
    from kindex_etl.storage import open_store
    from tests.warehouse import put_objects, synthetic_csv

    upstream, wh = str(tmp_path / "up"), f"s3://{s3_bucket}/warehouse"
    put_objects(upstream, {"benchmarks/0000/benchmark.csv": synthetic_csv(["0.8.0"])})
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text(
        f"[kindex]\naws_access_key_id = {TEST_ACCESS_KEY_ID}\n"
        f"aws_secret_access_key = {TEST_SECRET_ACCESS_KEY}\n"
    )
    gone = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_CONFIG_FILE")
    env = {k: v for k, v in os.environ.items() if k not in gone}
    env["AWS_PROFILE"] = "kindex"
    env["AWS_SHARED_CREDENTIALS_FILE"] = str(home / ".aws" / "credentials")
    done = subprocess.run(
        [sys.executable, "-c", INGEST, wh, upstream],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert TEST_SECRET_ACCESS_KEY not in done.stderr + done.stdout
    warehouse = open_warehouse(wh)
    warehouse.refresh()
    assert warehouse.head == 1  # committed through boto3
    runs = delta.open_table(open_store(wh), layout.RUNS)
    assert done.returncode == 0, done.stderr[-1500:]
    assert isinstance(runs, DeltaTable)
    assert runs.transaction_version(delta.LOG_APP) == 1
