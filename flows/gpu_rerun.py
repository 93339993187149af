"""The GPU re-run flow: measure a liger-kernel release on our own GPU, upload the results.

Deployed as `kindex-gpu-rerun/gpu-rerun` (KINDEX_RERUN_DEPLOYMENT) on a work pool whose worker
runs on a GPU host; the ingest starts it with `run_deployment(..., timeout=0)` when it sees a
new release (kindex_etl/trigger). The work itself is `kindex_etl.gpu.run_rerun` (plain
Python, also `kindex-etl rerun`); see docs/reruns.md.

It uploads `benchmark.csv`, `environment.json`, `run.json` and `logs/` under
`reruns/<version>/<run-id>/` of the upstream, where the next ingest picks them up with the host's
software recorded in their ExecutionEnvironment. Without a GPU it fails at once with NoGPUError.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NONE

from kindex_etl.gpu import DEFAULT_KERNELS, RerunResult, run_rerun
from kindex_etl.gpu.runner import DEFAULT_SCRIPT_TIMEOUT_S


@task(name="run-benchmarks", cache_policy=NONE)
def run_benchmarks(**kwargs: Any) -> RerunResult:
    # No retries: GPU time is the scarce thing, and a failed script's log says what to fix.
    return run_rerun(**kwargs)


@task(name="report-to-warehouse", retries=3, retry_delay_seconds=[2, 10, 30], cache_policy=NONE)
def report_back(warehouse: str, result: RerunResult) -> None:
    from kindex_etl.gpu.command import report_back as report

    report(warehouse, result)


def _markdown(result: RerunResult) -> str:
    env = result.environment
    lines = [
        f"# GPU re-run of liger-kernel {result.version}",
        "",
        f"GPU {env.get('gpu_name')}, run `{result.run_id}`, {result.rows} rows"
        + (f", uploaded to `{result.uploaded_to}`" if result.uploaded_to else ""),
        "",
        "| script | state | rows | seconds |",
        "| --- | --- | --- | --- |",
    ]
    for s in result.scripts:
        state = "ok" if s.ok else ("timed out" if s.timed_out else f"exit {s.returncode}")
        lines.append(f"| {s.script} | {state} | {s.rows} | {s.seconds:.1f} |")
    lines += ["", "Software: " + ", ".join(f"{k} {v}" for k, v in env["software"].items())]
    return "\n".join(lines) + "\n"


@flow(name="kindex-gpu-rerun", log_prints=False)
def gpu_rerun_flow(
    liger_version: str,
    upstream: str | None = None,
    kernels: list[str] | None = None,
    sdist: str | None = None,
    wheel: str | None = None,
    warehouse: str | None = None,
    script_timeout_s: float = DEFAULT_SCRIPT_TIMEOUT_S,
    require_gpu: bool = True,
) -> dict[str, Any]:
    """Run `kernels` (default: megatron_rms_norm, rms_norm) of `liger_version` on this GPU.

    `upstream` (default KINDEX_UPSTREAM) receives the results; `sdist` / `wheel` are local files
    for hosts without network (default: the sdist from PyPI, sha256-verified and cached);
    `warehouse`, when given, gets the outcome written into the version's request record.
    `require_gpu=False` exists for the CPU test suite's stand-in harness only.
    """
    from prefect.artifacts import create_markdown_artifact

    from kindex_etl.config import settings

    logger = get_run_logger()
    target = upstream or settings().upstream
    result = run_benchmarks(
        version=liger_version,
        kernels=kernels or list(DEFAULT_KERNELS),
        sdist=sdist,
        wheel=wheel,
        upstream=target,
        script_timeout_s=script_timeout_s,
        require_gpu=require_gpu,
    )
    logger.info("%d rows from %s, uploaded to %s", result.rows, result.run_id, result.uploaded_to)
    create_markdown_artifact(
        _markdown(result), key=f"gpu-rerun-{liger_version.replace('.', '-')}".lower()[:64]
    )
    if warehouse:
        report_back(warehouse, result)
    if not result.ok:
        failed = [s.script for s in result.scripts if not s.ok]
        raise RuntimeError(
            f"re-run {result.run_id} of {liger_version}: {result.rows} rows; "
            f"failed scripts: {', '.join(failed) or 'none'} (logs in {result.uploaded_to})"
        )
    return result.as_dict()
