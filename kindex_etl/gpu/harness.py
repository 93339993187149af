"""The liger-kernel harness of one release: fetch its sdist, verify it, cache it, unpack it.

The benchmark scripts and their data file ship only in the source distribution, so a re-run
starts from the sdist of exactly the version it measures:

- `sdist_info` asks the index's Simple API (PEP 691 JSON, `<index>/liger-kernel/`) for the
  sdist's URL and sha256 digest: the API every mirror and proxy serves (PyPI's own
  `/pypi/<project>/<version>/json` often is not proxied). The index URL is configurable
  (`pypi_url=`, `KINDEX_PYPI_URL`) so tests can serve a fake index from 127.0.0.1.
- `fetch_sdist` downloads it (any URL urllib opens: https://, http://, file://), checks the
  sha256 and keeps it in a cache directory; a cached file is used again only when its sha256
  still matches. A local sdist path is also accepted (no network: what the GPU machine uses);
  its sha256 is recorded, and checked when one is given.
- `extract_sdist` unpacks it safely (tarfile's "data" filter: no absolute paths, no links out).
- `install_liger` makes that exact version importable for the scripts, in a directory that goes
  first on PYTHONPATH: `pip install --no-deps --target DIR <wheel>` or `liger-kernel==V` from an
  index, or, with no pip and no network, the sdist's own `src/` (it carries
  `liger_kernel.egg-info`, so `importlib.metadata.version("liger-kernel")` is right too).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from kindex_etl.errors import HarnessError

PROJECT = "liger-kernel"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"


@dataclass(frozen=True)
class Sdist:
    version: str
    path: Path
    sha256: str
    source: str  # where it came from: a URL or a local path


def pypi_url(explicit: str | None = None) -> str:
    from kindex_etl.config import settings

    return (explicit or settings().pypi_url).rstrip("/")


def cache_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    from kindex_etl.config import settings

    raw = explicit or settings().sdist_cache
    return Path(raw).expanduser()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sdist_info(version: str, *, pypi: str | None = None, timeout: float = 60.0) -> tuple[str, str]:
    """(download URL, sha256) of the release's sdist, from the index's Simple API (PEP 691)."""
    url = f"{pypi_url(pypi)}/{PROJECT}/"
    request = urllib.request.Request(url, headers={"Accept": SIMPLE_JSON})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310 (configured)
            index = json.load(resp)
    except (OSError, ValueError) as exc:
        raise HarnessError(f"cannot read {url}: {exc}") from exc
    wanted = f"liger_kernel-{version}.tar.gz"
    for entry in index.get("files", []):
        if entry.get("filename") in (wanted, f"{PROJECT}-{version}.tar.gz"):
            digest = (entry.get("hashes") or {}).get("sha256")
            if not digest:
                raise HarnessError(f"{url}: the sdist entry has no sha256 digest")
            return urllib.parse.urljoin(url, str(entry["url"])), str(digest).lower()
    raise HarnessError(f"cannot read {url}: liger-kernel {version} has no sdist there")


def _download(url: str, dest: Path, timeout: float) -> None:
    tmp = dest.with_name(dest.name + f".part-{os.getpid()}")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp, tmp.open("wb") as out:  # noqa: S310
            shutil.copyfileobj(resp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise HarnessError(f"cannot download {url}: {exc}") from exc
    os.replace(tmp, dest)


def fetch_sdist(
    version: str,
    *,
    sdist: str | os.PathLike[str] | None = None,
    sha256: str | None = None,
    cache: str | os.PathLike[str] | None = None,
    pypi: str | None = None,
    timeout: float = 300.0,
) -> Sdist:
    """The verified sdist of `version`: a local file if given, else the cache, else PyPI."""
    if sdist is not None:
        raw = os.fspath(sdist)
        parsed = urlparse(raw)
        if parsed.scheme in ("http", "https"):
            return _fetch_into_cache(version, raw, sha256, cache, timeout)
        path = Path(parsed.path if parsed.scheme == "file" else raw)
        if not path.is_file():
            raise HarnessError(f"sdist not found: {path}")
        digest = sha256_file(path)
        if sha256 and digest != sha256.lower():
            raise HarnessError(f"{path}: sha256 {digest} is not the expected {sha256}")
        return Sdist(version=version, path=path.resolve(), sha256=digest, source=str(path))
    url, expected = sdist_info(version, pypi=pypi)
    if sha256 and sha256.lower() != expected:
        raise HarnessError(f"PyPI's sha256 {expected} is not the expected {sha256}")
    return _fetch_into_cache(version, url, expected, cache, timeout)


def _fetch_into_cache(
    version: str,
    url: str,
    expected: str | None,
    cache: str | os.PathLike[str] | None,
    timeout: float,
) -> Sdist:
    folder = cache_dir(cache)
    folder.mkdir(parents=True, exist_ok=True)
    name = Path(urlparse(url).path).name or f"liger_kernel-{version}.tar.gz"
    dest = folder / name
    if dest.is_file():
        digest = sha256_file(dest)
        if expected is None or digest == expected:
            return Sdist(version=version, path=dest, sha256=digest, source=url)
        dest.unlink()  # a corrupt or substituted cache entry is never used
    _download(url, dest, timeout)
    digest = sha256_file(dest)
    if expected is not None and digest != expected:
        dest.unlink(missing_ok=True)
        raise HarnessError(f"{url}: sha256 {digest} is not the published {expected}")
    return Sdist(version=version, path=dest, sha256=digest, source=url)


def extract_sdist(sdist: Sdist | Path, dest: Path) -> Path:
    """Unpack into `dest`; returns the sdist's root folder (the one with benchmark/)."""
    path = sdist.path if isinstance(sdist, Sdist) else Path(sdist)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(path, "r:*") as tar:
            tar.extractall(dest, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise HarnessError(f"cannot unpack {path}: {exc}") from exc
    roots = [p for p in dest.iterdir() if (p / "benchmark" / "scripts").is_dir()]
    if len(roots) != 1:
        raise HarnessError(f"{path}: no single folder with benchmark/scripts/ in the sdist")
    return roots[0]


def install_liger(
    version: str,
    target: Path,
    *,
    sdist_root: Path | None = None,
    wheel: str | os.PathLike[str] | None = None,
    use_pip_index: bool = False,
    python: str | None = None,
) -> Path:
    """Make liger-kernel `version` importable; returns the folder to put first on PYTHONPATH.

    Order: an explicit wheel (pip --no-deps --target), then `liger-kernel==V` from the index
    when asked (needs network), else the sdist's `src/`.
    """
    py = python or sys.executable
    if wheel is not None or use_pip_index:
        spec = os.fspath(wheel) if wheel is not None else f"{PROJECT}=={version}"
        target.mkdir(parents=True, exist_ok=True)
        cmd = [py, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target"]
        cmd += [str(target), spec]
        if wheel is not None:
            cmd.insert(4, "--no-index")
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise HarnessError(f"pip could not install {spec}: {proc.stderr.strip()[-2000:]}")
        return target
    if sdist_root is None:
        raise HarnessError("no wheel, no index and no sdist to install liger-kernel from")
    src = sdist_root / "src"
    if not (src / "liger_kernel").is_dir():
        raise HarnessError(f"{sdist_root}: no src/liger_kernel in the sdist")
    return src


def scratch_dir(prefix: str = "kindex-rerun-") -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))
