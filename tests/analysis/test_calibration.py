"""Calibration: the real A/A pairs, the fitted noise model, measured rates on real points."""

from __future__ import annotations

import json
import shutil
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from kindex_etl.analysis.calibration import (
    FAR_S,
    _arrays,
    aa_pairs,
    default_calibration,
    load_pairs,
    measure,
    read_points,
    residual_pool,
    warehouse_pairs,
)
from kindex_etl.analysis.noise import NoiseModel, fit, within_sigma
from kindex_etl.api import IngestOptions, ingest
from kindex_etl.storage import open_store
from tests.helpers import FIXTURES, SAMPLE_CSV

H200 = FIXTURES / "h200_rerun_0.8.5"
PAIRS = [H200 / "benchmark.csv", H200 / "repeat/benchmark.csv"]
UPSTREAM_PAIRS = FIXTURES / "upstream_pairs" / "gh-pages-since-2025-06-01.csv.gz"


def test_real_aa_pairs_are_the_h200_repeats_and_the_sample_has_none() -> None:
    assert len(aa_pairs(read_points([SAMPLE_CSV]))) == 0
    pairs = aa_pairs(read_points(PAIRS))
    assert sorted(pairs["metric_name"].value_counts().items()) == [("memory", 18), ("speed", 54)]
    memory = pairs[pairs["metric_name"] == "memory"]
    assert (memory["a_median"] == memory["value_median"]).all()  # memory is deterministic


def test_noise_fit_recovers_a_known_model() -> None:
    rng = np.random.default_rng(1)
    # Many tight runs, so that the floor (not the within-run spread) decides their noise.
    within = np.r_[rng.uniform(0.0, 0.002, 4000), rng.uniform(0.005, 0.2, 4000)]
    truth = NoiseModel(run_to_run=2.0, floor=0.01)
    sigma = truth.run_sigma(within)
    a, b = rng.normal(0, sigma), rng.normal(0, sigma)
    assert fit(a, b, within, within) == truth
    band = within_sigma(np.array([90.0]), np.array([110.0]))[0]
    assert band == np.log(110 / 90) / (2 * 0.8416212335729143)


def _sample_and_h200(tmp_path: Path) -> str:
    up = tmp_path / "up"
    for name, src in (("h200", H200), ("h200-repeat", H200 / "repeat")):
        (up / name).mkdir(parents=True)
        for f in ("benchmark.csv", "environment.json"):
            shutil.copy(src / f, up / name / f)
    (up / "sample").mkdir()
    shutil.copy(SAMPLE_CSV, up / "sample" / "all_benchmark_data.csv")
    ingest(str(up), str(tmp_path / "wh"), IngestOptions(trigger=False))
    return str(tmp_path / "wh")


def test_warehouse_pairs_find_upstream_repeats_under_two_sweeps(tmp_path: Path) -> None:
    """Same-release runs of one series: the H200 repeats, and upstream points that two sweeps
    of one script measured at the same shape (rope, llama4_rope, fused_moe)."""
    pairs = warehouse_pairs(open_store(_sample_and_h200(tmp_path)))
    assert sorted(pairs["metric_name"].value_counts().items()) == [("memory", 28), ("speed", 72)]
    memory = pairs[pairs["metric_name"] == "memory"]
    # Real upstream memory is not always bit-identical across two runs (fused_moe: 3 pairs).
    assert int((memory["a_median"] == memory["value_median"]).sum()) == 25


def test_packaged_calibration_is_what_the_real_pairs_fit(tmp_path: Path) -> None:
    text = resources.files("kindex_etl.analysis").joinpath("calibration.json").read_text()
    data = json.loads(text)
    # The sample and our H200 repeats, plus upstream's gh-pages history since 2025-06 (same
    # commits re-run days apart), saved as pairs since the history itself is not in the repo.
    saved = load_pairs([UPSTREAM_PAIRS])
    pairs = pd.concat(
        [warehouse_pairs(open_store(_sample_and_h200(tmp_path))), saved], ignore_index=True
    )
    model = fit(*_arrays(pairs[pairs["metric_name"] == "speed"]))
    assert data["noise"] == {"run_to_run": model.run_to_run, "floor": model.floor}
    assert data["aa_pairs"]["from_saved_pairs"] == len(saved) == 5380
    far = data["host_variance"][UPSTREAM_PAIRS.name]["speed/full"]
    assert far["far_pairs"] == int(
        ((saved["gap_s"] >= FAR_S) & (saved["kernel_operation_mode"] == "full")
         & (saved["metric_name"] == "speed")).sum()
    )  # fmt: skip
    cal = default_calibration()
    rates = data["measured"]["false_alarm_rate"]
    for cls in ("speed/full", "speed/forward", "speed/backward", "memory/full"):
        assert cal.false_alarm_rate(*cls.split("/")) == rates[cls]
    # A pass never calibrated takes the worst measured rate of its metric.
    worst = max(v for k, v in rates.items() if k.startswith("speed/"))
    assert cal.false_alarm_rate("speed", "unspecified") == worst


def test_measured_rates_on_real_points() -> None:
    cal = default_calibration()
    points = read_points([SAMPLE_CSV]).sample(n=400, random_state=3)
    pairs = aa_pairs(read_points(PAIRS))  # the H200 repeats: the CSV route to the same pairs
    pool = residual_pool(pairs[pairs["metric_name"] == "speed"], cal.settings.noise)
    out = measure(points, cal.settings, pool, copies=1, seed=4)
    assert out["false_alarm_rate"]["all"] < 0.03
    assert out["detection_rate"]["all"]["0.50"] > 0.85
    assert out["detection_rate"]["all"]["0.50"] >= out["detection_rate"]["all"]["0.05"]
    for cls, rates in out["detection_rate"].items():
        if cls.startswith("memory/"):
            assert set(rates.values()) == {1.0}, cls  # every memory step, one byte upward
            assert out["false_alarm_rate"][cls] == 0.0
