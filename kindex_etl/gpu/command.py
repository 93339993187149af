"""The `rerun` command line, shared by `kindex-etl rerun` and `python -m kindex_etl.gpu`.

Exit status: 0 every script passed and rows came out; 1 the run finished but a script failed,
timed out or produced no rows (what did come out is still written and uploaded); 2 refused or
could not start (no GPU, a bad or unverifiable sdist, an unknown kernel).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from kindex_etl.gpu.harness import HarnessError
from kindex_etl.gpu.runner import (
    DEFAULT_KERNELS,
    DEFAULT_SCRIPT_TIMEOUT_S,
    NoGPUError,
    RerunResult,
    run_rerun,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--version", required=True, help="the liger-kernel release to measure")
    p.add_argument(
        "--upstream",
        default=None,
        help="directory or s3:// URL to upload reruns/<version>/<run-id>/ to",
    )
    p.add_argument(
        "--kernels",
        default=",".join(DEFAULT_KERNELS),
        help=f"comma-separated kernels (default: {','.join(DEFAULT_KERNELS)})",
    )
    p.add_argument(
        "--sdist",
        default=None,
        help="a local sdist (path or file://); default: fetch from PyPI, verified",
    )
    p.add_argument("--sha256", default=None, help="the sdist's expected sha256")
    p.add_argument(
        "--wheel",
        default=None,
        help="install liger-kernel from this wheel (pip --no-deps --target)",
    )
    p.add_argument(
        "--pip", action="store_true", help="install liger-kernel==VERSION from the package index"
    )
    p.add_argument("--output-dir", default=None, help="where to write the results locally")
    p.add_argument("--workdir", default=None, help="scratch folder (sdist, install)")
    p.add_argument("--python", default=None, help="interpreter that runs the scripts")
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_SCRIPT_TIMEOUT_S,
        help="seconds per benchmark script",
    )
    p.add_argument("--cache-dir", default=None, help="sdist cache (KINDEX_SDIST_CACHE)")
    p.add_argument("--pypi-url", default=None, help="index Simple API URL (KINDEX_PYPI_URL)")
    p.add_argument("--run-id", default=None)
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def run_from_args(args: argparse.Namespace) -> int:
    try:
        result = run_rerun(
            args.version,
            kernels=[k.strip() for k in args.kernels.split(",") if k.strip()],
            sdist=args.sdist,
            sdist_sha256=args.sha256,
            wheel=args.wheel,
            use_pip_index=args.pip,
            upstream=args.upstream,
            output_dir=args.output_dir,
            workdir=args.workdir,
            python=args.python,
            script_timeout_s=args.timeout,
            cache=args.cache_dir,
            pypi=args.pypi_url,
            run_id=args.run_id,
        )
    except (NoGPUError, HarnessError, ValueError, OSError) as exc:
        print(f"kindex-etl rerun: refused: {exc}", file=sys.stderr)
        return 2
    if args.warehouse:
        report_back(args.warehouse, result)
    if args.json:
        print(json.dumps(result.as_dict(), sort_keys=True))
    else:
        env = result.environment
        print(f"liger-kernel {result.version} on {env.get('gpu_name')}: run {result.run_id}")
        for s in result.scripts:
            state = "ok" if s.ok else ("timed out" if s.timed_out else f"exit {s.returncode}")
            print(f"  {s.script}: {state}, {s.rows} rows, {s.seconds:.1f} s ({s.log})")
        print(f"{result.rows} rows -> {result.output_dir}")
        if result.uploaded_to:
            print(f"uploaded to {result.uploaded_to}")
    return 0 if result.ok else 1


def report_back(warehouse: str, result: RerunResult) -> None:
    """Write the outcome into `_kindex/reruns/<version>.json` of the warehouse, if it exists."""
    from kindex_etl.reruns import mark_finished

    record = mark_finished(
        warehouse,
        result.version,
        state="succeeded" if result.ok else "failed",
        runId=result.run_id,
        uploadedTo=result.uploaded_to,
        rows=result.rows,
        finishedAt=result.finished_at,
    )
    if record is None:
        print(f"note: {warehouse} holds no re-run request for {result.version}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kindex_etl.gpu", description=__doc__)
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv))
