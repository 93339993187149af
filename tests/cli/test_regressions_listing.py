"""`kindex-etl regressions` as an operator acts on it (issue 54, item 7): the totals, a legend,
filters on what is listed, plain words for every field, a listing of the table without an
analysis, and a reader that stops early (`| head`) ending the command quietly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kindex_etl.analysis.run import run_regressions
from kindex_etl.cli import main
from tests.analysis.helpers import build_warehouse, series_rows
from tests.cli.conftest import clean_env

STEP = [0.1] * 4 + [0.13] * 4  # +30 % at the fifth release: an alert once it persisted
GAIN = [0.1] * 4 + [0.07] * 4  # -30 %: an improvement
ALERTS = 7


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Seven alerts (one kernel, seven workloads) and one improvement on another GPU."""
    tmp = tmp_path_factory.mktemp("listing")
    groups = [series_rows(STEP, x=str(1024 * (i + 1)), day=1 + i) for i in range(ALERTS)]
    groups.append(series_rows(GAIN, kernel="layer_norm", gpu="NVIDIA A100-SXM4-80GB", day=9))
    return build_warehouse(tmp, groups)


def _listed(out: str) -> list[str]:
    """The change lines: what follows the legend (its `legend:` and `states:` lines)."""
    lines = out.splitlines()
    states = next(i for i, line in enumerate(lines) if line.startswith("states: "))
    assert lines[states - 1].startswith("legend: ")
    return lines[states + 1 :]


def test_state_alert_limit_5_lists_at_most_5_alerts_after_the_legend(
    warehouse: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["regressions", "--warehouse", warehouse, "--dry-run"]) == 0
    everything = capsys.readouterr().out
    assert len([x for x in _listed(everything) if x.startswith("alert ")]) == ALERTS
    assert any(x.startswith("improvement ") for x in _listed(everything))

    assert main(["regressions", "--warehouse", warehouse, "--state", "alert", "--limit", "5"]) == 0
    out = capsys.readouterr().out
    listed = _listed(out)
    assert 0 < len(listed) <= 5
    assert all(x.startswith("alert ") for x in listed), listed
    # The totals stay those of the whole analysis: the filters only choose what is listed.
    assert f"{ALERTS} alerts" in out.splitlines()[0]
    assert "listed: 5 of 8 (state alert, the first 5; 7 match)" in out


def test_kernel_and_gpu_filters(warehouse: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["regressions", "--warehouse", warehouse, "--dry-run"]
    assert main([*argv, "--gpu", "a100"]) == 0
    listed = _listed(capsys.readouterr().out)
    assert len(listed) == 1 and listed[0].startswith("improvement ") and "layer_norm" in listed[0]
    assert main([*argv, "--kernel", "megatron_*"]) == 0
    listed = _listed(capsys.readouterr().out)
    assert len(listed) == ALERTS and all("megatron_rms_norm" in x for x in listed)


def test_json_keeps_its_shape_and_lists_what_the_filters_select(
    warehouse: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["regressions", "--warehouse", warehouse, "--dry-run", "--json"]
    assert main(argv) == 0
    whole = json.loads(capsys.readouterr().out)
    assert main([*argv, "--state", "alert", "--limit", "2"]) == 0
    some = json.loads(capsys.readouterr().out)
    assert sorted(some) == sorted(whole)
    assert [c["state"] for c in some["changes"]] == ["alert", "alert"]
    assert some["alerts"] == whole["alerts"] == ALERTS
    assert all(c["after_run_ids"] for c in some["changes"])  # whole rows, as before


def test_show_lists_the_table_without_analysing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wh = build_warehouse(tmp_path, [series_rows(STEP)])
    # Before any analysis the table is empty: --show finds nothing and commits nothing.
    assert main(["regressions", "--warehouse", wh, "--show"]) == 0
    assert "0 changes, 0 alerts" in capsys.readouterr().out
    assert not (Path(wh) / "reports").exists()
    run_regressions(wh)
    assert main(["regressions", "--warehouse", wh, "--state", "alert"]) == 0
    analysed = _listed(capsys.readouterr().out)
    log = sorted(p.name for p in (Path(wh) / "_kindex" / "log").iterdir())
    assert main(["regressions", "--warehouse", wh, "--show", "--state", "alert"]) == 0
    shown = _listed(capsys.readouterr().out)
    assert [x.removesuffix("; new") for x in shown] == [x.removesuffix("; new") for x in analysed]
    assert len(shown) == 1
    assert sorted(p.name for p in (Path(wh) / "_kindex" / "log").iterdir()) == log
    assert main(["regressions", "--warehouse", wh, "--show", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["alerts"] == 1 and [c["state"] for c in data["changes"]] == ["alert"]


CHANGE = {
    "change_id": "sha256:x", "state": "pending", "ratio": 1.35, "ratio_low": 1.18,
    "ratio_high": 1.55, "kernel": "mhc_coeffs", "operation_mode": "backward",
    "provider": "liger", "metric": "speed", "gpu_name": "NVIDIA H100 80GB HBM3",
    "software_class": "upstream", "workload_slug": "batch4-bf16", "before_release": "0.7.0",
    "after_release": "0.7.0", "origin": "ci", "before_commit": "e6f84b8aaaa",
    "after_commit": "ab7fe2abbbb", "first_release": "0.8.0", "baseline_ratio": None,
    "baseline_providers": None, "before_harness": "0bd8292", "after_harness": "0bd8292",
    "kernels_at_step": 1, "series_class": "speed/backward", "false_alarm_rate": 0.0197,
}  # fmt: skip


def test_every_field_in_plain_words() -> None:
    from kindex_etl.cli.findings import change_line

    line = change_line(CHANGE)
    # What issue 54 could not read: `baselines x-`, `harness 0bd8292 -> 0bd8292`, and
    # `0.7.0 -> 0.7.0 ... first release 0.8.0`.
    assert "x-" not in line and "->" not in line
    assert "no baseline measured" in line
    assert "benchmark script unchanged (revised last at 0bd8292)" in line
    assert "after 0.7.0, between commits e6f84b8..ab7fe2a (first released in 0.8.0" in line
    assert "runs of upstream CI" in line and "false-alarm rate of speed/backward: 2.0%" in line
    moved = change_line(
        {**CHANGE, "before_release": "0.6.0", "after_release": "0.6.1", "first_release": "0.6.1",
         "baseline_ratio": 1.02, "baseline_providers": ["huggingface"],
         "after_harness": "73cb70b", "kernels_at_step": 6},
    )  # fmt: skip
    assert "0.6.0 -> 0.6.1 (commits e6f84b8..ab7fe2a, runs of upstream CI)" in moved
    assert "huggingface moved x1.02, 6 kernels stepped here" in moved
    assert "benchmark script revised at the step (0bd8292 -> 73cb70b)" in moved


@pytest.mark.parametrize(
    "args",
    [["schema"], ["regressions", "--show"], ["regressions", "--dry-run"]],
    ids=["schema", "regressions-show", "regressions"],
)
def test_a_reader_that_stops_early_ends_the_command_quietly(
    warehouse: str, args: list[str]
) -> None:
    """`kindex-etl ... | head -1`: the reader is gone before (most of) the output is written.
    The command ends as Unix tools do, with no traceback and no error line."""
    if args[0] == "regressions":
        args = [*args, "--warehouse", warehouse]
    read, write = os.pipe()
    os.close(read)  # the reader has gone: every write to the pipe fails with EPIPE
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "kindex_etl.cli", *args],
            env=clean_env(),
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write)
    assert proc.stderr == ""
    assert proc.returncode == 141  # 128 + SIGPIPE, as a shell reports `seq 1e9 | head -1`
