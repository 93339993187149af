"""The fault matrix: S3 errors, resets, delays and lost replies per operation, at a rate.

Every ingest under faults either completes or fails with one clear line; one more ingest
without faults converges to the warehouse a clean run makes. In-process and fast: retries are
botocore's standard mode (the store's own config), with its backoff sleeps scaled down.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from botocore.retries import standard

from kindex_etl import IngestOptions, ingest
from kindex_etl.errors import KindexError
from kindex_etl.storage.s3 import S3Store
from tests.s3_faults import KINDS, Faults
from tests.s3_fixtures import TEST_SECRET_ACCESS_KEY
from tests.warehouse import assert_consistent, data_objects, documents, put_objects, tables


def _upstream_objects() -> dict[str, bytes]:
    from tests.helpers import SEED_LINE
    from tests.warehouse import HEADER

    bad_row = SEED_LINE.replace("NVIDIA H100 80GB HBM3", "NVIDIA H9 Imaginary")
    first = HEADER + "\n".join([SEED_LINE, SEED_LINE.replace(",torch,", ",liger,"), bad_row])
    release = SEED_LINE.replace(",0.8.0", ",0.8.1").replace("21:03:42", "22:00:00")
    second = HEADER + release + "\n" + SEED_LINE + "\n"
    return {
        "benchmarks/aaa1111/benchmark.csv": (first + "\n").encode(),
        "benchmarks/bbb2222-v0.8.1/benchmark.csv": second.encode(),
        "benchmarks/bad/benchmark.csv": b"name,value\nx,1\n",
    }


_ACTIVE: list[Faults | None] = [None]


def _dispatch(request, **kwargs):
    active = _ACTIVE[0]
    return None if active is None else active(request, **kwargs)


@pytest.fixture
def faults(monkeypatch) -> Iterator[Callable[[Faults | None], None]]:
    """Install a Faults injector on every S3Store client made from now on."""
    original = S3Store.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        # Stores share a client per AWS environment: one registration (by unique id) each.
        self._client.meta.events.register(
            "before-send.s3", _dispatch, unique_id="kindex-test-faults"
        )

    monkeypatch.setattr(S3Store, "__init__", init)
    # The standard mode's backoff (up to 20 s for SlowDown) scaled down 100x: the same retry
    # decisions, without a minute of sleeping per case.
    delay = standard.ExponentialBackoff.delay_amount
    monkeypatch.setattr(
        standard.ExponentialBackoff,
        "delay_amount",
        lambda self, context: delay(self, context) / 100,
    )

    def use(f: Faults | None) -> None:
        _ACTIVE[0] = f

    try:
        yield use
    finally:
        _ACTIVE[0] = None


@pytest.fixture(scope="module")
def clean_run(moto_server, tmp_path_factory) -> dict:
    import uuid

    import boto3

    bucket = f"kindex-clean-{uuid.uuid4().hex[:12]}"
    boto3.session.Session().client("s3").create_bucket(Bucket=bucket)
    put_objects(f"s3://{bucket}/up", _upstream_objects())
    ingest(f"s3://{bucket}/up", f"s3://{bucket}/wh", IngestOptions(trigger=False))
    objects = data_objects(f"s3://{bucket}/wh")
    return {"tables": tables(objects), "documents": documents(objects)}


def _converges(make_bucket, faults, clean_run, injector: Faults) -> None:
    bucket = make_bucket()
    up, wh = f"s3://{bucket}/up", f"s3://{bucket}/wh"
    put_objects(up, _upstream_objects())
    faults(injector)
    try:
        ingest(up, wh, IngestOptions(trigger=False))
    except KindexError as exc:
        # The one line the CLI prints: no traceback, no secret.
        message = str(exc)
        assert message and "\n" not in message and TEST_SECRET_ACCESS_KEY not in message
    finally:
        faults(None)
    ingest(up, wh, IngestOptions(trigger=False))
    assert_consistent(wh)
    objects = data_objects(wh)
    got = tables(objects)
    assert got.keys() == clean_run["tables"].keys()
    for name, expected in clean_run["tables"].items():
        assert got[name].equals(expected), name
    assert documents(objects) == clean_run["documents"]


@pytest.mark.parametrize("op", ["GET", "PUT", "HEAD", "LIST"])
def test_every_kind_of_fault_on_one_operation(make_bucket, faults, clean_run, op):
    injector = Faults(rate=0.2, operations=(op,), seed=len(op))
    _converges(make_bucket, faults, clean_run, injector)


@pytest.mark.parametrize("kind", KINDS)
def test_one_kind_of_fault_on_every_operation(make_bucket, faults, clean_run, kind):
    injector = Faults(rate=0.2, kinds=(kind,), seed=KINDS.index(kind))
    _converges(make_bucket, faults, clean_run, injector)


@pytest.mark.parametrize("rate", [0.01, 0.05, 0.2])
def test_every_fault_on_every_operation(make_bucket, faults, clean_run, rate):
    _converges(make_bucket, faults, clean_run, Faults(rate=rate, seed=int(rate * 100)))


def test_faults_were_injected_and_retried(make_bucket, faults):
    # The matrix is only worth something if faults reach the store: count them on one run.
    injector = Faults(rate=0.3, seed=7)
    bucket = make_bucket()
    put_objects(f"s3://{bucket}/up", _upstream_objects())
    faults(injector)
    summary = ingest(f"s3://{bucket}/up", f"s3://{bucket}/wh", IngestOptions(trigger=False))
    faults(None)
    assert sum(injector.injected.values()) >= 5, injector.injected
    assert {k.split()[1] for k in injector.injected} >= {"500", "503", "reset", "lost"}
    assert summary.runs_written == 3 and summary.commits == [1]


def test_lost_reply_to_the_commit_record_on_s3(make_bucket, faults, clean_run):
    # The issue's case, on S3's semantics: the record's PUT lands, its reply is lost, the
    # SDK's retry meets our own record (412). The run counts the batch and advances the
    # snapshot itself; no second ingest is needed.
    from kindex_etl.load import layout
    from tests.warehouse import snapshot

    bucket = make_bucket()
    up, wh = f"s3://{bucket}/up", f"s3://{bucket}/wh"
    put_objects(up, _upstream_objects())
    injector = Faults(rate=1.0, kinds=("lost",), operations=("PUT",), match="_kindex/log/", limit=1)
    faults(injector)
    summary = ingest(up, wh, IngestOptions(trigger=False))
    faults(None)
    assert injector.injected == {"PUT lost": 1}
    assert summary.commits == [1] and summary.runs_written == 3
    assert (snapshot(wh) or {}).get("seq") == 1
    assert_consistent(wh)
    assert tables(data_objects(wh))[layout.RUNS].equals(clean_run["tables"][layout.RUNS])
