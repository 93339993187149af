"""Run the liger-kernel benchmark scripts of one release on this machine's GPU.

Plain Python, no Prefect (the GPU host needs only torch, triton and this package):
`flows/gpu_rerun.py` wraps `run_rerun` as a flow, `kindex-etl rerun` and
`python -m kindex_etl.gpu` call it directly.

What one run does, in order:
1. fetch and verify the sdist of `version` (harness.fetch_sdist), unpack it in a scratch folder;
2. make that exact liger-kernel importable (wheel / index via `pip --no-deps --target`, or the
   sdist's src/) and check, in the interpreter that will run the scripts, that
   `importlib.metadata.version("liger-kernel") == version`;
3. probe the environment (environment.collect_environment) and refuse with `NoGPUError` when
   torch is missing or sees no GPU (unless `require_gpu=False`, which only tests pass);
4. run `benchmark_<kernel>.py --overwrite` for each kernel from the sdist's benchmark/scripts/,
   each with a timeout (its process group is killed at the limit), stdout and stderr to
   logs/benchmark_<kernel>.log, TZ=UTC so its timestamps are UTC, and LIGER_BENCH_TARGET /
   LIGER_BENCH_PROVIDER_TAG unset so rows land in the usual file under the usual names;
5. select the rows the scripts wrote (collect.new_rows) into benchmark.csv;
6. write benchmark.csv, environment.json, run.json and logs/ to the output folder, and, when an
   upstream URL is given, upload them to `reruns/<version>/<run-id>/` there, the CSV last (so an
   ingest that sees the CSV also sees its environment.json).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kindex_etl.errors import NoGPUError
from kindex_etl.gpu import collect, harness
from kindex_etl.gpu.environment import collect_environment

# The kernels a re-run measures unless told otherwise: the RMSNorm pair (the Megatron layout
# and the Llama one), which together take under a minute on an H200. Any kernel whose script
# `benchmark/scripts/benchmark_<kernel>.py` ships in the sdist can be named instead.
DEFAULT_KERNELS: tuple[str, ...] = ("megatron_rms_norm", "rms_norm")
DEFAULT_SCRIPT_TIMEOUT_S = 1200.0
RERUNS_PREFIX = "reruns/"
_UNSET_VARS = ("LIGER_BENCH_TARGET", "LIGER_BENCH_PROVIDER_TAG")


@dataclass
class ScriptResult:
    kernel: str
    script: str
    log: str
    returncode: int | None
    seconds: float
    timed_out: bool = False
    rows: int = 0

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


@dataclass
class RerunResult:
    version: str
    run_id: str
    output_dir: str
    started_at: str
    finished_at: str
    rows: int
    scripts: list[ScriptResult]
    environment: dict[str, Any]
    sdist: dict[str, str]
    kernels: list[str] = field(default_factory=list)
    uploaded_to: str | None = None
    uploaded_keys: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.rows > 0 and all(s.ok for s in self.scripts)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        return out


def new_run_id(now: datetime | None = None) -> str:
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{uuid.uuid4().hex[:8]}"


def rerun_prefix(version: str, run_id: str) -> str:
    return f"{RERUNS_PREFIX}{version}/{run_id}/"


def child_env(libdir: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    for name in _UNSET_VARS:
        env.pop(name, None)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(libdir) + (os.pathsep + old if old else "")
    env["TZ"] = "UTC"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def check_gpu(environment: dict[str, Any]) -> None:
    """Raise NoGPUError with the reason when the probe saw no usable GPU."""
    if environment.get("cudaAvailable"):
        return
    probe = environment.get("probe") or {}
    if "torch" not in (environment.get("software") or {}):
        why = probe.get("torch_error") or probe.get("probe_error") or "torch is not importable"
        raise NoGPUError(f"GPU re-runs need torch with a GPU; torch is missing here ({why})")
    raise NoGPUError(
        "GPU re-runs need a GPU; torch is installed but torch.cuda.is_available() is False"
    )


def _run_script(
    python: str,
    script: Path,
    args: Sequence[str],
    env: dict[str, str],
    log_path: Path,
    timeout_s: float,
) -> tuple[int | None, float, bool]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [python, script.name, *args]
    start = time.monotonic()
    timed_out = False
    with log_path.open("w", encoding="utf-8") as log:
        log.write(f"# cwd: {script.parent}\n# command: {' '.join(cmd)}\n")
        log.write(f"# PYTHONPATH: {env.get('PYTHONPATH', '')}\n")
        log.write(f"# started: {datetime.now(UTC).isoformat(timespec='seconds')}\n")
        log.flush()
        proc = subprocess.Popen(
            cmd,
            cwd=script.parent,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            returncode: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            returncode = proc.wait()
        seconds = time.monotonic() - start
        log.write(
            f"\n# finished: exit {returncode}{' (timed out)' if timed_out else ''} "
            f"after {seconds:.1f} s\n"
        )
    return returncode, seconds, timed_out


def available_kernels(scripts_dir: Path) -> list[str]:
    return sorted(p.stem[len("benchmark_") :] for p in scripts_dir.glob("benchmark_*.py"))


def run_rerun(
    version: str,
    *,
    kernels: Sequence[str] | None = None,
    sdist: str | os.PathLike[str] | None = None,
    sdist_sha256: str | None = None,
    wheel: str | os.PathLike[str] | None = None,
    use_pip_index: bool = False,
    upstream: str | None = None,
    output_dir: str | os.PathLike[str] | None = None,
    workdir: str | os.PathLike[str] | None = None,
    python: str | None = None,
    script_timeout_s: float = DEFAULT_SCRIPT_TIMEOUT_S,
    script_args: Sequence[str] = ("--overwrite",),
    cache: str | os.PathLike[str] | None = None,
    pypi: str | None = None,
    run_id: str | None = None,
    require_gpu: bool = True,
) -> RerunResult:
    """Measure `kernels` of liger-kernel `version` here; see the module doc.

    `require_gpu=False` skips the GPU refusal. It exists for the CPU test suite's stand-in
    harness only; a real re-run never passes it.
    """
    py = python or sys.executable
    kernels = list(kernels or DEFAULT_KERNELS)
    work = Path(workdir) if workdir is not None else harness.scratch_dir()
    out = Path(output_dir) if output_dir is not None else work / "out"
    out.mkdir(parents=True, exist_ok=True)
    run_id = run_id or new_run_id()

    sd = harness.fetch_sdist(version, sdist=sdist, sha256=sdist_sha256, cache=cache, pypi=pypi)
    root = harness.extract_sdist(sd, work / "sdist")
    scripts_dir = root / "benchmark" / "scripts"
    missing = [k for k in kernels if not (scripts_dir / f"benchmark_{k}.py").is_file()]
    if missing:
        raise ValueError(
            f"liger-kernel {version} ships no benchmark script for {', '.join(missing)}; "
            f"it has: {', '.join(available_kernels(scripts_dir))}"
        )
    libdir = harness.install_liger(
        version, work / "site", sdist_root=root, wheel=wheel, use_pip_index=use_pip_index, python=py
    )
    env = child_env(libdir)
    environment = collect_environment(py, env)
    if require_gpu:
        check_gpu(environment)
    if environment.get("ligerKernel") != version:
        raise harness.HarnessError(
            f"the scripts would import liger-kernel {environment.get('ligerKernel')!r} "
            f"({environment.get('ligerKernelPath') or environment.get('probe')}), not {version}"
        )

    data_path = collect.data_file(root)
    before = data_path.read_bytes() if data_path.is_file() else b""
    started = datetime.now(UTC)
    results: list[ScriptResult] = []
    for kernel in kernels:
        script = scripts_dir / f"benchmark_{kernel}.py"
        log_name = f"logs/{script.stem}.log"
        snapshot = data_path.read_bytes() if data_path.is_file() else b""
        rc, seconds, timed_out = _run_script(
            py, script, script_args, env, out / log_name, script_timeout_s
        )
        after_one = data_path.read_bytes() if data_path.is_file() else b""
        rows_one = collect.new_rows(
            snapshot, after_one, started=started, version=version, gpu_name=None
        )
        results.append(
            ScriptResult(
                kernel, script.name, log_name, rc, round(seconds, 3), timed_out, len(rows_one)
            )
        )
    after = data_path.read_bytes() if data_path.is_file() else b""
    rows = collect.new_rows(
        before, after, started=started, version=version, gpu_name=environment.get("gpu_name")
    )
    if not environment.get("gpu_name"):
        names = sorted({r.get("gpu_name", "") for r in rows} - {""})
        if len(names) == 1:
            environment["gpu_name"] = names[0]
    finished = datetime.now(UTC)

    result = RerunResult(
        version=version,
        run_id=run_id,
        output_dir=str(out),
        started_at=started.isoformat(timespec="seconds"),
        finished_at=finished.isoformat(timespec="seconds"),
        rows=len(rows),
        scripts=results,
        environment=environment,
        sdist={"source": sd.source, "sha256": sd.sha256, "file": sd.path.name},
        kernels=kernels,
    )
    (out / "benchmark.csv").write_bytes(collect.to_csv(rows))
    (out / "environment.json").write_text(json.dumps(environment, indent=2, sort_keys=True) + "\n")
    write_manifest(result)
    if upstream:
        upload(result, upstream)
    return result


def write_manifest(result: RerunResult) -> None:
    """run.json: what ran, how it went, the sdist's sha256, where it was uploaded."""
    data = result.as_dict()
    for key in ("environment", "output_dir", "uploaded_keys"):
        data.pop(key, None)
    Path(result.output_dir, "run.json").write_text(json.dumps(data, indent=2) + "\n")


def upload(result: RerunResult, upstream: str) -> list[str]:
    """Copy the output folder to `reruns/<version>/<run-id>/` of the upstream store.

    Logs, environment.json and run.json go first and benchmark.csv last; a run with no rows
    uploads no CSV (there is nothing to ingest), but its logs still land for reading.
    """
    from kindex_etl.storage import open_store

    store = open_store(upstream, create=True)
    out = Path(result.output_dir)
    prefix = rerun_prefix(result.version, result.run_id)
    result.uploaded_to = store.url.rstrip("/") + "/" + prefix
    write_manifest(result)
    files = sorted(p for p in out.rglob("*") if p.is_file() and p.name != "benchmark.csv")
    if result.rows > 0 and (out / "benchmark.csv").is_file():
        files.append(out / "benchmark.csv")
    keys = []
    for path in files:
        key = prefix + path.relative_to(out).as_posix()
        store.put_bytes(key, path.read_bytes())
        keys.append(key)
    result.uploaded_keys = keys
    return keys
