"""Least privilege: an ingest runs with exactly the policy in deploy/iam, IAM enforced by moto.

Setup (buckets, the user, its policy and key, upstream objects) runs with enforcement off;
then moto's server is switched to authenticate and authorize every request from the first
(`INITIAL_NO_AUTH_ACTION_COUNT` = 0 through its /moto-api/reset-auth), and the ingest runs
with the test user's key only.
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from string import Template

import boto3
import pytest
from botocore.exceptions import ClientError

from kindex_etl import IngestOptions, ingest
from kindex_etl.errors import StorageError
from kindex_etl.storage import open_store
from tests.helpers import REPO, SEED_LINE
from tests.warehouse import HEADER, assert_consistent, put_objects

POLICY = REPO / "deploy" / "iam" / "ingest-worker-policy.json"


def _no_auth_action_count(endpoint: str, count: str) -> None:
    """Set the server's INITIAL_NO_AUTH_ACTION_COUNT (and restart its count of requests)."""
    # Not form-encoded (urllib's default): the server reads the raw body.
    request = urllib.request.Request(
        f"{endpoint}/moto-api/reset-auth",
        data=count.encode(),
        method="POST",
        headers={"Content-Type": "text/plain"},
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        assert reply.status == 200


@pytest.fixture
def worker(moto_server, monkeypatch):
    """Buckets, upstream objects and a user holding only the deploy policy; IAM then enforced."""
    suffix = uuid.uuid4().hex[:10]
    names = {
        "UPSTREAM_BUCKET": f"kindex-up-{suffix}",
        "UPSTREAM_PREFIX": "liger",
        "WAREHOUSE_BUCKET": f"kindex-wh-{suffix}",
        "WAREHOUSE_PREFIX": "kindex/wh",
    }
    admin = boto3.session.Session()
    s3, iam = admin.client("s3"), admin.client("iam")
    for bucket in (names["UPSTREAM_BUCKET"], names["WAREHOUSE_BUCKET"]):
        s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=names["UPSTREAM_BUCKET"], Key="private/secret.csv", Body=b"x")
    upstream = f"s3://{names['UPSTREAM_BUCKET']}/liger"
    put_objects(
        upstream,
        {
            "benchmarks/abc/benchmark.csv": (HEADER + SEED_LINE + "\n").encode(),
            "benchmarks/bad/benchmark.csv": b"name,value\nx,1\n",
        },
    )
    user = f"kindex-ingest-{suffix}"
    iam.create_user(UserName=user)
    policy = Template(POLICY.read_text()).substitute(names)
    json.loads(policy)  # still JSON after substitution
    iam.put_user_policy(UserName=user, PolicyName="ingest-worker", PolicyDocument=policy)
    key = iam.create_access_key(UserName=user)["AccessKey"]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
    # From the next request on, every request is authenticated and authorized.
    _no_auth_action_count(moto_server, "0")
    try:
        yield names, upstream, f"s3://{names['WAREHOUSE_BUCKET']}/kindex/wh"
    finally:
        _no_auth_action_count(moto_server, "inf")


def test_ingest_runs_with_exactly_the_deploy_policy(worker):
    _, upstream, warehouse = worker
    summary = ingest(upstream, warehouse, IngestOptions(trigger=False))
    assert summary.runs_written == 1 and summary.objects_rejected == 1
    assert summary.commits == [1]
    again = ingest(upstream, warehouse, IngestOptions(trigger=False))
    assert again.commits == [] and again.objects_skipped == 2
    assert_consistent(warehouse)


def test_the_policy_allows_nothing_else(worker):
    names, _, _ = worker
    client = boto3.session.Session().client("s3")

    def denied(call, **kwargs) -> None:
        with pytest.raises(ClientError) as caught:
            call(**kwargs)
        assert caught.value.response["Error"]["Code"] == "AccessDenied", kwargs

    up, wh = names["UPSTREAM_BUCKET"], names["WAREHOUSE_BUCKET"]
    denied(client.put_object, Bucket=up, Key="liger/benchmarks/x.csv", Body=b"x")
    denied(client.delete_object, Bucket=up, Key="liger/benchmarks/abc/benchmark.csv")
    denied(client.get_object, Bucket=up, Key="private/secret.csv")
    # (Listing outside the prefixes is limited by the policy's s3:prefix conditions, which AWS
    # evaluates and moto 5.2 does not: not asserted here.)
    denied(client.put_object, Bucket=wh, Key="elsewhere/x", Body=b"x")
    denied(client.create_bucket, Bucket=f"{wh}-more")
    # And through the store: a write outside the granted prefix is refused, in one line.
    with pytest.raises(StorageError, match="AccessDenied"):
        open_store(f"s3://{wh}/other").put_bytes("x", b"x")
