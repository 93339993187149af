"""A series with a 300x harness step, drawn (issue 54, item 9): both levels visible.

dpo_loss's full pass went from 1.6 s to 5 ms when upstream revised its benchmark script; on a
linear axis from zero every point after the step lay on the axis line, and a 1.5x regression
among them moved its points by less than a pixel. Charted in headless Chromium.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kindex_etl.analysis.run import run_regressions
from tests.analysis.helpers import build_warehouse, series_rows
from tests.report.browser import Browser

KERNEL = "megatron_rms_norm"
# ms: 1.6 s at four releases, then the new script's 5 ms, then a 1.5x regression at 7.5 ms.
STEPPED = [1600.0] * 4 + [5.0] * 2 + [7.5] * 2
FLAT = [0.1] * 8


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("scales")
    wh = build_warehouse(tmp, [series_rows(STEPPED, x="2048"), series_rows(FLAT, x="4096")])
    result = run_regressions(wh)
    assert result.report is not None
    return Path(result.report).parent / f"{KERNEL}.html"


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    b = Browser(tmp_path_factory.mktemp("chromium") / "profile", width=1280, height=900)
    try:
        yield b
    finally:
        b.close()


def _workloads(html: str) -> list[dict[str, Any]]:
    """The first chart's workloads (the speed chart of the only pass and GPU)."""
    spec = re.search(r'<script type="application/json" id="c1-data">(.*?)</script>', html)
    assert spec is not None
    return list(json.loads(spec.group(1))["workloads"])


def test_a_series_spanning_more_than_10x_gets_a_log_axis_and_others_do_not(page: Path) -> None:
    axes = {w["title"]: w["layout"]["yaxis"] for w in _workloads(page.read_text())}
    stepped = next(a for t, a in axes.items() if "hidden2048" in t)
    flat = next(a for t, a in axes.items() if "hidden4096" in t)
    assert stepped["type"] == "log" and "rangemode" not in stepped
    assert "log scale" in stepped["title"]["text"]
    # A series within 10x keeps the linear axis from zero (latencies are never negative).
    assert flat.get("type") is None and flat["rangemode"] == "tozero"


def test_both_levels_of_a_300x_step_are_visible_in_the_chart(page: Path, browser: Browser) -> None:
    browser.open(page.as_uri())
    workloads = _workloads(page.read_text())
    index = next(i for i, w in enumerate(workloads) if "hidden2048" in w["title"])
    got = browser.evaluate(
        "(function(){var s=document.getElementById('c1-select');"
        f"if (s) s.selectedIndex={index};"
        "var gd=document.getElementById('c1');"
        "return window.kindexReport.draw(gd).then(function(){"
        " var L=gd._fullLayout, t=gd.data[0];"
        " return {type: L.yaxis.type, height: L.yaxis._length,"
        "  y: t.y.map(function(v){return L.yaxis.d2p(v);}),"
        "  values: t.y};});})()",
        await_promise=True,
    )
    px = dict(zip(got["values"], got["y"], strict=True))
    slow, fast, regressed = px[1.6e6], px[5e3], px[7.5e3]  # µs
    # The two levels of the step are far apart, and the 1.5x regression after it (0.2 px on
    # a linear axis from zero) is a visible step of its own.
    assert fast - slow > got["height"] / 2
    assert fast - regressed > 10
    # The low level is drawn inside the plot, not on its bottom edge.
    assert 0 <= fast < got["height"]
    assert got["type"] == "log"
    assert browser.errors() == []
