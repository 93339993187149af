"""The report of a real warehouse, looked at in headless Chromium: issue 33's acceptance.

    python benchmarks/check_report.py --warehouse /tmp/wh [--screenshots DIR]

Rewrites the report (`kindex-etl regressions --warehouse W`), then opens every page: no
console error, every chart drawn with data, no negative tick on a latency, memory or speed-up
axis, no "nan"/"None"/"undefined" in the text or the charts, no clipped heading or cell; the
index holds the kernel x GPU matrix and the grouped changes; every page ready (its visible
charts drawn) within 2 s. Prints one line per page (its size and seconds) and a summary; exits 1
on any failure. Built for the warehouse `benchmarks/eval/evaluate.py` makes
from upstream's real history (docs/regressions.md), which the tests cannot reach offline.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.report.browser import Browser  # noqa: E402

LOAD_BUDGET_S = 2.0  # issue 33: navigation to the page ready, in Chromium on this machine
BAD_TEXT = re.compile(r"(?i:\bnan\b)|\bNone\b|\bundefined\b")
DRAW_ALL = (
    "window.kindexReport.drawAll().then(function () {"
    "  var plots = Array.prototype.slice.call(document.querySelectorAll('div.plot'));"
    "  return {charts: plots.length,"
    "          points: plots.map(function (p) { return Number(p.dataset.points || 0); }),"
    "          yticks: plots.map(function (p) {"
    "            return Array.prototype.map.call(p.querySelectorAll('.ytick text'),"
    "              function (t) { return t.textContent; }); })};"
    "})"
)
CLIPPED = (
    "Array.prototype.filter.call(document.querySelectorAll('h3, h4, td, th, option'),"
    " function (e) { return e.scrollWidth > e.clientWidth + 1 &&"
    "  getComputedStyle(e).overflow !== 'visible'; }).length"
)


def check_page(b: Browser, page: Path) -> tuple[list[str], float]:
    """The page's problems, and the seconds from navigation to the page ready (its visible
    charts drawn; the others draw when their box is opened)."""
    problems: list[str] = []
    loaded = b.open(page.as_uri(), timeout=60)
    shown = b.evaluate("document.body.innerText")
    if BAD_TEXT.search(shown):
        problems.append(f"text shows {BAD_TEXT.search(shown).group(0)!r}")  # type: ignore[union-attr]
    if page.name == "index.html":
        if not b.evaluate("!!document.getElementById('kernel-gpu')"):
            problems.append("no kernel x GPU matrix")
        if not b.evaluate("document.querySelectorAll('details.group').length"):
            problems.append("no grouped changes")
    else:
        drawn: dict[str, Any] = b.evaluate(DRAW_ALL, await_promise=True)
        if not drawn["charts"]:
            # A kernel measured at one release only gets tables, not one-dot charts.
            if not b.evaluate("document.querySelectorAll('table tbody tr').length"):
                problems.append("neither charts nor tables")
        elif not all(n > 0 for n in drawn["points"]):
            problems.append(f"charts without data: {drawn['points']}")
        negative = [t for axis in drawn["yticks"] for t in axis if t.startswith(("−", "-"))]
        if negative:
            problems.append(f"negative ticks {negative[:3]}")
        svg = b.evaluate(
            "Array.prototype.map.call(document.querySelectorAll('.main-svg text'),"
            " function (t) { return t.textContent; }).join(' ')"
        )
        if re.search(r"\bnan\b|undefined", svg, re.I):
            problems.append("chart text shows nan/undefined")
    if b.evaluate(CLIPPED):
        problems.append("clipped headings or cells")
    problems += [f"console: {e}" for e in b.errors()]
    return problems, loaded


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--warehouse", required=True)
    p.add_argument("--screenshots", type=Path, default=None)
    p.add_argument("--no-rewrite", action="store_true", help="check the report as it is")
    p.add_argument(
        "--budget-s", type=float, default=LOAD_BUDGET_S, help="seconds a page may take to be ready"
    )
    args = p.parse_args(argv)
    if not args.no_rewrite:
        cmd = [sys.executable, "-m", "kindex_etl.cli", "regressions", "--warehouse", args.warehouse]
        subprocess.run([*cmd, "-q"], check=True, cwd=REPO)
    report = Path(args.warehouse) / "reports"
    pages = sorted(report.glob("*.html"))
    failed = 0
    timings: list[float] = []
    with tempfile.TemporaryDirectory() as profile:
        b = Browser(Path(profile))
        try:
            for page in pages:
                problems, seconds = check_page(b, page)
                if seconds > args.budget_s:
                    problems.append(f"loaded in {seconds:.2f} s (budget {args.budget_s} s)")
                timings.append(seconds)
                failed += bool(problems)
                size = page.stat().st_size / 1e6
                print(
                    f"{'FAIL' if problems else 'ok  '} {page.name} ({size:.2f} MB, "
                    f"{seconds:.2f} s): {'; '.join(problems)}"
                )
                if args.screenshots and page.name == "index.html":
                    args.screenshots.mkdir(parents=True, exist_ok=True)
                    b.screenshot(args.screenshots / "index.png")
        finally:
            b.close()
    slowest = max(timings, default=0.0)
    print(f"{len(pages)} pages, {failed} with problems; slowest loaded in {slowest:.2f} s")
    return 1 if failed or not pages else 0


if __name__ == "__main__":
    raise SystemExit(main())
