"""Fixtures for the GPU re-run tests, all on CPU and on 127.0.0.1.

`standin_sdist` packs tests/gpu/standin_sdist/ (a STAND-IN for the liger-kernel sdist, named
liger_kernel-9.9.9: its benchmark scripts write rows in the upstream schema without a GPU) into
a tar.gz; `build_standin_sdist(dest, version)` packs it as another version (the baseline 9.9.8).
`standin_gpus` puts tests/gpu/standin_torch (a STAND-IN torch that reports GPUs) on the
PYTHONPATH of the processes a test starts. `fake_pypi` serves a PyPI-like Simple API and both
sdists from a tiny http.server.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import tarfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

STANDIN_DIR = Path(__file__).parent / "standin_sdist"
STANDIN_VERSION = "9.9.9"
BASELINE_VERSION = "9.9.8"
STANDIN_ROOT = f"liger_kernel-{STANDIN_VERSION}"
STANDIN_TORCH = Path(__file__).parent / "standin_torch"
# The device-time protocol's stand-ins: a torch with a simulated device, triton's do_bench, and
# an sdist whose script times its points with do_bench inside upstream's run_benchmarks loop.
STANDIN_DEVICE = Path(__file__).parent / "standin_device"
STANDIN_DEVICE_SDIST = STANDIN_DEVICE / "sdist"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def build_standin_sdist(
    dest: Path, version: str = STANDIN_VERSION, source: Path = STANDIN_DIR
) -> Path:
    """`source`/liger_kernel-9.9.9 (default tests/gpu/standin_sdist) as
    `dest/liger_kernel-<version>.tar.gz`."""
    dest.mkdir(parents=True, exist_ok=True)
    root = f"liger_kernel-{version}"
    out = dest / f"{root}.tar.gz"

    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if "__pycache__" in info.name:
            return None
        info.name = info.name.replace(STANDIN_ROOT, root, 1)
        return None if info.name == f"{root}/PKG-INFO" else info

    # Real sdists carry src/liger_kernel.egg-info/PKG-INFO (importlib.metadata reads the version
    # there). The repository's .gitignore drops *.egg-info/, so it is added here from PKG-INFO.
    text = (source / STANDIN_ROOT / "PKG-INFO").read_text()
    pkg_info = text.replace(f"Version: {STANDIN_VERSION}", f"Version: {version}").encode()
    with tarfile.open(out, "w:gz") as tar:
        tar.add(source / STANDIN_ROOT, arcname=STANDIN_ROOT, filter=clean)
        for name in (f"{root}/PKG-INFO", f"{root}/src/liger_kernel.egg-info/PKG-INFO"):
            info = tarfile.TarInfo(name)
            info.size = len(pkg_info)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(pkg_info))
    return out


@pytest.fixture
def standin_gpus(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Call with N: the processes this test starts see N stand-in GPUs (NVIDIA H200, 9.0)."""

    def use(count: int) -> None:
        monkeypatch.setenv("PYTHONPATH", str(STANDIN_TORCH))
        monkeypatch.setenv("STANDIN_GPU_COUNT", str(count))
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    return use


@pytest.fixture
def baseline_sdist(tmp_path: Path) -> Path:
    return build_standin_sdist(tmp_path / "dist", BASELINE_VERSION)


@pytest.fixture
def standin_sdist(tmp_path: Path) -> Path:
    return build_standin_sdist(tmp_path / "dist")


@dataclass
class FakePyPI:
    url: str  # the JSON API base, as KINDEX_PYPI_URL
    sdist: Path
    sha256: str
    requests: list[str] = field(default_factory=list)
    advertised_sha256: str | None = None  # what the JSON says, if not the truth


@pytest.fixture
def fake_pypi(standin_sdist: Path, baseline_sdist: Path) -> Iterator[FakePyPI]:
    sha = hashlib.sha256(standin_sdist.read_bytes()).hexdigest()
    base_sha = hashlib.sha256(baseline_sdist.read_bytes()).hexdigest()
    state = FakePyPI(url="", sdist=standin_sdist, sha256=sha)

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            state.requests.append(self.path)
            port = self.server.server_address[1]
            if self.path == "/simple/liger-kernel/":
                # PEP 691: the Simple API's JSON form, as PyPI and its mirrors serve it.
                assert "application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", "")
                body = json.dumps(
                    {
                        "meta": {"api-version": "1.1"},
                        "name": "liger-kernel",
                        "files": [
                            {
                                "filename": "liger_kernel-0.1.0.tar.gz",
                                "url": "/files/old.tar.gz",
                                "hashes": {"sha256": "1" * 64},
                            },
                            {
                                "filename": f"liger_kernel-{STANDIN_VERSION}-py3-none-any.whl",
                                "url": "http://127.0.0.1/none.whl",
                                "hashes": {"sha256": "2" * 64},
                            },
                            {
                                "filename": baseline_sdist.name,
                                "url": f"http://127.0.0.1:{port}/files/{baseline_sdist.name}",
                                "hashes": {"sha256": base_sha},
                            },
                            {
                                "filename": standin_sdist.name,
                                "url": f"http://127.0.0.1:{port}/files/{standin_sdist.name}",
                                "hashes": {"sha256": state.advertised_sha256 or sha},
                            },
                        ],
                    }
                ).encode()
            elif self.path == f"/files/{standin_sdist.name}":
                body = standin_sdist.read_bytes()
            elif self.path == f"/files/{baseline_sdist.name}":
                body = baseline_sdist.read_bytes()
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/simple"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def standin_device(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Scripts see the STAND-IN device (standin_device/: a simulated clock), one GPU."""

    def use() -> None:
        monkeypatch.setenv("PYTHONPATH", str(STANDIN_DEVICE))
        monkeypatch.setenv("STANDIN_GPU_COUNT", "1")
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    return use
