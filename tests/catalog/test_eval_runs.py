"""benchmarks/eval/inject.py and replay.py on a tiny upstream folder laid out as materialize.py
lays out upstream's history: per-commit folders named after real upstream commits (placed by
the packaged history catalog), flat series of two kernels and their baseline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO, row, write_csv

# Consecutive per-commit folders of upstream's gh-pages history (positions 548 to 592), with no
# harness revision of these kernels between them.
FOLDERS = ["7705dcc", "2845fe8", "77a4c1a", "1c07943", "c856fba", "33924d2"]
KERNELS = ("rms_norm", "swiglu")


def _rows(i: int) -> list[dict[str, str]]:
    out = []
    for kernel in KERNELS:
        for provider in ("liger", "huggingface"):
            for metric, unit, value in (("speed", "ms", 0.5), ("memory", "MB", 100.0)):
                out.append(
                    row(
                        kernel_name=kernel,
                        kernel_provider=provider,
                        metric_name=metric,
                        metric_unit=unit,
                        y_value_50=repr(value),
                        y_value_20=repr(value * 0.999),
                        y_value_80=repr(value * 1.001),
                        # After every folder's commit: a run older than its commit is not
                        # a measurement of it.
                        timestamp=f"2025-11-{1 + i:02d} 10:00:00",
                        liger_version="0.6.1",
                    )
                )
    return out


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("upstream")
    for i, name in enumerate(FOLDERS):
        write_csv(root / "benchmarks" / name / "benchmark.csv", _rows(i))
    (root / "benchmarks" / "commits.txt").write_text("".join(f"{n}\n" for n in FOLDERS))
    return root


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Any:
    state = tmp_path_factory.mktemp("state")
    ours = ("PREFECT_", "AWS_", "KINDEX_")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
    clean.update(DO_NOT_TRACK="1", PREFECT_SERVER_ANALYTICS_ENABLED="false",
                 KINDEX_OFFLINE="1", KINDEX_STATE_DIR=str(state), PYTHONPATH=str(REPO))  # fmt: skip
    yield clean
    subprocess.run([sys.executable, "-m", "kindex_etl.cli", "server", "stop"], env=clean,
                   capture_output=True, timeout=60)  # fmt: skip


def _run(env: dict[str, str], script: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "eval" / script), *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, f"{script}: {done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(done.stdout[done.stdout.index("{") :])
    return result


def test_inject_finds_a_step_put_into_flat_series_and_moves_nothing_else(
    upstream: Path, env: dict[str, str], tmp_path: Path
) -> None:
    out = _run(env, "inject.py", "--upstream", str(upstream), "--workdir", str(tmp_path),
               "--trials", "1", "--seed", "3")  # fmt: skip
    injected = out["injections"]
    # Flat series and no shared step: each metric's injection is at a quiet commit.
    assert {(o["class"], o["metric"]) for o in injected} == {("quiet", "speed"),
                                                             ("quiet", "memory")}  # fmt: skip
    assert all(o["kernel"] in KERNELS and o["folder"] in FOLDERS[2:-1] for o in injected)
    assert all(o["found"] for o in injected), injected
    assert out["found"]["quiet"] == {"injected": 2, "found": 2, "share": 1.0}
    assert out["crosstalk_changes_per_trial"] == [0]


def test_replay_as_deployed_agrees_with_full_analyses_and_takes_nothing_back(
    upstream: Path, env: dict[str, str], tmp_path: Path
) -> None:
    out = _run(env, "replay.py", "--upstream", str(upstream), "--workdir", str(tmp_path),
               "--day-hours", "3", "--cumulative", "none")  # fmt: skip
    assert out["hours"] == len(FOLDERS)
    assert [d["differ"] for d in out["days"]] == [0, 0]
    assert out["incremental_hours"] == len(FOLDERS) - 1
    assert out["same_runs_as_one_ingest"] and out["final_changes_as_one_ingest"]
    assert out["announced_then_not_alert"] == 0
