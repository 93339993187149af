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


def test_small_steps_below_the_minimum_effect_are_not_changes(tmp_path: Path) -> None:
    # 3 % with almost no noise: statistically clear, practically below the 5 % minimum.
    values = [0.1] * 4 + [0.103] * 4
    wh = build_warehouse(tmp_path, [series_rows(values, spread=0.0005)])
    assert detect_changes(open_store(wh)).changes == []


def test_memory_change_of_one_byte_is_found(tmp_path: Path) -> None:
    one_byte = 1 / 1048576
    mem = [512.0] * 5 + [512.0 + one_byte] * 3
    same = [512.0] * 8
    wh = build_warehouse(
        tmp_path,
        [series_rows(mem, metric="memory"), series_rows(same, metric="memory", day=2, x="4096")],
    )
    (c,) = detect_changes(open_store(wh)).changes
    assert c["metric"] == "memory" and c["x_value"] == "2048"
    assert (c["before_value"], c["after_value"]) == (512 * 1048576, 512 * 1048576 + 1)
    assert (c["before_release"], c["after_release"]) == (RELEASES[4], RELEASES[5])
    assert c["state"] == "alert" and c["direction"] == "larger" and c["detector"] == "exact"


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
