"""Change detection on generated series and on the sample's real data."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from kindex_etl.analysis.calibration import default_calibration
from kindex_etl.analysis.run import detect_changes
from kindex_etl.api import IngestOptions, ingest
from kindex_etl.storage import open_store
from tests.analysis.helpers import RELEASES, build_warehouse, series_rows
from tests.helpers import FIXTURES, SAMPLE_CSV

H200 = FIXTURES / "h200_rerun_0.8.5"


def _noisy(rng: np.random.Generator, step: float, at: int, sigma: float = 0.01) -> list[float]:
    values = 0.2 * np.exp(rng.normal(0, sigma, len(RELEASES)))
    values[at:] *= 1 + step
    return [float(v) for v in values]


@pytest.mark.parametrize("step", [0.2, 0.5])
@pytest.mark.parametrize("at", [1, 3, 6])
def test_injected_step_is_found_at_its_release(tmp_path: Path, step: float, at: int) -> None:
    rng = np.random.default_rng(int(step * 100) + at)
    wh = build_warehouse(tmp_path, [series_rows(_noisy(rng, step, at))])
    result = detect_changes(open_store(wh))
    assert len(result.changes) == 1
    (c,) = result.full_changes()
    assert (c["before_release"], c["after_release"]) == (RELEASES[at - 1], RELEASES[at])
    assert c["state"] == "alert" and c["direction"] == "slower"
    assert c["ratio_low"] < 1 + step < c["ratio_high"]
    assert c["p_value"] < 1e-4
    assert c["false_alarm_rate"] == default_calibration().false_alarm_rate("speed", "full")
    assert c["before_runs"] == at and c["after_runs"] == len(RELEASES) - at
    assert len(c["after_run_ids"]) == 1 and c["after_run_ids"][0].endswith(
        f"2026-{at + 1:02d}-01-10-00-00"
    )


def test_faster_is_an_improvement_not_an_alert(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    wh = build_warehouse(tmp_path, [series_rows(_noisy(rng, -0.3, 4))])
    (c,) = detect_changes(open_store(wh)).changes
    assert c["state"] == "improvement" and c["direction"] == "faster"


def test_aa_series_give_no_alert(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    groups = [series_rows(_noisy(rng, 0.0, 0, 0.01), x=str(2**k), day=1 + k) for k in range(10)]
    wh = build_warehouse(tmp_path, groups)
    assert detect_changes(open_store(wh)).changes == []


def test_one_release_spike_is_a_transient_and_a_step_at_the_end_is_pending(
    tmp_path: Path,
) -> None:
    spike = [0.1, 0.1, 0.1, 0.2, 0.1, 0.1, 0.1, 0.1]
    last = [0.1] * 7 + [0.2]
    wh = build_warehouse(tmp_path, [series_rows(spike), series_rows(last, x="4096", day=2)])
    changes = detect_changes(open_store(wh)).changes
    assert [(c["x_value"], c["after_release"], c["state"]) for c in changes] == [
        ("4096", RELEASES[-1], "pending")
    ]


def test_one_wild_run_does_not_hide_its_series_step(tmp_path: Path) -> None:
    # A series' noise is its typical release's, not the mean: one run whose p20-p80 spans 3x
    # (upstream's distill_jsd_loss at 4c32ab6) made the mean sigma hide a 20 % step.
    values = [0.1] * 3 + [0.12] * 5
    rows = series_rows(values)
    rows[5] |= {"y_value_20": repr(0.12 * 0.5), "y_value_80": repr(0.12 * 1.5)}
    wh = build_warehouse(tmp_path, [rows])
    (c,) = detect_changes(open_store(wh)).full_changes()
    assert (c["after_release"], c["state"]) == (RELEASES[3], "alert")


def test_one_pair_of_repeats_does_not_set_its_series_noise(tmp_path: Path) -> None:
    # Two runs of one release that disagree by 25 % are one degree of freedom: the noise
    # model, not they, sets the series' sigma (upstream's 0a62700, measured twice days apart).
    values = [0.1] * 3 + [0.12] * 5
    rows = series_rows(values)
    low, high = 0.12 * 0.89, 0.12 * 1.12
    again = rows[6] | {"timestamp": "2026-07-02 10:00:00"}
    rows.append(again)
    for r, v in ((rows[6], low), (again, high)):
        r |= {"y_value_50": repr(v), "y_value_20": repr(v * 0.99), "y_value_80": repr(v * 1.01)}
    wh = build_warehouse(tmp_path, [rows])
    (c,) = detect_changes(open_store(wh)).full_changes()
    assert (c["after_release"], c["state"], c["after_runs"]) == (RELEASES[3], "alert", 6)


def test_a_series_that_jumps_between_levels_has_no_change(tmp_path: Path) -> None:
    # Narrow bands inside each run, but the points jump by half from commit to commit (as
    # layer_norm's backward does on upstream's H100): its own neighbours set its noise.
    values = [0.10, 0.10, 0.15, 0.10, 0.15, 0.15, 0.10, 0.15]
    wh = build_warehouse(tmp_path, [series_rows(values)])
    assert detect_changes(open_store(wh)).changes == []


def test_points_after_a_step_that_disagree_do_not_confirm_it(tmp_path: Path) -> None:
    # Rule 6: +50 % and +100 % after a jittery level is a step, but not yet a level two points
    # hold (upstream's layer_norm backward: 190 then 255 ms after 141, taken back by the next
    # point); two points that agree are.
    scattered = [0.10, 0.11, 0.10, 0.11, 0.10, 0.11, 0.15, 0.20]
    agreeing = [0.10, 0.11, 0.10, 0.11, 0.10, 0.11, 0.175, 0.175]
    wh = build_warehouse(tmp_path, [series_rows(scattered), series_rows(agreeing, x="4096")])
    changes = detect_changes(open_store(wh)).changes
    assert {(c["x_value"], c["after_release"], c["state"]) for c in changes} == {
        ("2048", RELEASES[6], "pending"),
        ("4096", RELEASES[6], "alert"),
    }


def test_small_steps_below_the_minimum_effect_are_not_changes(tmp_path: Path) -> None:
    # 3 % with almost no noise: statistically clear, practically below the 5 % minimum.
    values = [0.1] * 4 + [0.103] * 4
    wh = build_warehouse(tmp_path, [series_rows(values, spread=0.0005)])
    assert detect_changes(open_store(wh)).changes == []


def test_memory_minimum_effect(tmp_path: Path) -> None:
    # One byte and x1.0000003 (an upstream memory series moved by that much) are no change;
    # 1 % is. Drift below the minimum that adds up past it is one change, where it crosses.
    tiny = [512.0] * 5 + [512.0 + 1 / 1048576] * 3
    x3e7 = [4700.0] * 4 + [4700.0 * 1.0000003] * 4
    step = [512.0] * 5 + [512.0 * 1.01] * 3
    drift = [1000.0, 1000.0, 1002.0, 1004.0, 1006.0, 1006.0, 1006.0, 1006.0]
    wh = build_warehouse(
        tmp_path,
        [
            series_rows(tiny, metric="memory"),
            series_rows(x3e7, metric="memory", day=2, x="4096"),
            series_rows(step, metric="memory", day=3, x="8192"),
            series_rows(drift, metric="memory", day=4, x="16384"),
        ],
    )
    changes = {c["x_value"]: c for c in detect_changes(open_store(wh)).changes}
    assert set(changes) == {"8192", "16384"}
    c = changes["8192"]
    assert (c["before_value"], c["after_value"]) == (512 * 1048576, round(512 * 1.01 * 1048576))
    assert (c["before_release"], c["after_release"]) == (RELEASES[4], RELEASES[5])
    assert c["state"] == "alert" and c["direction"] == "larger"
    assert c["detector"] == "exact min_effect=0.005"
    d = changes["16384"]  # 1000 -> 1006 crosses 0.5 % at the fifth release (x1.006)
    assert (d["before_release"], d["after_release"]) == (RELEASES[3], RELEASES[4])
    assert d["after_value"] / d["before_value"] == pytest.approx(1.006)


def test_sample_and_real_h200_repeats_raise_no_alert(tmp_path: Path) -> None:
    """The real upstream sample (one release per series) and two real runs of one release."""
    up = tmp_path / "up"
    (up / "sample").mkdir(parents=True)
    shutil.copy(SAMPLE_CSV, up / "sample" / "all_benchmark_data.csv")
    for name, src in (("a", H200), ("b", H200 / "repeat")):
        (up / name).mkdir()
        shutil.copy(src / "benchmark.csv", up / name / "benchmark.csv")
        shutil.copy(src / "environment.json", up / name / "environment.json")
    ingest(str(up), str(tmp_path / "wh"), IngestOptions(trigger=False))
    result = detect_changes(open_store(str(tmp_path / "wh")))
    assert result.runs == 2448 + 2 * 72
    # Every H200 pair is one series of two runs; a few upstream points share a series too.
    assert result.series <= 2448 + 72
    assert result.changes == []
