"""The ObjectStore contract, run against LocalStore and S3Store alike, plus LocalStore specifics.

Stages only see the protocol, so every contract test runs on a local folder, on a bucket root
and on a bucket prefix (moto's real HTTP server, see tests/s3_fixtures.py).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from datetime import UTC
from pathlib import Path

import pytest

from kindex_etl.storage import (
    LocalStore,
    NotFound,
    ObjectStore,
    PreconditionFailed,
    open_store,
)
from kindex_etl.storage.s3 import S3Store

UNSAFE_KEYS = [
    "",
    "../x",
    "a/../../x",
    "/abs",
    "a//b",
    "a/./b",
    "./a",
    "a/",
    "a/..",
    "a\\b",
    "a\x00b",
    "a\nb",
]


@pytest.fixture(params=["local", "s3", "s3-prefixed"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "local":
        return open_store(str(tmp_path / "store"), create=True)
    bucket = request.getfixturevalue("s3_bucket_factory")()
    if request.param == "s3":
        return open_store(f"s3://{bucket}")
    return open_store(f"s3://{bucket}/tenant/warehouse")


@pytest.mark.parametrize("impl", [LocalStore, S3Store], ids=["local", "s3"])
def test_store_implements_the_protocol(impl: type) -> None:
    """Every method of ObjectStore, with the protocol's parameters (names, kinds, defaults)."""
    methods = [
        name
        for name, value in vars(ObjectStore).items()
        if callable(value) and not name.startswith("_")
    ]
    assert {"list", "head", "put_bytes", "move_file", "copy", "delete"} <= set(methods)
    for name in methods:
        want = inspect.signature(getattr(ObjectStore, name)).parameters
        got = inspect.signature(getattr(impl, name)).parameters
        assert [(p.name, p.kind, p.default) for p in got.values()] == [
            (p.name, p.kind, p.default) for p in want.values()
        ], f"{impl.__name__}.{name}"


def test_local_store_is_an_object_store(store: ObjectStore) -> None:
    assert isinstance(store, ObjectStore)


def test_round_trip_put_get_head(store: ObjectStore) -> None:
    etag = store.put_bytes("raw/2026/11/run.csv", b"a,b\n1,2\n")
    assert etag
    assert store.get_bytes("raw/2026/11/run.csv") == b"a,b\n1,2\n"
    info = store.head("raw/2026/11/run.csv")
    assert info is not None
    assert info.key == "raw/2026/11/run.csv"
    assert info.size == 8
    assert info.etag == etag
    assert '"' not in info.etag
    assert info.last_modified.tzinfo is not None
    assert info.last_modified.utcoffset() == UTC.utcoffset(None)


def test_empty_object(store: ObjectStore) -> None:
    store.put_bytes("empty", b"")
    assert store.get_bytes("empty") == b""
    info = store.head("empty")
    assert info is not None and info.size == 0


def test_overwrite_changes_etag(store: ObjectStore) -> None:
    first = store.put_bytes("k", b"one")
    second = store.put_bytes("k", b"two")
    assert first != second
    assert store.get_bytes("k") == b"two"


def test_missing_objects(store: ObjectStore) -> None:
    assert store.head("no/such/key") is None
    with pytest.raises(NotFound):
        store.get_bytes("no/such/key")
    with pytest.raises(NotFound):
        store.open_read("no/such/key")


def test_read_tail(store: ObjectStore) -> None:
    """The last bytes only (a Parquet footer), or the whole object when it is shorter."""
    store.put_bytes("data/f.parquet", b"0123456789")
    assert store.read_tail("data/f.parquet", 4) == b"6789"
    assert store.read_tail("data/f.parquet", 10) == b"0123456789"
    assert store.read_tail("data/f.parquet", 64 * 1024) == b"0123456789"
    with pytest.raises(NotFound):
        store.read_tail("no/such/key", 8)


def test_list_key_order_and_prefix_filtering(store: ObjectStore) -> None:
    # Chosen so that byte order differs from naive "folders first" order: '-' < '/' < 'b'.
    keys = ["ab", "a/y", "b/1", "a-z", "a/x/2", "a/x/1", "a.txt", "a/x/10"]
    for key in keys:
        store.put_bytes(key, key.encode())

    listed = list(store.list())
    assert [o.key for o in listed] == sorted(keys)
    assert all(o.size == len(o.key) for o in listed)
    assert all(o.etag and '"' not in o.etag for o in listed)
    assert {o.key: o.etag for o in listed}["a/y"] == store.head("a/y").etag  # type: ignore[union-attr]

    assert [o.key for o in store.list("a/")] == ["a/x/1", "a/x/10", "a/x/2", "a/y"]
    assert [o.key for o in store.list("a/x/1")] == ["a/x/1", "a/x/10"]
    assert [o.key for o in store.list("a")] == [
        "a-z",
        "a.txt",
        "a/x/1",
        "a/x/10",
        "a/x/2",
        "a/y",
        "ab",
    ]
    assert [o.key for o in store.list("b/")] == ["b/1"]
    assert list(store.list("nothing/")) == []


def test_list_empty_store(store: ObjectStore) -> None:
    assert list(store.list()) == []


def test_open_read_streams_in_chunks(store: ObjectStore) -> None:
    data = os.urandom(300_000)
    store.put_bytes("blob.bin", data)
    chunks = []
    with store.open_read("blob.bin") as fh:
        assert fh.readable()
        while chunk := fh.read(65_536):
            assert len(chunk) <= 65_536
            chunks.append(chunk)
    assert len(chunks) == 5
    assert b"".join(chunks) == data


def test_conditional_create(store: ObjectStore) -> None:
    etag = store.put_bytes("state/lock.json", b"first", if_none_match=True)
    with pytest.raises(PreconditionFailed):
        store.put_bytes("state/lock.json", b"second", if_none_match=True)
    assert store.get_bytes("state/lock.json") == b"first"
    assert store.head("state/lock.json").etag == etag  # type: ignore[union-attr]


def test_conditional_update(store: ObjectStore) -> None:
    v1 = store.put_bytes("state/manifest.json", b'{"v":1}')
    v2 = store.put_bytes("state/manifest.json", b'{"v":2}', if_match=v1)
    assert v2 != v1
    with pytest.raises(PreconditionFailed):
        store.put_bytes("state/manifest.json", b'{"v":"stale"}', if_match=v1)
    assert store.get_bytes("state/manifest.json") == b'{"v":2}'
    v3 = store.put_bytes("state/manifest.json", b'{"v":3}', if_match=v2)
    assert store.head("state/manifest.json").etag == v3  # type: ignore[union-attr]


def test_conditional_update_of_missing_object_fails(store: ObjectStore) -> None:
    etag = store.put_bytes("elsewhere", b"x")
    with pytest.raises(PreconditionFailed):
        store.put_bytes("state/missing.json", b"x", if_match=etag)
    assert store.head("state/missing.json") is None


def test_put_file(store: ObjectStore, tmp_path: Path) -> None:
    src = tmp_path / "part-0.parquet"
    src.write_bytes(os.urandom(123_457))
    etag = store.put_file("warehouse/docs/part-0.parquet", src)
    info = store.head("warehouse/docs/part-0.parquet")
    assert info is not None and info.etag == etag and info.size == 123_457
    assert store.get_bytes("warehouse/docs/part-0.parquet") == src.read_bytes()
    assert src.exists(), "put_file must leave the source file alone"


def test_copy(store: ObjectStore) -> None:
    store.put_bytes("staging/run-1/out.json", b"payload")
    store.copy("staging/run-1/out.json", "published/out.json")
    assert store.get_bytes("published/out.json") == b"payload"
    # A local store may rename instead; the source is allowed to vanish, not to change.
    src = store.head("staging/run-1/out.json")
    assert src is None or store.get_bytes("staging/run-1/out.json") == b"payload"


def test_copy_missing_source(store: ObjectStore) -> None:
    with pytest.raises(NotFound):
        store.copy("no/such", "dst")
    assert store.head("dst") is None


def test_delete(store: ObjectStore) -> None:
    store.put_bytes("a/b/c", b"x")
    store.put_bytes("a/keep", b"y")
    store.delete("a/b/c")
    assert store.head("a/b/c") is None
    assert [o.key for o in store.list()] == ["a/keep"]
    store.delete("a/b/c")  # already gone: not an error
    store.delete("never/existed")


@pytest.mark.parametrize("key", UNSAFE_KEYS)
def test_unsafe_keys_rejected(store: ObjectStore, key: str) -> None:
    store.put_bytes("ok", b"x")
    calls: list[Callable[[], object]] = [
        lambda: store.head(key),
        lambda: store.get_bytes(key),
        lambda: store.open_read(key),
        lambda: store.put_bytes(key, b"x"),
        lambda: store.put_bytes(key, b"x", if_none_match=True),
        lambda: store.put_file(key, Path(__file__)),
        lambda: store.copy("ok", key),
        lambda: store.copy(key, "ok2"),
        lambda: store.delete(key),
        lambda: store.local_path(key),
    ]
    for call in calls:
        with pytest.raises(ValueError):
            call()
    assert [o.key for o in store.list()] == ["ok"]


# -- LocalStore specifics ---------------------------------------------------------------------


@pytest.fixture
def local(tmp_path: Path) -> LocalStore:
    return LocalStore(tmp_path / "root", create=True)


def test_local_path(local: LocalStore) -> None:
    local.put_bytes("a/b.csv", b"x")
    path = local.local_path("a/b.csv")
    assert path == local.root / "a" / "b.csv"
    assert path is not None and path.read_bytes() == b"x"


def test_local_symlink_escape_rejected(local: LocalStore, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"s")
    (local.root / "link").symlink_to(outside)
    with pytest.raises(ValueError):
        local.get_bytes("link/secret")
    with pytest.raises(ValueError):
        local.put_bytes("link/new", b"x")
    assert not (outside / "new").exists()


def test_local_bookkeeping_files_not_listed(local: LocalStore) -> None:
    etag = local.put_bytes("state/m.json", b"1")
    local.put_bytes("state/m.json", b"2", if_match=etag)
    (local.root / "state" / ".kindex-tmp-leftover").write_bytes(b"partial")
    assert [o.key for o in local.list()] == ["state/m.json"]


def test_local_delete_tidies_empty_folders(local: LocalStore) -> None:
    local.put_bytes("a/b/c/d", b"x")
    local.delete("a/b/c/d")
    assert list(local.root.iterdir()) == []


def test_local_missing_root_without_create(tmp_path: Path) -> None:
    from kindex_etl.storage import StorageError

    with pytest.raises(StorageError):
        LocalStore(tmp_path / "absent")


def test_control_files_are_readable_like_data_files(tmp_path: Path) -> None:
    # Another user follows the exact-read route through _kindex/: it must be as readable as
    # the data files (which follow the umask).
    from kindex_etl import ingest
    from tests.helpers import seed_row, write_csv

    write_csv(tmp_path / "up" / "a.csv", [seed_row()])
    old = os.umask(0o022)
    try:
        ingest(str(tmp_path / "up"), str(tmp_path / "wh"))
    finally:
        os.umask(old)
    wh = tmp_path / "wh"
    modes = {
        p.relative_to(wh).as_posix(): p.stat().st_mode & 0o777
        for p in wh.rglob("*")
        if p.is_file() and not p.name.endswith(".kindex-lock")
    }
    assert "_kindex/snapshot.json" in modes and any(k.startswith("_kindex/log/") for k in modes)
    data = {m for k, m in modes.items() if k.endswith(".parquet")}
    assert data == {0o644}
    assert {m for k, m in modes.items() if k.startswith("_kindex/")} == {0o644}
