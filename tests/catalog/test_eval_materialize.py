"""benchmarks/eval/materialize.py on a git repository shaped like upstream's, made here.

`main` holds the cumulative file, `gh-pages` the per-commit folders and `commits.txt`. The
folders are named after real upstream commits so that `--since` can place them with the
packaged history catalog (b6ed735 is 2025-06-12, 0a62700 is 2025-11-21).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEADER = (
    "kernel_name,kernel_provider,kernel_operation_mode,metric_name,metric_unit,x_name,x_label,"
    "x_value,y_value_50,y_value_20,y_value_80,extra_benchmark_config_str,gpu_name,timestamp,"
    "liger_version\n"
)


def line(ts: str, version: str) -> str:
    config = '"{""M"": 4096}"'
    return (
        f"rms_norm,liger,full,speed,ms,H,hidden size,2048,0.1,0.09,0.11,{config},"
        f"NVIDIA H100 80GB HBM3,{ts},{version}\n"
    )


@pytest.fixture(scope="module")
def materialize() -> Any:
    spec = importlib.util.spec_from_file_location(
        "eval_materialize", ROOT / "benchmarks/eval/materialize.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["eval_materialize"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("liger")
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }

    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-c", "commit.gpgsign=false", *args],
            cwd=path,
            env=env,
            check=True,
            capture_output=True,
        )

    git("init", "-q", "-b", "main")
    data = path / "benchmark/data/all_benchmark_data.csv"
    data.parent.mkdir(parents=True)
    data.write_text(
        HEADER + line("2024-09-03 15:31:39", "0.2.1") + line("2026-02-28 00:23:15", "0.7.0")
    )
    git("add", "-A")
    git("commit", "-q", "-m", "data")
    git("checkout", "-q", "--orphan", "gh-pages")
    git("rm", "-q", "-rf", ".")
    for name, ts, version in (
        ("b6ed735", "2025-06-12 18:19:21", "0.5.10"),
        ("0a62700-v0.6.4", "2025-11-21 22:51:35", "0.6.4"),
        ("53a37a5", "2024-09-03 15:31:39", "0.2.1"),  # on the branch, not in commits.txt
    ):
        csv = path / "benchmarks" / name / "benchmark.csv"
        csv.parent.mkdir(parents=True)
        csv.write_bytes((HEADER + line(ts, version)).encode())
    (path / "benchmarks/detailed").mkdir()
    (path / "benchmarks/detailed/index.html").write_text("<html></html>\n")
    (path / "benchmarks/commits.txt").write_text("b6ed735\n0a62700-v0.6.4\n")
    git("add", "-A")
    git("commit", "-q", "-m", "pages")
    git("checkout", "-q", "main")
    return path


def test_writes_what_upstream_publishes(
    materialize: Any, repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "up"
    assert materialize.main(["--repo", str(repo), "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["folders"] == 3 and summary["cumulative_rows"] == 2
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == [
        "benchmark/data/all_benchmark_data.csv",
        "benchmarks/0a62700-v0.6.4/benchmark.csv",
        "benchmarks/53a37a5/benchmark.csv",
        "benchmarks/b6ed735/benchmark.csv",
        "benchmarks/commits.txt",
    ]
    # Upstream's order first, then what the branch holds that commits.txt leaves out.
    assert (out / "benchmarks/commits.txt").read_text() == "b6ed735\n0a62700-v0.6.4\n53a37a5\n"
    assert (out / "benchmarks/b6ed735/benchmark.csv").read_text() == HEADER + line(
        "2025-06-12 18:19:21", "0.5.10"
    )


def test_since_bounds_both_kinds_of_file(
    materialize: Any, repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "up"
    assert materialize.main(["--repo", str(repo), "--out", str(out), "--since", "2025-07-01"]) == 0
    assert json.loads(capsys.readouterr().out)["folders"] == 1
    assert [p.name for p in (out / "benchmarks").iterdir() if p.is_dir()] == ["0a62700-v0.6.4"]
    assert (out / "benchmarks/commits.txt").read_text() == "0a62700-v0.6.4\n"
    rows = (out / "benchmark/data/all_benchmark_data.csv").read_text().splitlines()
    assert len(rows) == 2 and rows[1].endswith("2026-02-28 00:23:15,0.7.0")
