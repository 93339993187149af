"""The re-run runner on CPU, with the STAND-IN harness (require_gpu=False: tests only)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from kindex_etl.contracts.upstream import UPSTREAM_COLUMNS as COLUMNS
from kindex_etl.gpu import NoGPUError, run_rerun
from kindex_etl.gpu.harness import HarnessError
from kindex_etl.gpu.runner import check_gpu

from .conftest import STANDIN_VERSION


def _rows(data: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(data.decode())))


def test_standin_run_selects_only_new_rows_and_uploads(standin_sdist: Path, tmp_path: Path) -> None:
    upstream = tmp_path / "upstream"
    result = run_rerun(
        STANDIN_VERSION,
        sdist=standin_sdist,
        workdir=tmp_path / "work",
        upstream=str(upstream),
        run_id="20260101T000000Z-test",
        require_gpu=False,  # the stand-in computes nothing; only tests may skip the GPU check
    )
    assert result.ok
    assert [s.kernel for s in result.scripts] == ["megatron_rms_norm", "rms_norm"]
    assert [s.rows for s in result.scripts] == [16, 16] and result.rows == 32
    assert all(s.returncode == 0 and not s.timed_out for s in result.scripts)

    prefix = upstream / "reruns" / STANDIN_VERSION / "20260101T000000Z-test"
    assert sorted(p.relative_to(prefix).as_posix() for p in prefix.rglob("*") if p.is_file()) == [
        "benchmark.csv",
        "environment.json",
        "logs/benchmark_megatron_rms_norm.log",
        "logs/benchmark_rms_norm.log",
        "run.json",
    ]
    data = (prefix / "benchmark.csv").read_bytes()
    assert data.splitlines()[0].decode() == ",".join(COLUMNS)
    rows = _rows(data)
    # The three rows the stand-in sdist shipped with (H100 0.8.0, an old H200 0.5.10) are not ours.
    assert len(rows) == 32
    assert {r["liger_version"] for r in rows} == {STANDIN_VERSION}
    assert {r["gpu_name"] for r in rows} == {"NVIDIA H200"}
    assert {r["kernel_name"] for r in rows} == {"megatron_rms_norm", "rms_norm"}

    env = json.loads((prefix / "environment.json").read_text())
    assert env["gpu_name"] == "NVIDIA H200"  # from the rows: the stand-in host has no GPU
    assert env["ligerKernel"] == STANDIN_VERSION
    assert env["software"]["python"] and env["software"]["hostCpu"]
    assert "ligerKernel" not in env["software"]  # the implementation is not the environment

    manifest = json.loads((prefix / "run.json").read_text())
    assert manifest["version"] == STANDIN_VERSION and manifest["rows"] == 32
    assert manifest["sdist"]["sha256"] == result.sdist["sha256"]
    assert manifest["uploaded_to"].endswith("reruns/9.9.9/20260101T000000Z-test/")
    log = (prefix / "logs" / "benchmark_rms_norm.log").read_text()
    assert "stand-in rms_norm: 16 rows" in log and "# finished: exit 0" in log


def test_a_failing_script_is_reported_and_the_rest_still_lands(
    standin_sdist: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_FAIL", "megatron_rms_norm")
    result = run_rerun(
        STANDIN_VERSION, sdist=standin_sdist, workdir=tmp_path / "w", require_gpu=False
    )
    assert not result.ok
    failed = {s.kernel: s for s in result.scripts}
    assert failed["megatron_rms_norm"].returncode == 3 and failed["rms_norm"].ok
    assert result.rows == 16
    log = Path(result.output_dir, failed["megatron_rms_norm"].log).read_text()
    assert "failing on purpose" in log


def test_a_hanging_script_is_killed_at_its_timeout(
    standin_sdist: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STANDIN_HANG", "rms_norm")
    result = run_rerun(
        STANDIN_VERSION,
        kernels=["rms_norm"],
        sdist=standin_sdist,
        workdir=tmp_path / "w",
        script_timeout_s=2,
        require_gpu=False,
    )
    (script,) = result.scripts
    assert script.timed_out and not result.ok and script.seconds < 30


def test_unknown_kernel_and_wrong_version_are_refused(standin_sdist: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no benchmark script for nope"):
        run_rerun(
            STANDIN_VERSION,
            kernels=["nope"],
            sdist=standin_sdist,
            workdir=tmp_path / "a",
            require_gpu=False,
        )
    with pytest.raises(HarnessError, match=r"9\.9\.9"):
        run_rerun("9.9.8", sdist=standin_sdist, workdir=tmp_path / "b", require_gpu=False)


def test_refuses_without_a_gpu(standin_sdist: Path, tmp_path: Path) -> None:
    # The default (require_gpu=True) on this CPU machine: torch missing, or no CUDA device.
    with pytest.raises(NoGPUError, match="GPU"):
        run_rerun(STANDIN_VERSION, sdist=standin_sdist, workdir=tmp_path / "w")
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
         "--workdir", str(tmp_path / "w")]
    )  # fmt: skip
    assert code == 2
    assert "refused" in capsys.readouterr().err


def _standin_wheel(dest: Path) -> Path:
    """A minimal wheel of the stand-in liger_kernel 9.9.9 (for the pip --target install path)."""
    import zipfile

    wheel = dest / f"liger_kernel-{STANDIN_VERSION}-py3-none-any.whl"
    dest.mkdir(parents=True, exist_ok=True)
    info = f"liger_kernel-{STANDIN_VERSION}.dist-info"
    files = {
        "liger_kernel/__init__.py": '"""STAND-IN liger_kernel wheel for tests."""\n',
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: liger_kernel\n"
        f"Version: {STANDIN_VERSION}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: kindex-tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        zf.writestr(f"{info}/RECORD", record)
    return wheel


def test_wheel_install_path(standin_sdist: Path, tmp_path: Path) -> None:
    wheel = _standin_wheel(tmp_path / "wheels")
    result = run_rerun(
        STANDIN_VERSION,
        kernels=["rms_norm"],
        sdist=standin_sdist,
        wheel=wheel,
        workdir=tmp_path / "w",
        require_gpu=False,
    )
    assert result.ok and result.rows == 16
    assert result.environment["ligerKernelPath"].startswith(str(tmp_path / "w" / "site"))
