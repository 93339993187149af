"""Release against release, liger against its baseline, GPU against GPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from kindex_etl.analysis.calibration import default_calibration
from kindex_etl.analysis.compare import (
    NO_DIFFERENCE,
    compare_baseline,
    compare_gpus,
    compare_releases,
)
from kindex_etl.analysis.run import detect_changes, points_frame
from kindex_etl.catalog import default_catalog
from kindex_etl.storage import open_store
from tests.analysis.helpers import build_warehouse, series_rows

RELEASES = ("0.7.0", "0.8.0")
XS = (1024, 2048, 4096, 8192)


def _frame(wh: str):  # type: ignore[no-untyped-def]
    points: list[pa.Table] = []
    detect_changes(open_store(wh), points=points)
    return points_frame(points)


def _groups(
    factor_b: float,
    provider: str = "liger",
    gpu: str = "NVIDIA H100 80GB HBM3",
    kernel: str = "megatron_rms_norm",
    day: int = 1,
    base: float = 0.2,
):
    rng = np.random.default_rng(day)
    return [
        series_rows(
            [
                base * x / 1024 * float(np.exp(rng.normal(0, 0.005))),
                base * x / 1024 * factor_b * float(np.exp(rng.normal(0, 0.005))),
            ],
            releases=RELEASES,
            x=str(x),
            provider=provider,
            gpu=gpu,
            kernel=kernel,
            day=day + i,
        )
        for i, x in enumerate(XS)
    ]


def test_release_b_against_a_is_a_ratio_with_an_interval(tmp_path: Path) -> None:
    wh = build_warehouse(tmp_path, _groups(1.25))
    (row,) = compare_releases(_frame(wh), "0.7.0", "0.8.0")
    assert row["pairs"] == len(XS)
    assert row["ratio_low"] < 1.25 < row["ratio_high"]
    assert row["ratio"] == pytest.approx(1.25, rel=0.02)
    assert row["verdict"] == "higher"
    assert (row["kernel"], row["gpu_product"], row["gpu_form_factor"]) == (
        "megatron_rms_norm",
        "NVIDIA H100",
        "80GB HBM3",
    )


def test_same_release_twice_is_no_difference_detectable(tmp_path: Path) -> None:
    wh = build_warehouse(tmp_path, _groups(1.0))
    (row,) = compare_releases(_frame(wh), "0.7.0", "0.8.0")
    assert row["verdict"] == NO_DIFFERENCE
    assert row["ratio_low"] <= 1 <= row["ratio_high"] or abs(row["ratio"] - 1) < 0.05


def test_liger_against_the_catalog_baseline(tmp_path: Path) -> None:
    assert default_catalog().kernel("megatron_rms_norm").baseline == ("torch",)
    assert default_catalog().kernel("rms_norm").baseline == ("huggingface",)
    groups = _groups(1.0, provider="liger", base=0.1) + _groups(1.0, provider="torch", day=20)
    wh = build_warehouse(tmp_path, groups)
    rows = compare_baseline(_frame(wh))
    assert {(r["liger_version"], r["baseline"]) for r in rows} == {
        ("0.7.0", "torch"),
        ("0.8.0", "torch"),
    }
    for r in rows:
        assert r["speedup"] == pytest.approx(2.0, rel=0.03)
        assert r["verdict"] == "lower"  # liger / torch below 1


def test_gpu_against_gpu_for_one_release(tmp_path: Path) -> None:
    groups = _groups(1.0) + _groups(1.0, gpu="NVIDIA A100-SXM4-80GB", day=30, base=0.3)
    wh = build_warehouse(tmp_path, groups)
    frame = _frame(wh)
    (row,) = compare_gpus(frame, "0.8.0", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB")
    assert row["ratio"] == pytest.approx(1.5, rel=0.03)
    assert row["verdict"] == "higher"
    assert compare_gpus(frame, "0.9.9", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB") == []


def test_noise_widens_the_interval(tmp_path: Path) -> None:
    wh = build_warehouse(tmp_path, [series_rows([0.1, 0.104], releases=RELEASES, spread=0.2)])
    (row,) = compare_releases(_frame(wh), "0.7.0", "0.8.0")
    assert row["verdict"] == NO_DIFFERENCE
    assert row["ratio_high"] / row["ratio_low"] > 1.2
    assert default_calibration().settings.noise.run_to_run > 0


def test_real_aa_runs_compared_as_two_releases_show_no_difference(tmp_path: Path) -> None:
    """Our H200 run of 0.8.5 and its repeat, the repeat relabelled as another release."""
    import csv
    import shutil

    from kindex_etl.api import IngestOptions, ingest
    from tests.helpers import FIXTURES, write_csv

    h200 = FIXTURES / "h200_rerun_0.8.5"
    for name, src, version in (("a", h200, "0.8.5"), ("b", h200 / "repeat", "0.8.5.post1")):
        with (src / "benchmark.csv").open(newline="") as fh:
            rows = [{**r, "liger_version": version} for r in csv.DictReader(fh)]
        write_csv(tmp_path / "up" / name / "benchmark.csv", rows)
        shutil.copy(src / "environment.json", tmp_path / "up" / name / "environment.json")
    wh = str(tmp_path / "wh")
    ingest(str(tmp_path / "up"), wh, IngestOptions(trigger=False))
    points: list[pa.Table] = []
    result = detect_changes(open_store(wh), points=points)
    assert result.runs == 144 and result.alerts == []
    rows = compare_releases(points_frame(points), "0.8.5", "0.8.5.post1")
    assert len(rows) == 16  # 2 kernels x 2 providers x 3 passes of speed, + 4 of memory
    assert {r["verdict"] for r in rows} == {NO_DIFFERENCE}


def test_comparisons_keep_to_upstreams_timer(tmp_path: Path) -> None:
    """Re-run machines hold both timers' points (issue 34's device time: other protocol
    digests, `timer` device_time). Pooled, liger's speed-up would be an average of two
    instruments' answers with twice the pairs."""
    groups = _groups(1.0, provider="liger", base=0.1) + _groups(1.0, provider="torch", day=20)
    frame = _frame(build_warehouse(tmp_path, groups))
    assert set(frame["timer"]) == {"upstream"}
    device = frame.copy()
    device["timer"] = "device_time"
    device["protocol_digest"] = "sha256:" + "d" * 64
    liger = device["provider"] == "liger"
    device.loc[liger, "log_value"] = device.loc[liger, "log_value"] + np.log(0.5)
    mixed = pd.concat([frame, device], ignore_index=True)
    assert compare_baseline(mixed) == compare_baseline(frame)
    releases = compare_releases(mixed, *RELEASES)
    assert releases == compare_releases(frame, *RELEASES) and releases
    assert all(r["pairs"] == len(XS) for r in releases)
