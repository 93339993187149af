"""The campaign runner on CPU, with the STAND-IN harness and the STAND-IN torch (no Prefect).

The stand-in scripts write rows in the upstream schema and compute nothing; the stand-in torch
reports GPUs, so the runner's real GPU check passes without a GPU.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from kindex_etl.gpu import NoGPUError, prepare, run_campaign
from kindex_etl.gpu.harness import HarnessError
from kindex_etl.gpu.runner import check_gpu

from .conftest import BASELINE_VERSION, STANDIN_VERSION

TWO = ["rms_norm", "softmax"]


def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


def _trace(path: Path) -> list[tuple[str, str, str, float, float]]:
    out = []
    for line in path.read_text().splitlines():
        kernel, version, gpu, start, end = line.split(",")
        out.append((kernel, version, gpu, float(start), float(end)))
    return out


def test_ab_interleave_with_repeats_lands_as_separate_uploads(
    standin_sdist: Path,
    baseline_sdist: Path,
    standin_gpus: Callable[[int], None],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    standin_gpus(1)
    monkeypatch.setenv("STANDIN_TRACE", str(tmp_path / "trace"))
    upstream = tmp_path / "upstream"
    result = run_campaign(
        STANDIN_VERSION,
        baseline=BASELINE_VERSION,
        kernels=TWO,
        repeats=2,
        sdist=standin_sdist,
        baseline_sdist=baseline_sdist,
        workdir=tmp_path / "work",
        upstream=str(upstream),
        campaign_id="20260101T000000Z-test",
    )
    assert result.ok and result.gpus == ["0"]
    assert [(r.version, r.repeat, r.role) for r in result.runs] == [
        (STANDIN_VERSION, 1, "candidate"),
        (BASELINE_VERSION, 1, "baseline"),
        (STANDIN_VERSION, 2, "candidate"),
        (BASELINE_VERSION, 2, "baseline"),
    ]
    assert len(set(result.run_ids)) == 4

    # Per script the versions alternate on the GPU: V, V-1, V, V-1.
    trace = _trace(tmp_path / "trace")
    softmax = [t for t in trace if t[0] == "softmax"]
    assert [t[1] for t in softmax] == [STANDIN_VERSION, BASELINE_VERSION] * 2
    assert all(a[4] <= b[3] for a, b in itertools.pairwise(softmax))

    for run in result.runs:
        prefix = upstream / "reruns" / run.version / run.run_id
        assert run.uploaded_to is not None and run.uploaded_to.endswith(
            f"reruns/{run.version}/{run.run_id}/"
        )
        rows = _rows(prefix / "benchmark.csv")
        assert len(rows) == run.rows == 4 + 16  # softmax's stand-in 4, rms_norm's 16
        assert {r["liger_version"] for r in rows} == {run.version}
        manifest = json.loads((prefix / "run.json").read_text())
        assert manifest["runId"] == run.run_id and manifest["repeat"] == run.repeat
        assert manifest["campaignId"] == "20260101T000000Z-test"
        assert manifest["candidate"] == STANDIN_VERSION
        assert manifest["baseline"] == BASELINE_VERSION
        assert [s["kernel"] for s in manifest["scripts"]] == ["rms_norm", "softmax"]
        assert {s["gpu"] for s in manifest["scripts"]} == {"0"}
        env = json.loads((prefix / "environment.json").read_text())
        assert env["ligerKernel"] == run.version
    # One environment for both versions: the implementation under test is not the host.
    envs = {
        json.dumps(json.loads((Path(r.output_dir) / "environment.json").read_text())["software"])
        for r in result.runs
    }
    assert len(envs) == 1


def test_a_failing_and_a_hanging_script_do_not_stop_the_campaign(
    standin_sdist: Path,
    standin_gpus: Callable[[int], None],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    standin_gpus(1)
    monkeypatch.setenv("STANDIN_FAIL", "megatron_rms_norm")
    monkeypatch.setenv("STANDIN_HANG", "softmax")
    result = run_campaign(
        STANDIN_VERSION,
        kernels=["megatron_rms_norm", "softmax", "rms_norm"],
        repeats=1,
        sdist=standin_sdist,
        workdir=tmp_path / "w",
        script_timeout_s=2,
    )
    assert not result.ok
    (run,) = result.runs
    slots = {s.kernel: s for s in run.slots}
    assert slots["megatron_rms_norm"].returncode == 3 and slots["megatron_rms_norm"].rows == 0
    assert slots["softmax"].timed_out and slots["softmax"].seconds < 30
    assert slots["rms_norm"].ok and run.rows == 16
    log = Path(run.output_dir, slots["megatron_rms_norm"].log).read_text()
    assert "failing on purpose" in log
    manifest = json.loads(Path(run.output_dir, "run.json").read_text())
    assert {s["kernel"]: s["state"] for s in manifest["scripts"]} == {
        "megatron_rms_norm": "exit 3", "rms_norm": "ok", "softmax": "timed out",
    }  # fmt: skip


def test_no_slot_starts_past_the_budget(
    standin_sdist: Path, standin_gpus: Callable[[int], None], tmp_path: Path
) -> None:
    standin_gpus(1)
    result = run_campaign(
        STANDIN_VERSION, kernels=TWO, repeats=1, sdist=standin_sdist, workdir=tmp_path / "w",
        budget_s=0,
    )  # fmt: skip
    (run,) = result.runs
    assert [s.skipped for s in run.slots] == ["the campaign's time budget would be exceeded"] * 2
    assert run.rows == 0 and not result.ok


def test_the_budget_estimates_a_slot_by_its_scripts_measured_seconds(
    standin_sdist: Path, standin_gpus: Callable[[int], None], tmp_path: Path
) -> None:
    # rms_norm's catalog estimate is 17 s: a 17.5 s budget fits its first slot only by that
    # figure. Its measured seconds (well under one) estimate the next slots: all three run.
    standin_gpus(1)
    result = run_campaign(
        STANDIN_VERSION, kernels=["rms_norm"], repeats=3, sdist=standin_sdist,
        workdir=tmp_path / "w", budget_s=17.5,
    )  # fmt: skip
    slots = [s for run in result.runs for s in run.slots]
    assert len(slots) == 3 and all(s.ok for s in slots), [s.skipped for s in slots]


def test_unknown_kernel_and_wrong_version_are_refused(
    standin_sdist: Path, standin_gpus: Callable[[int], None], tmp_path: Path
) -> None:
    standin_gpus(1)
    with pytest.raises(ValueError, match="no benchmark script for nope"):
        prepare(STANDIN_VERSION, kernels=["nope"], sdist=standin_sdist, workdir=tmp_path / "a")
    with pytest.raises(HarnessError, match=r"9\.9\.9"):
        prepare("9.9.7", sdist=standin_sdist, workdir=tmp_path / "b")


def test_a_campaign_removes_its_own_temporary_folder_once_uploaded(
    standin_sdist: Path,
    standin_gpus: Callable[[int], None],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a workdir the campaign works in a folder of its own under the temp folder. It
    is removed once every run is uploaded; without an upload it holds the only copy: kept."""
    import tempfile

    standin_gpus(1)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    common = {"kernels": ["rms_norm"], "repeats": 1, "sdist": standin_sdist}
    uploaded = run_campaign(STANDIN_VERSION, upstream=str(tmp_path / "up"), **common)
    (run,) = uploaded.runs
    assert uploaded.ok and run.rows > 0 and run.uploaded_keys
    assert list(scratch.iterdir()) == []  # removed; the upload holds the run
    assert (tmp_path / "up" / "reruns" / STANDIN_VERSION / run.run_id / "benchmark.csv").is_file()

    kept = run_campaign(STANDIN_VERSION, **common)
    (run,) = kept.runs
    assert kept.ok and (Path(run.output_dir) / "benchmark.csv").is_file()
    assert Path(run.output_dir).is_relative_to(scratch)

    with pytest.raises(ValueError, match="no benchmark script for nope"):
        prepare(STANDIN_VERSION, kernels=["nope"], sdist=standin_sdist)
    assert len(list(scratch.iterdir())) == 1  # the failed preparation left nothing

    # `rerun --plan-only` prepares (sdist, install) and prints the plan: nothing to keep.
    from kindex_etl.cli import main

    plan = [
        "rerun", "--version", STANDIN_VERSION, "--sdist", str(standin_sdist),
        "--kernels", "rms_norm", "--plan-only",
    ]  # fmt: skip
    assert main(plan) == 0
    assert len(list(scratch.iterdir())) == 1


def test_refuses_without_a_gpu(standin_sdist: Path, tmp_path: Path) -> None:
    # No stand-in torch: on this CPU machine torch is missing, or sees no CUDA device.
    with pytest.raises(NoGPUError, match="GPU"):
        run_campaign(STANDIN_VERSION, sdist=standin_sdist, workdir=tmp_path / "w")
    with pytest.raises(NoGPUError, match="torch is missing"):
        check_gpu({"software": {}, "probe": {"torch_error": "ModuleNotFoundError: torch"}})
    with pytest.raises(NoGPUError, match="is_available"):
        check_gpu({"software": {"torch": "2.11.0"}, "cudaAvailable": False})
    check_gpu({"software": {"torch": "2.11.0"}, "cudaAvailable": True})


def test_cli_refuses_without_gpu_with_nonzero_exit(
    standin_sdist: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kindex_etl.cli import main

    code = main(
        ["rerun", "--version", STANDIN_VERSION, "--sdist", str(standin_sdist),
         "--workdir", str(tmp_path / "w"), "--no-prefect"]
    )  # fmt: skip
    assert code == 2
    assert "refused" in capsys.readouterr().err


def _standin_wheel(dest: Path, version: str) -> Path:
    """A minimal wheel of the stand-in liger_kernel (for the pip --target install path)."""
    wheel = dest / f"liger_kernel-{version}-py3-none-any.whl"
    dest.mkdir(parents=True, exist_ok=True)
    info = f"liger_kernel-{version}.dist-info"
    files = {
        "liger_kernel/__init__.py": '"""STAND-IN liger_kernel wheel for tests."""\n',
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: liger_kernel\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: kindex-tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        zf.writestr(f"{info}/RECORD", record)
    return wheel


def test_wheels_install_both_versions(
    standin_sdist: Path, standin_gpus: Callable[[int], None], tmp_path: Path
) -> None:
    standin_gpus(1)
    prep = prepare(
        STANDIN_VERSION,
        baseline=BASELINE_VERSION,
        kernels=["rms_norm"],
        sdist=standin_sdist,
        wheel=_standin_wheel(tmp_path / "wheels", STANDIN_VERSION),
        baseline_wheel=_standin_wheel(tmp_path / "wheels", BASELINE_VERSION),
        workdir=tmp_path / "w",
    )
    for version in (STANDIN_VERSION, BASELINE_VERSION):
        path = prep.environments[version]["ligerKernelPath"]
        assert path.startswith(str(tmp_path / "w" / f"site-{version}"))
    assert len(prep.slots) == 2 * 3  # KINDEX_RERUN_REPEATS's default, 3
