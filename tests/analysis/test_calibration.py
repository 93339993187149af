"""Calibration: the real A/A pairs, the fitted noise model, measured rates on real points."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np

from kindex_etl.analysis.calibration import (
    _arrays,
    aa_pairs,
    default_calibration,
    measure,
    read_points,
    residual_pool,
)
from kindex_etl.analysis.noise import NoiseModel, fit, within_sigma
from tests.helpers import FIXTURES, SAMPLE_CSV

H200 = FIXTURES / "h200_rerun_0.8.5"
PAIRS = [H200 / "benchmark.csv", H200 / "repeat/benchmark.csv"]


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


def test_packaged_calibration_is_what_the_real_pairs_fit() -> None:
    text = resources.files("kindex_etl.analysis").joinpath("calibration.json").read_text()
    data = json.loads(text)
    pairs = aa_pairs(read_points(PAIRS))
    model = fit(*_arrays(pairs[pairs["metric_name"] == "speed"]))
    assert data["noise"] == {"run_to_run": model.run_to_run, "floor": model.floor}
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
    pairs = aa_pairs(read_points(PAIRS))
    pool = residual_pool(pairs[pairs["metric_name"] == "speed"], cal.settings.noise)
    out = measure(points, cal.settings, pool, copies=1, seed=4)
    assert out["false_alarm_rate"]["all"] < 0.03
    assert out["detection_rate"]["all"]["0.50"] > 0.85
    assert out["detection_rate"]["all"]["0.50"] >= out["detection_rate"]["all"]["0.05"]
    for cls, rates in out["detection_rate"].items():
        if cls.startswith("memory/"):
            assert set(rates.values()) == {1.0}, cls  # every memory step, one byte upward
            assert out["false_alarm_rate"][cls] == 0.0
