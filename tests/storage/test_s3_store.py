"""S3Store against moto's real HTTP server, through boto3 and the standard AWS chain.

The contract shared with LocalStore lives in test_local_store.py (parametrized over both);
this file holds what only S3 has: prefixes in the URL, multipart uploads, streaming bodies,
error mapping and what error messages may show.
"""

from __future__ import annotations

import io
import os
import re
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.csv as pacsv
import pytest

from kindex_etl.storage import NotFound, PreconditionFailed, StorageError, open_store
from kindex_etl.storage.s3 import S3Store
from tests.s3_fixtures import TEST_ACCESS_KEY_ID, TEST_SECRET_ACCESS_KEY

MIB = 1024 * 1024


def _no_secrets(exc: BaseException) -> None:
    text = "".join(traceback.format_exception(exc)) + repr(exc) + str(exc)
    assert TEST_SECRET_ACCESS_KEY not in text
    assert TEST_ACCESS_KEY_ID not in text
    assert "Signature" not in text and "Authorization" not in text


# -- URLs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "bucket", "prefix", "canonical"),
    [
        ("s3://my-bucket", "my-bucket", "", "s3://my-bucket"),
        ("s3://my-bucket/", "my-bucket", "", "s3://my-bucket"),
        ("s3://my-bucket/wh", "my-bucket", "wh", "s3://my-bucket/wh"),
        ("s3://my-bucket/a/b/c/", "my-bucket", "a/b/c", "s3://my-bucket/a/b/c"),
    ],
)
def test_from_url(url: str, bucket: str, prefix: str, canonical: str) -> None:
    store = S3Store.from_url(url)
    assert (store.bucket, store.prefix, store.url) == (bucket, prefix, canonical)
    assert store.local_path("x") is None


@pytest.mark.parametrize(
    "url",
    [
        "s3://",
        "s3:///prefix",
        "s3://bkt/../x",
        "s3://bkt/a//b",
        "s3://bkt//a",
        "s3://bkt/a//",
        "s3://bkt/a/./b",
        "s3://bkt/p?X-Amz-Signature=abc",
        "s3://bkt/p#frag",
        "s3://bkt\\x/p",
    ],
)
def test_from_url_rejects_bad_urls(url: str) -> None:
    with pytest.raises(StorageError) as info:
        S3Store.from_url(url)
    assert "X-Amz-Signature" not in str(info.value)


def test_from_url_never_echoes_userinfo() -> None:
    with pytest.raises(StorageError) as info:
        S3Store.from_url("s3://AKIAEXAMPLE:hunter2secret@bucket/p")
    assert "hunter2secret" not in str(info.value)
    assert "AKIAEXAMPLE" not in str(info.value)


def test_open_store_s3(moto_server: str) -> None:
    store = open_store("s3://some-bucket/prefix")
    assert isinstance(store, S3Store)
    assert store.url == "s3://some-bucket/prefix"


# -- prefixes -----------------------------------------------------------------------------------


def test_prefix_maps_keys_and_isolates(s3_client, s3_bucket: str) -> None:
    store = S3Store.from_url(f"s3://{s3_bucket}/team/wh")
    store.put_bytes("docs/2026/11/30/part-0.json", b"{}")
    # What lands in the bucket is prefix + key, nothing more.
    got = s3_client.get_object(Bucket=s3_bucket, Key="team/wh/docs/2026/11/30/part-0.json")
    assert got["Body"].read() == b"{}"

    # Neighbours that share the prefix as a string but not as a folder stay invisible.
    for key in ("team/whx/leak", "team/wh", "other/docs/x", "team/w"):
        s3_client.put_object(Bucket=s3_bucket, Key=key, Body=b"no")
    s3_client.put_object(Bucket=s3_bucket, Key="team/wh/docs/a", Body=b"yes")

    assert [o.key for o in store.list()] == ["docs/2026/11/30/part-0.json", "docs/a"]
    assert [o.key for o in store.list("docs/2")] == ["docs/2026/11/30/part-0.json"]
    with pytest.raises(ValueError):
        store.head("../whx/leak")

    root = S3Store.from_url(f"s3://{s3_bucket}")
    assert [o.key for o in root.list("team/")] == [
        "team/w",
        "team/wh",
        "team/wh/docs/2026/11/30/part-0.json",
        "team/wh/docs/a",
        "team/whx/leak",
    ]


@pytest.mark.slow
def test_list_paginates(s3_client, s3_bucket: str) -> None:
    # Past ListObjectsV2's 1,000-key page, listed under a prefix so the pages must be followed.
    keys = [f"k/{i:04d}" for i in range(1003)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(
            pool.map(lambda k: s3_client.put_object(Bucket=s3_bucket, Key=f"p/{k}", Body=b""), keys)
        )
    s3_client.put_object(Bucket=s3_bucket, Key="p/z", Body=b"")
    store = S3Store.from_url(f"s3://{s3_bucket}/p")
    assert [o.key for o in store.list("k/")] == keys
    assert [o.key for o in store.list()][-2:] == ["k/1002", "z"]


def test_etag_matches_boto3(s3_client, s3_bucket: str) -> None:
    store = S3Store.from_url(f"s3://{s3_bucket}")
    etag = store.put_bytes("x", b"hello")
    raw = s3_client.head_object(Bucket=s3_bucket, Key="x")["ETag"]
    assert raw == f'"{etag}"'
    # An ETag given back with its quotes (as boto3 shows it) works as well.
    store.put_bytes("x", b"again", if_match=raw)


def test_both_conditions_rejected(s3_bucket: str) -> None:
    store = S3Store.from_url(f"s3://{s3_bucket}")
    with pytest.raises(ValueError):
        store.put_bytes("x", b"", if_none_match=True, if_match="abc")


# -- streaming reads ----------------------------------------------------------------------------


def test_streaming_read_of_multi_mb_object(s3_client, s3_bucket: str) -> None:
    data = os.urandom(6 * MIB + 12_345)
    s3_client.put_object(Bucket=s3_bucket, Key="big.bin", Body=data)
    store = S3Store.from_url(f"s3://{s3_bucket}")
    with store.open_read("big.bin") as fh:
        first = fh.read(64 * 1024)
        assert first == data[: 64 * 1024]
        # The reader pulls from the socket as asked, not the whole object up front.
        assert fh.raw._pos <= 2 * MIB  # type: ignore[attr-defined]
        assert fh.tell() == 64 * 1024
        rest = bytearray(first)
        while chunk := fh.read(1_000_003):
            rest += chunk
    assert bytes(rest) == data
    assert fh.closed
    assert store.get_bytes("big.bin") == data


def test_pyarrow_reads_csv_from_stream(s3_bucket: str) -> None:
    store = S3Store.from_url(f"s3://{s3_bucket}/raw")
    lines = ["kernel,metric,x,y"] + [f"rms_norm,speed,{i},{i * 0.5}" for i in range(200_000)]
    store.put_bytes("bench.csv", ("\n".join(lines) + "\n").encode())
    rows = 0
    with store.open_read("bench.csv") as fh:
        reader = pacsv.open_csv(fh, read_options=pacsv.ReadOptions(block_size=256 * 1024))
        batches = 0
        for batch in reader:
            rows += batch.num_rows
            batches += 1
    assert rows == 200_000
    assert batches > 1


def test_read_resumes_after_dropped_connection(s3_bucket: str) -> None:
    data = os.urandom(3 * MIB)
    store = S3Store.from_url(f"s3://{s3_bucket}")
    store.put_bytes("blob", data)
    with store.open_read("blob") as fh:
        head = fh.read(100_000)
        # Drop the socket under the reader, as a reset connection would.
        fh.raw._body.close()  # type: ignore[attr-defined]
        rest = fh.read()
    assert head + rest == data


def test_read_refuses_to_splice_versions(s3_bucket: str) -> None:
    store = S3Store.from_url(f"s3://{s3_bucket}")
    store.put_bytes("blob", b"a" * (3 * MIB))
    with store.open_read("blob") as fh:
        fh.read(100_000)
        store.put_bytes("blob", b"b" * (3 * MIB))
        fh.raw._body.close()  # type: ignore[attr-defined]
        with pytest.raises(StorageError, match="changed while reading"):
            fh.read()


# -- managed transfers --------------------------------------------------------------------------


def test_put_file_large_goes_multipart_and_copy_keeps_source(
    s3_client, s3_bucket: str, tmp_path: Path
) -> None:
    src = tmp_path / "big.parquet"
    size = 65 * MIB
    with src.open("wb") as fh:
        # Mostly sparse: the test is about part boundaries, not entropy.
        fh.write(b"PAR1")
        fh.truncate(size - 4)
        fh.seek(0, io.SEEK_END)
        fh.write(b"PAR1")
    store = S3Store.from_url(f"s3://{s3_bucket}/wh")

    etag = store.put_file("docs/part-0.parquet", src)
    raw = s3_client.head_object(Bucket=s3_bucket, Key="wh/docs/part-0.parquet")
    assert raw["ContentLength"] == size
    assert raw["ETag"].strip('"') == etag
    match = re.fullmatch(r"[0-9a-f]{32}-(\d+)", etag)
    assert match, f"not a multipart ETag: {etag}"
    assert int(match.group(1)) > 1

    store.copy("docs/part-0.parquet", "published/part-0.parquet")
    copied = store.head("published/part-0.parquet")
    assert copied is not None and copied.size == size
    assert store.head("docs/part-0.parquet") is not None
    with store.open_read("published/part-0.parquet") as fh:
        assert fh.read(4) == b"PAR1"


def test_small_put_file_is_single_part(s3_bucket: str, tmp_path: Path) -> None:
    src = tmp_path / "small.json"
    src.write_bytes(b'{"a":1}')
    etag = S3Store.from_url(f"s3://{s3_bucket}").put_file("small.json", src)
    assert re.fullmatch(r"[0-9a-f]{32}", etag)


def test_put_file_missing_source(s3_bucket: str, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        S3Store.from_url(f"s3://{s3_bucket}").put_file("x", tmp_path / "absent")


def test_copy_onto_itself_is_a_no_op(s3_bucket: str) -> None:
    store = S3Store.from_url(f"s3://{s3_bucket}")
    etag = store.put_bytes("x", b"1")
    store.copy("x", "x")
    assert store.head("x").etag == etag  # type: ignore[union-attr]


# -- errors -------------------------------------------------------------------------------------


def test_wrong_bucket_errors_name_it_and_leak_nothing(moto_server: str, tmp_path: Path) -> None:
    store = S3Store.from_url("s3://kindex-no-such-bucket/p")
    src = tmp_path / "f"
    src.write_bytes(b"x")
    calls: list[Callable[[], object]] = [
        lambda: list(store.list()),
        lambda: store.get_bytes("k"),
        lambda: store.put_bytes("k", b"x"),
        lambda: store.put_bytes("k", b"x", if_none_match=True),
        lambda: store.put_file("k", src),
        lambda: store.delete("k"),
    ]
    for call in calls:
        with pytest.raises(StorageError) as info:
            call()
        assert not isinstance(info.value, PreconditionFailed)
        assert "kindex-no-such-bucket" in str(info.value)
        assert "NoSuchBucket" in str(info.value)
        _no_secrets(info.value)


def test_not_found_message(s3_bucket: str) -> None:
    store = S3Store.from_url(f"s3://{s3_bucket}/p")
    with pytest.raises(NotFound) as info:
        store.get_bytes("a/b")
    assert f"s3://{s3_bucket}/p/a/b" in str(info.value)
    _no_secrets(info.value)
    with pytest.raises(PreconditionFailed) as pf:
        store.put_bytes("c", b"", if_none_match=True)
        store.put_bytes("c", b"", if_none_match=True)
    assert "PreconditionFailed" in str(pf.value)
    _no_secrets(pf.value)


def test_no_credentials(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    for name in (
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    store = S3Store.from_url("s3://any-bucket")
    with pytest.raises(StorageError, match="no AWS credentials found in the standard chain"):
        store.get_bytes("k")
