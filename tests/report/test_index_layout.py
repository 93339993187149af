"""The index laid out for people who act on alerts (issue 54, item 9), in headless Chromium.

Shaped like upstream's real history, where the issue measured it: nine GPUs, eighteen
releases, forty kernels, hundreds of environment steps and a few alerts. There the alerts came
last in the summary line, their table began about 3,860 px down, and the kernel x GPU matrix
made the page scroll sideways.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kindex_etl.analysis.calibration import default_calibration
from kindex_etl.report import index_page, page_of
from kindex_etl.report.alerts import ChangeContext
from kindex_etl.report.matrix import Matrix
from tests.report.browser import Browser

GPUS = [
    ("NVIDIA H100", "80GB HBM3"), ("NVIDIA H100", "NVL"), ("NVIDIA H200", None),
    ("NVIDIA A100", "SXM4-80GB"), ("NVIDIA A100", "SXM4-40GB"), ("NVIDIA B200", None),
    ("NVIDIA L40S", None), ("NVIDIA A10G", None), ("NVIDIA GH200", "480GB"),
]  # fmt: skip
RELEASES = [f"0.{minor}.{patch}" for minor in range(3, 9) for patch in range(3)]  # 18
KERNELS = [f"fused_linear_kernel_{i:02d}" for i in range(40)]
WIDTH = 1280


def _change(i: int, kernel: str, state: str, gpu: tuple[str, str | None]) -> dict[str, Any]:
    product, form = gpu
    return {
        "change_id": f"sha256:{i:064x}", "series_key": f"sha256:s{i}", "kernel": kernel,
        "state": state, "provider": "liger", "operation_mode": "full", "metric": "speed",
        "gpu_product": product, "gpu_form_factor": form, "gpu_name": f"{product} {form or ''}",
        "workload_slug": "batch4-hidden4096-seq1024-vocab128256-bf16", "software_class":
        "upstream", "before_release": RELEASES[-3], "after_release": RELEASES[-2],
        "ratio": 1.3, "ratio_low": 1.2, "ratio_high": 1.4, "p_value": 0.001,
        "series_class": "speed/full", "before_runs": 3, "after_runs": 3,
    }  # fmt: skip


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    changes = [
        _change(i, KERNELS[i % len(KERNELS)], "environment", GPUS[i % len(GPUS)])
        for i in range(300)
    ]
    changes += [_change(300 + i, KERNELS[i], "alert", GPUS[0]) for i in range(3)]
    matrix = Matrix()
    labels = [f"{p} {f}" if f else p for p, f in GPUS]
    for k in KERNELS:
        matrix.add_points(k, [(g, r) for g in labels for r in RELEASES])
    matrix.add_changes(changes)
    summary = {k: {"series": 12, "gpus": labels, "newest": RELEASES[-1]} for k in KERNELS}
    rank = {r: i for i, r in enumerate(RELEASES)}
    ctx = ChangeContext(page_of=page_of, release_rank=rank)
    html = index_page(summary, matrix, changes, ctx, default_calibration(), 7)
    out = tmp_path_factory.mktemp("index") / "index.html"
    out.write_text(html)
    return out


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    b = Browser(tmp_path_factory.mktemp("chromium") / "profile", width=WIDTH, height=900)
    try:
        yield b
    finally:
        b.close()


def test_the_summary_line_names_the_alerts_first(index: Path, browser: Browser) -> None:
    browser.open(index.as_uri())
    line = browser.evaluate("document.querySelector('p.note').textContent")
    assert line.split("changes: ", 1)[1].startswith("3 alert, "), line


def test_the_alert_table_starts_near_the_top(index: Path, browser: Browser) -> None:
    browser.open(index.as_uri())
    tops = browser.evaluate(
        "(function(){function top(s){var e=document.querySelector(s);"
        "return e.getBoundingClientRect().top + window.scrollY;}"
        "return {alerts: top('#g-alert-liger'), matrix: top('#kernel-gpu'),"
        " environment: top('#g-environment')};})()"
    )
    # Within the first screen, before the matrices and the other changes.
    assert tops["alerts"] < 600, tops
    assert tops["alerts"] < tops["matrix"] < tops["environment"]
    rows = browser.evaluate("document.getElementById('g-alert-liger').tBodies[0].rows.length")
    assert rows == 3
    assert browser.errors() == []


def test_no_sideways_scroll_at_1280_px(index: Path, browser: Browser) -> None:
    browser.open(index.as_uri())
    assert browser.evaluate("window.innerWidth") == WIDTH
    assert browser.evaluate("document.scrollingElement.scrollWidth") <= WIDTH
    # The wide matrix is still whole: it scrolls inside its own box.
    inner = browser.evaluate(
        "(function(){var t=document.getElementById('releases-0');"
        "return [t.getBoundingClientRect().width, t.parentNode.clientWidth];})()"
    )
    assert inner[0] > inner[1]
    assert browser.errors() == []
