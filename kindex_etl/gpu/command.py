"""The `rerun` command line, shared by `kindex-etl rerun` and `python -m kindex_etl.gpu`.

It is what every re-run request records as `howToRun`
(`kindex-etl rerun --version V --baseline V-1 --upstream U --warehouse W`), so that command must
run as recorded. `kindex-etl rerun` runs the Prefect flow (`flows/gpu_rerun.py`: one task per
script, one GPU each) when Prefect is installed; `python -m kindex_etl.gpu` (for a host without
Prefect) and `--no-prefect` run the same steps one script after another.

Exit status: 0 every script passed and rows came out; 1 the campaign finished but a script
failed, timed out or was skipped for time, or no rows came out (what did come out is still
written and uploaded); 2 refused or could not start (no GPU, a bad or unverifiable sdist, an
unknown kernel).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections.abc import Callable, Sequence
from typing import Any

from kindex_etl.errors import HarnessError, NoGPUError
from kindex_etl.gpu.runner import CampaignResult, run_campaign


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--version", required=True, help="the liger-kernel release to measure")
    p.add_argument("--baseline", default=None, help="the release to measure it against (V-1)")
    p.add_argument("--upstream", default=None, help="directory or s3:// URL to upload to")
    p.add_argument("--warehouse", default=None,
                   help="warehouse whose re-run request record gets the outcome")  # fmt: skip
    p.add_argument("--kernels", default=None, help="comma-separated kernels (default: all)")
    p.add_argument("--repeats", type=int, default=None,
                   help="runs of each version, interleaved (KINDEX_RERUN_REPEATS, 3)")  # fmt: skip
    p.add_argument("--gpus", default=None, help="comma-separated GPU indices (default: all)")
    p.add_argument("--shard-index", type=int, default=0, help="this shard (0-based)")
    p.add_argument("--shard-count", type=int, default=1, help="shards of the campaign")
    p.add_argument("--sdist", default=None, help="V's sdist (path or file://); default: PyPI")
    p.add_argument("--sha256", default=None, help="the sdist's expected sha256")
    p.add_argument("--wheel", default=None, help="install V from this wheel")
    p.add_argument("--baseline-sdist", default=None, help="V-1's sdist (for its src/)")
    p.add_argument("--baseline-wheel", default=None, help="install V-1 from this wheel")
    p.add_argument("--pip", action="store_true", help="install from the package index")
    p.add_argument("--output-dir", default=None, help="where to write the results locally")
    p.add_argument("--workdir", default=None, help="scratch folder (sdist, installs)")
    p.add_argument("--python", default=None, help="interpreter that runs the scripts")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds for every script (default: sized per script)")  # fmt: skip
    p.add_argument("--budget", type=float, default=None,
                   help="start no script after this many seconds")  # fmt: skip
    p.add_argument("--cache-dir", default=None, help="sdist cache (KINDEX_SDIST_CACHE)")
    p.add_argument("--pypi-url", default=None, help="index Simple API URL (KINDEX_PYPI_URL)")
    p.add_argument("--campaign-id", default=None)
    p.add_argument("--no-prefect", action="store_true", help="run without Prefect, serially")
    p.add_argument("--plan-only", action="store_true",
                   help="print the plan (scripts, skips, GPUs, slots); run nothing")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--device-time", action="store_true",
                   help="also time every point by device time (docs/reruns.md; runs here, "
                        "without Prefect)")  # fmt: skip


def _split(value: str | None) -> list[str] | None:
    items = [x.strip() for x in (value or "").split(",") if x.strip()]
    return items or None


def _common(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "kernels": _split(args.kernels),
        "repeats": args.repeats,
        "gpus": _split(args.gpus),
        "shard_index": args.shard_index,
        "shard_count": args.shard_count,
        "sdist": args.sdist,
        "wheel": args.wheel,
        "baseline_sdist": args.baseline_sdist,
        "baseline_wheel": args.baseline_wheel,
        "script_timeout_s": args.timeout,
        "budget_s": args.budget,
        "workdir": args.workdir,
        "output_dir": args.output_dir,
        "campaign_id": args.campaign_id,
    }


RunFlow = Callable[..., Any]


def _run(args: argparse.Namespace, run_flow: RunFlow | None) -> CampaignResult:
    device = getattr(args, "device_time", False)
    if run_flow is None or args.no_prefect or args.python or args.pip:
        result = run_campaign(
            args.version, baseline=args.baseline, upstream=args.upstream,
            sdist_sha256=args.sha256, use_pip_index=args.pip, python=args.python,
            cache=args.cache_dir, pypi=args.pypi_url, device_time=device, **_common(args),
        )  # fmt: skip
        if args.warehouse:
            report_back(args.warehouse, result)
        return result
    state = run_flow(
        liger_version=args.version, baseline_version=args.baseline, upstream=args.upstream,
        warehouse=args.warehouse, device_time=device, return_state=True, **_common(args),
    )  # fmt: skip
    data = state.result(raise_on_failure=False)
    if isinstance(data, dict) and "campaign_id" in data:
        return CampaignResult.from_dict(data)
    state.result()  # re-raises the flow's own error (NoGPUError, HarnessError, ...)
    raise RuntimeError(f"the re-run flow ended {state.type.value} without a campaign")


def _plan(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from kindex_etl.gpu.runner import prepare

    prep = prepare(
        args.version, baseline=args.baseline, sdist_sha256=args.sha256, use_pip_index=args.pip,
        python=args.python, cache=args.cache_dir, pypi=args.pypi_url, **_common(args),
    )  # fmt: skip
    plan = {
        "scripts": [asdict(s) | {"gpu": prep.assignment[s.kernel]} for s in prep.scripts],
        "skipped": [asdict(s) for s in prep.skipped],
        "gpus": prep.gpus,
        "slots": [asdict(s) for s in prep.slots],
        "environment": prep.environments[prep.version],
    }
    if prep.scratch:  # the temporary folder it prepared in (sdist, installs): nothing ran
        shutil.rmtree(prep.work, ignore_errors=True)
    print(json.dumps(plan, indent=1, sort_keys=True))
    return 0


def run_from_args(args: argparse.Namespace, run_flow: RunFlow | None = None) -> int:
    """Run the command; `run_flow` is the Prefect flow (`kindex-etl rerun` passes it: this
    package never imports flows/), without it the campaign runs here, one script at a time."""
    try:
        if args.plan_only:
            return _plan(args)
        result = _run(args, run_flow)
    except (NoGPUError, HarnessError, ValueError, OSError) as exc:
        print(f"kindex-etl rerun: refused: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.as_dict(), sort_keys=True))
    else:
        env = result.environment
        print(
            f"liger-kernel {result.version} against {result.baseline or 'nothing'} "
            f"on {env.get('gpu_name')}: campaign {result.campaign_id}"
        )
        for run in result.runs:
            print(f"  {run.run_id}: {run.rows} rows -> {run.uploaded_to or run.output_dir}")
            for s in run.slots:
                print(f"    {s.script} on GPU {s.gpu}: {s.state}, {s.rows} rows, {s.seconds:.1f} s")
        for skip in result.skipped:
            print(f"  skipped {skip.name}: {skip.reason}")
    return 0 if result.ok else 1


def report_back(warehouse: str, result: CampaignResult) -> None:
    """Write this shard's outcome into `_kindex/reruns/<version>.json` of the warehouse."""
    from kindex_etl.reruns import mark_finished

    record = mark_finished(
        warehouse,
        result.version,
        shard_index=result.shard_index,
        shard_count=result.shard_count,
        ok=result.ok,
        outcome={
            "campaignId": result.campaign_id,
            "runIds": result.run_ids,
            "uploadedTo": [r.uploaded_to for r in result.runs],
            "rows": result.rows,
            "finishedAt": result.finished_at,
        },
    )
    if record is None:
        print(f"note: {warehouse} holds no re-run request for {result.version}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kindex_etl.gpu", description=__doc__)
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv))
