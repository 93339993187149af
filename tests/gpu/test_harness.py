"""Fetching the harness: PyPI JSON API, sha256 verification, the cache, local sdists."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from kindex_etl.gpu import harness
from kindex_etl.gpu.harness import HarnessError, fetch_sdist

from .conftest import STANDIN_VERSION, FakePyPI


def test_fetch_from_json_api_verifies_and_caches(fake_pypi: FakePyPI, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    sd = fetch_sdist(STANDIN_VERSION, cache=cache, pypi=fake_pypi.url)
    assert sd.sha256 == fake_pypi.sha256
    assert sd.path.parent == cache and sd.path.read_bytes() == fake_pypi.sdist.read_bytes()
    assert fake_pypi.requests == [
        "/simple/liger-kernel/",
        f"/files/{fake_pypi.sdist.name}",
    ]
    # Second time: the JSON API is asked again (for the digest), the file is not downloaded.
    again = fetch_sdist(STANDIN_VERSION, cache=cache, pypi=fake_pypi.url)
    assert again.path == sd.path and again.sha256 == sd.sha256
    assert fake_pypi.requests.count(f"/files/{fake_pypi.sdist.name}") == 1


def test_pypi_url_from_environment(
    fake_pypi: FakePyPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KINDEX_PYPI_URL", fake_pypi.url)
    monkeypatch.setenv("KINDEX_SDIST_CACHE", str(tmp_path / "envcache"))
    sd = fetch_sdist(STANDIN_VERSION)
    assert sd.path.parent == tmp_path / "envcache"


def test_wrong_digest_is_refused_and_not_cached(fake_pypi: FakePyPI, tmp_path: Path) -> None:
    fake_pypi.advertised_sha256 = "0" * 64
    with pytest.raises(HarnessError, match="sha256"):
        fetch_sdist(STANDIN_VERSION, cache=tmp_path / "cache", pypi=fake_pypi.url)
    assert not list((tmp_path / "cache").iterdir())


def test_corrupt_cache_entry_is_replaced(fake_pypi: FakePyPI, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / fake_pypi.sdist.name).write_bytes(b"not the sdist")
    sd = fetch_sdist(STANDIN_VERSION, cache=cache, pypi=fake_pypi.url)
    assert sd.sha256 == fake_pypi.sha256
    assert hashlib.sha256(sd.path.read_bytes()).hexdigest() == fake_pypi.sha256


def test_unknown_version_is_a_clear_error(fake_pypi: FakePyPI, tmp_path: Path) -> None:
    with pytest.raises(HarnessError, match="cannot read"):
        fetch_sdist("0.0.1", cache=tmp_path / "cache", pypi=fake_pypi.url)


def test_local_sdist_path_and_file_url(standin_sdist: Path) -> None:
    digest = hashlib.sha256(standin_sdist.read_bytes()).hexdigest()
    by_path = fetch_sdist(STANDIN_VERSION, sdist=standin_sdist)
    by_url = fetch_sdist(STANDIN_VERSION, sdist=standin_sdist.as_uri(), sha256=digest)
    assert by_path.sha256 == by_url.sha256 == digest
    with pytest.raises(HarnessError, match="sha256"):
        fetch_sdist(STANDIN_VERSION, sdist=standin_sdist, sha256="f" * 64)
    with pytest.raises(HarnessError, match="not found"):
        fetch_sdist(STANDIN_VERSION, sdist=standin_sdist.parent / "missing.tar.gz")


def test_extract_finds_the_harness_and_refuses_escapes(standin_sdist: Path, tmp_path: Path) -> None:
    root = harness.extract_sdist(standin_sdist, tmp_path / "x")
    assert (root / "benchmark" / "scripts" / "benchmark_rms_norm.py").is_file()
    assert harness.install_liger(STANDIN_VERSION, tmp_path / "site", sdist_root=root) == (
        root / "src"
    )

    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as tar:
        info = tarfile.TarInfo("../outside.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    with pytest.raises(HarnessError):
        harness.extract_sdist(evil, tmp_path / "y")
    assert not (tmp_path / "outside.txt").exists()
