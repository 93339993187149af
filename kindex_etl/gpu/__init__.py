"""GPU re-runs: measure a liger-kernel release with its own benchmark harness, on our GPU.

Plain Python with no Prefect import (the GPU host may not have it): `harness` (fetch, verify,
cache, unpack, install), `runner` (run the scripts, upload), `collect` (pick our rows),
`environment` (facts about the host). `flows/gpu_rerun.py` wraps `run_rerun` as a flow.
"""

from kindex_etl.gpu.harness import HarnessError, Sdist, fetch_sdist
from kindex_etl.gpu.runner import DEFAULT_KERNELS, NoGPUError, RerunResult, ScriptResult, run_rerun

__all__ = [
    "DEFAULT_KERNELS",
    "HarnessError",
    "NoGPUError",
    "RerunResult",
    "ScriptResult",
    "Sdist",
    "fetch_sdist",
    "run_rerun",
]
