"""Upstream rows for series over releases, ingested into a real warehouse."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from kindex_etl.api import IngestOptions, ingest
from tests.helpers import row, write_csv

RELEASES = ("0.5.0", "0.5.1", "0.6.0", "0.6.1", "0.7.0", "0.8.0", "0.8.1", "0.9.0")


def series_rows(
    values_ms: Sequence[float],
    *,
    releases: Sequence[str] = RELEASES,
    spread: float = 0.01,
    metric: str = "speed",
    kernel: str = "megatron_rms_norm",
    provider: str = "liger",
    mode: str = "full",
    gpu: str = "NVIDIA H100 80GB HBM3",
    x: str = "2048",
    config: str = '{"S": 4096, "B": 1}',
    day: int = 1,
) -> list[dict[str, str]]:
    """One run per release; p20/p80 at -/+ `spread` (relative) around the median."""
    out = []
    for i, (version, value) in enumerate(zip(releases, values_ms, strict=True)):
        out.append(
            row(
                kernel_name=kernel,
                kernel_provider=provider,
                kernel_operation_mode=mode,
                metric_name=metric,
                metric_unit="ms" if metric == "speed" else "MB",
                x_value=x,
                y_value_50=repr(value),
                y_value_20=repr(value * (1 - spread)),
                y_value_80=repr(value * (1 + spread)),
                extra_benchmark_config_str=config,
                gpu_name=gpu,
                timestamp=f"2026-{1 + i % 12:02d}-{day:02d} 10:00:00",
                liger_version=version,
            )
        )
    return out


def build_warehouse(tmp: Path, groups: Iterable[list[dict[str, str]]], name: str = "w") -> str:
    """Write each group as one upstream CSV and ingest them all; returns the warehouse path."""
    upstream = tmp / f"{name}-up"
    for i, rows in enumerate(groups):
        write_csv(upstream / f"benchmarks/{i:04d}/benchmark.csv", rows)
    warehouse = tmp / f"{name}-wh"
    ingest(str(upstream), str(warehouse), IngestOptions(trigger=False))
    return str(warehouse)


def add_rerun(
    tmp: Path, warehouse: str, rows: list[dict[str, str]], software: dict[str, str], name: str
) -> None:
    """Ingest rows as one of our GPU re-runs (a folder with environment.json)."""
    upstream = tmp / f"{name}-rerun"
    write_csv(upstream / "reruns/benchmark.csv", rows)
    (upstream / "reruns/environment.json").write_text(json.dumps({"software": software}))
    ingest(str(upstream), warehouse, IngestOptions(trigger=False))


def alert_no_longer_found(tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """A warehouse holding an alert that an older, looser detector (1 % minimum effect, z 1.5)
    committed on a +3 % step the packaged calibration does not report: the next analysis with
    the packaged one no longer finds it. Returns (warehouse, that alert's row)."""
    from dataclasses import replace

    from kindex_etl.analysis.calibration import default_calibration
    from kindex_etl.analysis.run import run_regressions

    small = [0.1] * 4 + [0.103] * 4  # +3 %: under the packaged minimum effect
    wh = build_warehouse(tmp_path, [series_rows(small, spread=0.001)])
    cal = default_calibration()
    looser = replace(
        cal, settings=replace(cal.settings, min_effect=0.01, z_threshold=1.5, announce_z=1.5)
    )
    (old,) = run_regressions(wh, report=False, calibration=looser).new
    assert old["state"] == "alert"
    return wh, old
