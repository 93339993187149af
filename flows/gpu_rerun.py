"""The GPU re-run flow: a campaign of liger-kernel V against V-1 on this host's GPUs.

Deployed as `kindex-gpu-rerun/gpu-rerun` (KINDEX_RERUN_DEPLOYMENT) on the `kindex-gpu` work pool,
whose worker lives on a GPU host; the ingest starts one flow run per shard (kindex_etl.reruns).
The work is plain Python in `kindex_etl.gpu.runner`; this module only decorates it:

- one task per benchmark script, submitted to a thread pool and pinned to one GPU
  (CUDA_VISIBLE_DEVICES), each holding the Prefect global concurrency limit of its GPU
  (`kindex-gpu-<host>-<index>`, limit 1), so no two scripts share a GPU at once;
- an artifact with the per-script table; the request record updated when `warehouse` is given.
"""

from __future__ import annotations

import socket
from typing import Any

from prefect import allow_failure, flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NONE
from prefect.concurrency.sync import concurrency
from prefect.states import Failed, State
from prefect.task_runners import ThreadPoolTaskRunner

from kindex_etl import flow_runs
from kindex_etl.gpu import runner
from kindex_etl.gpu.report import markdown, slot_table
from kindex_etl.gpu.suite import Script

# Threads only wait on GPU slots; the per-GPU limits, not this number, bound the GPU work.
MAX_THREADS = 64


def gpu_limit_name(gpu: str | None, host: str | None = None) -> str:
    return f"kindex-gpu-{host or socket.gethostname()}-{gpu if gpu is not None else 'any'}"


def ensure_gpu_limits(gpus: list[str | None]) -> list[str]:
    from prefect.client.orchestration import get_client

    names = [gpu_limit_name(g) for g in gpus]
    with get_client(sync_client=True) as client:
        for name in names:
            client.upsert_global_concurrency_limit_by_name(name, 1)
    return names


@task(name="prepare", cache_policy=NONE)
def prepare_task(**kwargs: Any) -> runner.Prepared:
    return runner.prepare(**kwargs)


@task(name="benchmark-script", task_run_name="{script.kernel} on GPU {gpu}", cache_policy=NONE)
def script_task(prep: runner.Prepared, script: Script, gpu: str | None) -> list[runner.SlotResult]:
    # No retries: GPU time is the scarce thing, and a failed script's log says what to fix.
    logger = get_run_logger()
    with concurrency(gpu_limit_name(gpu), occupy=1, strict=True, lease_duration=3600):
        logger.info(
            "%s pinned to GPU %s (CUDA_VISIBLE_DEVICES=%s, %s), timeout %.0f s",
            script.name, gpu, gpu, prep.gpu_uuid(gpu) or "uuid unknown", script.timeout_s,
        )  # fmt: skip
        results = runner.run_script(prep, script, gpu)
    for r in results:
        logger.info(
            "%s %s r%d on GPU %s: %s, %d rows, %.1f s",
            r.kernel, r.version, r.repeat, r.gpu, r.state, r.rows, r.seconds,
        )  # fmt: skip
    return results


@task(name="finish-and-upload", cache_policy=NONE)
def finish_task(
    prep: runner.Prepared, results: list[runner.SlotResult], upstream: str | None
) -> runner.CampaignResult:
    return runner.finish(prep, results, upstream)


@task(name="report-to-warehouse", retries=3, retry_delay_seconds=[2, 10, 30], cache_policy=NONE)
def report_task(warehouse: str, result: runner.CampaignResult) -> None:
    from kindex_etl.gpu.command import report_back

    report_back(warehouse, result)


@flow(
    name="kindex-gpu-rerun",
    log_prints=False,
    task_runner=ThreadPoolTaskRunner(MAX_THREADS),  # type: ignore[arg-type]
    on_running=[flow_runs.remember],  # a stopped command ends it Cancelled in Prefect
)
def gpu_rerun_flow(
    liger_version: str,
    baseline_version: str | None = None,
    upstream: str | None = None,
    warehouse: str | None = None,
    kernels: list[str] | None = None,
    repeats: int | None = None,
    gpus: list[str] | None = None,
    shard_index: int = 0,
    shard_count: int = 1,
    sdist: str | None = None,
    wheel: str | None = None,
    baseline_sdist: str | None = None,
    baseline_wheel: str | None = None,
    script_timeout_s: float | None = None,
    budget_s: float | None = None,
    workdir: str | None = None,
    output_dir: str | None = None,
    campaign_id: str | None = None,
    device_time: bool = False,
) -> dict[str, Any] | State:
    """Measure every script (or `kernels`) of `liger_version`, and of `baseline_version` with
    the same harness, interleaved, `repeats` times; this flow run does shard `shard_index`.

    `upstream` (default KINDEX_UPSTREAM) receives one upload per version and repeat; `sdist`,
    `wheel`, `baseline_*` are local files for hosts without network (default: PyPI, verified);
    `gpus` overrides the GPUs found; `budget_s` stops starting scripts after that many seconds.
    `device_time`: time every point by device time as well as by upstream's timer
    (docs/reruns.md, "Device time"); the upload then holds device_time.csv too.
    """
    from kindex_etl.config import settings

    logger = get_run_logger()
    target = upstream or settings().upstream
    prep = prepare_task(
        version=liger_version, baseline=baseline_version, kernels=kernels, repeats=repeats,
        sdist=sdist, wheel=wheel, baseline_sdist=baseline_sdist, baseline_wheel=baseline_wheel,
        gpus=gpus, shard_index=shard_index, shard_count=shard_count,
        script_timeout_s=script_timeout_s, budget_s=budget_s, workdir=workdir,
        output_dir=output_dir, campaign_id=campaign_id, device_time=device_time,
    )  # fmt: skip
    for s in prep.skipped:
        logger.info("skipped %s: %s", s.name, s.reason)
    ensure_gpu_limits(prep.gpus)
    # Each GPU's scripts are chained (wait_for the one before): the next starts the moment the
    # GPU is free, where a task left waiting on the limit would poll it with back-off (up to
    # ~30 s of idle GPU seen on the H200). The limit still guards the GPU against other runs.
    futures = []
    last: dict[str | None, Any] = {}
    for script in prep.scripts:
        gpu = prep.assignment[script.kernel]
        before = [allow_failure(last[gpu])] if gpu in last else []
        last[gpu] = script_task.submit(prep, script, gpu, wait_for=before)  # type: ignore[call-overload]
        futures.append(last[gpu])
    results: list[runner.SlotResult] = []
    for future in futures:
        results += future.result()
    result = finish_task(prep, results, target)
    logger.info(
        "campaign %s: %d runs, %d rows, uploaded to %s",
        result.campaign_id, len(result.runs), result.rows,
        ", ".join(r.uploaded_to or "-" for r in result.runs),
    )  # fmt: skip
    key = f"gpu-rerun-{liger_version}-shard-{shard_index}".replace(".", "-").lower()[:64]
    create_table_artifact(key=key, table=slot_table(result), description=markdown(result))
    create_markdown_artifact(key=f"{key}-summary"[:64], markdown=markdown(result))
    if warehouse:
        report_task(warehouse, result)
    if not result.ok:
        slots = [s for r in result.runs for s in r.slots]
        failed = sorted({f"{s.script} ({s.state})" for s in slots if not s.ok})
        # A Failed state that still carries the campaign: callers read what was uploaded.
        return Failed(
            message=f"campaign {result.campaign_id} of {liger_version}: {result.rows} rows; "
            f"not ok: {', '.join(failed) or 'no rows'}",
            data=result.as_dict(),
        )
    return result.as_dict()
