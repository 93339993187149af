"""GPU re-runs: measure a liger-kernel release against the one before it with its own harness.

Plain Python with no Prefect import (the GPU host may not have it): `harness` (fetch, verify,
cache, unpack, install), `suite` (which scripts, skips, timeouts), `plan` (interleave, run ids,
shards, GPUs), `runner` (prepare, run one script, finish and upload), `collect` (pick our rows),
`environment` (facts about the host), `report` (the per-script table). `flows/gpu_rerun.py`
fans `runner.run_script` out over the GPUs as Prefect tasks.
"""

from kindex_etl.gpu.harness import HarnessError, Sdist, fetch_sdist
from kindex_etl.gpu.runner import (
    CampaignResult,
    NoGPUError,
    RunRecord,
    SlotResult,
    prepare,
    run_campaign,
)

__all__ = [
    "CampaignResult",
    "HarnessError",
    "NoGPUError",
    "RunRecord",
    "Sdist",
    "SlotResult",
    "fetch_sdist",
    "prepare",
    "run_campaign",
]
