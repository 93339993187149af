"""The report's pieces that need no browser: links, grouping, colours, absent values, rates."""

from __future__ import annotations

import math

import pytest

from kindex_etl.report.alerts import ChangeContext, grouped_changes
from kindex_etl.report.colors import PROVIDERS, provider_color
from kindex_etl.report.fields import compare_url, group_of, range_label, series_anchor
from kindex_etl.report.page import gpu_label, num, text
from kindex_etl.report.triage import FalseAlarms, measured_false_alarms


def _change(**kw: object) -> dict[str, object]:
    base: dict[str, object] = {
        "change_id": "sha256:" + "ab" * 32,
        "series_key": "sha256:" + "cd" * 32,
        "kernel": "rms_norm",
        "operation_mode": "full",
        "metric": "speed",
        "provider": "liger",
        "gpu_product": "NVIDIA H100",
        "gpu_form_factor": "80GB HBM3",
        "software_class": "upstream",
        "workload_slug": "batch1-hidden2048-seq4096-bf16",
        "before_release": "0.7.0",
        "after_release": "0.8.0",
        "ratio": 1.3,
        "ratio_low": 1.2,
        "ratio_high": 1.4,
        "p_value": 1e-9,
        "state": "alert",
        "before_runs": 2,
        "after_runs": 2,
    }
    return {**base, **kw}


def test_compare_view_by_commits_where_known_else_by_release_tags() -> None:
    assert (
        compare_url(_change()) == "https://github.com/linkedin/Liger-Kernel/compare/v0.7.0...v0.8.0"
    )
    a, b = "1f2e3d4c5b6a7980", "a1b2c3d4e5f60718"
    with_commits = _change(before_commit=a, after_commit=b)
    assert (
        compare_url(with_commits) == f"https://github.com/linkedin/Liger-Kernel/compare/{a}...{b}"
    )
    assert range_label(with_commits) == "0.7.0 → 0.8.0 (1f2e3d4…a1b2c3d)"
    # Something that is no commit (a placeholder) falls back to the tags.
    assert compare_url(_change(before_commit="unknown", after_commit=b)).endswith("v0.7.0...v0.8.0")


def test_grouped_by_cause_where_there_is_one_else_by_state() -> None:
    assert group_of(_change()) == "alert"
    assert group_of(_change(cause="environment")) == "environment"
    assert group_of(_change(cause=float("nan"))) == "alert"  # pandas' absent value
    assert group_of(_change(cause=None, state="pending")) == "pending"


def test_groups_tolerate_new_causes_and_keep_liger_apart() -> None:
    changes = [
        _change(change_id="sha256:01", cause="harness"),
        _change(change_id="sha256:02", cause="a-cause-added-later", provider="torch"),
        _change(change_id="sha256:03"),
        _change(change_id="sha256:04", provider="torch"),
        _change(change_id="sha256:05", state="improvement", ratio=0.7),
    ]
    ctx = ChangeContext(page_of=lambda k: f"{k}.html", release_rank={"0.8.0": 1})
    html = grouped_changes(changes, ctx)
    order = [html.index(f'id="g-{g}"') for g in ("alert", "harness", "a-cause-added-later")]
    assert order == sorted(order)  # kernel alerts first, known causes, then new ones
    assert html.index('id="g-a-cause-added-later"') < html.index('id="g-improvement"')
    assert '<details class="group" id="g-improvement">' in html  # folded, not open
    alert = html[html.index('id="g-alert"') : html.index('id="g-harness"')]
    liger = alert[alert.index('id="g-alert-liger"') : alert.index('id="g-alert-base"')]
    assert ">liger<" in liger and ">torch<" not in liger
    assert ">torch<" in alert[alert.index('id="g-alert-base"') :]


def test_each_provider_keeps_its_colour_whatever_the_page() -> None:
    assert provider_color("liger") == PROVIDERS["liger"]
    assert provider_color("torch") != provider_color("liger")
    # An unknown provider's colour depends on its name only.
    assert provider_color("new_provider") == provider_color("new_provider")


def test_absent_values_never_print_as_nan() -> None:
    row = {"gpu_product": "NVIDIA H200", "gpu_form_factor": float("nan")}
    assert gpu_label(row) == "NVIDIA H200"
    assert text(float("nan")) == "" and text(None, "-") == "-"
    assert num(float("nan")) == "-" and num(math.inf) == "-"
    assert series_anchor("sha256:" + "e" * 64) == "s-" + "e" * 16


def test_measured_false_alarm_rate_counts_invalid_verdicts_on_alerts_only() -> None:
    changes = [
        _change(change_id="a", series_class="speed/full"),
        _change(change_id="b", series_class="speed/full"),
        _change(change_id="c", series_class="memory/full"),
        _change(change_id="d", series_class="speed/full", state="improvement"),
        _change(change_id="e", series_class="speed/full"),  # no verdict
    ]
    verdicts = {
        "a": {"state": "invalid"},
        "b": {"state": "acknowledged"},
        "c": {"state": "invalid"},
        "d": {"state": "invalid"},  # not an alert: not a false alarm
    }
    stats = {s.label: s for s in measured_false_alarms(changes, verdicts)}
    assert (stats["all alerts"].invalid, stats["all alerts"].triaged) == (2, 3)
    assert (stats["speed/full"].invalid, stats["speed/full"].triaged) == (1, 2)
    assert stats["memory/full"].rate == 1.0


def test_wilson_interval() -> None:
    low, high = FalseAlarms("x", 2, 10).interval() or (0, 0)
    # Reference: statsmodels' proportion_confint(2, 10, method="wilson").
    assert low == pytest.approx(0.05668, abs=1e-4) and high == pytest.approx(0.50983, abs=1e-4)
    assert FalseAlarms("x", 0, 0).interval() is None


def test_points_that_know_their_commit_and_origin_show_them() -> None:
    """What the points will carry once commits are first-class (issue 30): x labels, hover
    lines and change markers follow the commits, with no change to the report's callers."""
    import json
    import re

    import pandas as pd

    from kindex_etl.report.alerts import ChangeContext
    from kindex_etl.report.charts import kernel_page

    commits = ["a1b2c3d4e5f6", "b2c3d4e5f6a1", "c3d4e5f6a1b2", "d4e5f6a1b2c3"]
    releases = ["0.8.0", "0.8.0", "0.8.1", "0.8.1"]  # two commits per release
    values = [100_000.0, 101_000.0, 140_000.0, 141_000.0]
    frame = pd.DataFrame(
        {
            "series_key": "sha256:" + "cd" * 32,
            "kernel": "rms_norm",
            "metric": "speed",
            "operation_mode": "full",
            "software_class": "upstream",
            "gpu_product": "NVIDIA H200",
            "gpu_form_factor": [None] * 4,
            "gpu_name": "NVIDIA H200",
            "workload_digest": "sha256:w",
            "workload_slug": "batch1-hidden2048-seq4096-bf16",
            "x_value": "2048",
            "provider": "liger",
            "liger_version": releases,
            "release_rank": [0, 0, 1, 1],
            "value": values,
            "value_p20": [v * 0.99 for v in values],
            "value_p80": [v * 1.01 for v in values],
            "runs": 1,
            "observed_at": pd.to_datetime(
                ["2026-01-01", "2026-01-02", "2026-02-01", "2026-02-02"], utc=True
            ),
            "commit": commits,
            "origin": "ci",
        }
    )
    change = _change(
        series_key="sha256:" + "cd" * 32,
        cause="environment",
        before_release="0.8.0",
        after_release="0.8.1",
        before_commit=commits[1],
        after_commit=commits[2],
        before_value=101_000.0,
        gpu_product="NVIDIA H200",
        gpu_form_factor=None,
    )
    ctx = ChangeContext(page_of=lambda k: f"{k}.html", release_rank={"0.8.1": 1})
    html = kernel_page("rms_norm", frame, [change], [], ctx, plotly="plotly.js", min_effect=0.05)
    body = html[: html.index("<script>")]  # the page, without its script
    assert not re.search(r"(?i)\bnan\b", body)
    assert "full · NVIDIA H200</h3>" in body  # no form factor, no "nan"
    spec = json.loads(re.search(r'id="c1-data">(.*?)</script>', html).group(1))  # type: ignore[union-attr]
    (workload,) = spec["workloads"]
    line, mark = workload["traces"]
    assert line["x"] == [f"{r} · {c[:7]}" for r, c in zip(releases, commits, strict=True)]
    assert "commit %{customdata[4]}" in line["hovertemplate"]
    assert "origin %{customdata[5]}" in line["hovertemplate"]
    assert line["customdata"][2][4] == commits[2] and line["customdata"][2][5] == "ci"
    # The marker sits on the first commit after, named by its cause.
    assert mark["name"] == "environment" and mark["x"] == [f"0.8.1 · {commits[2][:7]}"]
    assert f"compare/{commits[1]}...{commits[2]}" in html
    assert workload["layout"]["yaxis"]["rangemode"] == "tozero"
