"""The static report, rendered by a real headless Chromium (Debian's `chromium` package)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kindex_etl.analysis.run import run_regressions
from tests.analysis.helpers import RELEASES, build_warehouse, series_rows

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _chromium() -> str:
    found = (
        os.environ.get("KINDEX_CHROMIUM")
        or shutil.which("chromium")
        or shutil.which("chromium-browser")
    )
    if not found:
        pytest.fail("headless Chromium is needed: apt-get install -y chromium (see .ci/run)")
    return found


def _browser(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    return subprocess.run(
        [
            _chromium(),
            *FLAGS,
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("report")
    rng = np.random.default_rng(5)
    groups = []
    for i, x in enumerate((1024, 2048, 4096)):
        noise = np.exp(rng.normal(0, 0.01, len(RELEASES)))
        liger = 0.1 * x / 1024 * noise
        liger[4:] *= 1.3  # a regression from the fifth release on
        groups.append(series_rows([float(v) for v in liger], x=str(x), day=1 + i, spread=0.02))
        torch = 0.2 * x / 1024 * noise
        groups.append(
            series_rows(
                [float(v) for v in torch], x=str(x), provider="torch", day=10 + i, spread=0.02
            )
        )
    groups.append(series_rows([64.0] * 5 + [80.0] * 3, metric="memory", day=20))
    wh = build_warehouse(tmp, groups)
    result = run_regressions(wh)
    assert result.report is not None and len(result.alerts) == 4
    return Path(result.report).parent


def test_pages_are_self_contained(report: Path) -> None:
    pages = sorted(p.name for p in report.glob("*.html"))
    assert pages == ["index.html", "megatron_rms_norm.html"]
    for page in report.glob("*.html"):
        html = page.read_text()
        # Nothing fetched: no external URL in any src/href, no <link> or external <script>.
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
        assert "<link" not in html and "<script src" not in html
    assert 'href="megatron_rms_norm.html"' in (report / "index.html").read_text()


@pytest.mark.parametrize("page", ["index.html", "megatron_rms_norm.html"])
def test_page_loads_in_headless_chromium_with_no_console_error(
    report: Path, page: str, tmp_path: Path
) -> None:
    run = _browser(tmp_path, "--dump-dom", (report / page).as_uri())
    dom = run.stdout
    body = re.search(r"<body([^>]*)>", dom)
    assert body is not None
    attrs = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', body.group(1)))
    assert attrs.get("ready") == "1", "the page's script did not finish"
    assert "errors" not in attrs
    assert not re.search(r"Uncaught|CONSOLE\(\d+\).*[Ee]rror", run.stderr)
    if page == "megatron_rms_norm.html":
        # Latency per workload (3) for each pass-GPU group, a speedup chart, memory.
        assert int(attrs["charts"]) >= 5
        assert int(attrs["alert-marks"]) >= 3  # the three liger workloads' alert release
        assert "Liger against its baseline" in dom and "vs torch" in dom
    else:
        assert "4 alerts" in dom and 'class="alert"' in dom


def test_screenshot(report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "kernel.png"
    _browser(
        tmp_path,
        f"--screenshot={shot}",
        "--window-size=1300,1600",
        (report / "megatron_rms_norm.html").as_uri(),
    )
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    keep = os.environ.get("KINDEX_REPORT_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)
