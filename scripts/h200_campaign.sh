#!/usr/bin/env bash
# One shard of the liger-kernel 0.8.5 against 0.8.4 campaign on a lent H200, as it was run
# (docs/h200-campaign-0.8.5-vs-0.8.4.md). Run from a copy of this repository (.gpuwork) beside
# the carried wheels (.whl: Prefect and what it needs, py3.12) and liger files (.liger).
#   usage: scripts/h200_campaign.sh SHARD_INDEX SHARD_COUNT CAMPAIGN_ID KERNELS [BUDGET_S]
# (On 2026-12-01 this called `python3 -m kindex_etl.gpu`, which then ran the flow; the flow is
# now reached through `kindex-etl rerun` only, so kindex_etl/ never imports flows/.)
set -o pipefail
shard=$1 count=$2 campaign=$3 kernels=$4 budget=${5:-450}
root=$(cd "$(dirname "$0")/.." && pwd)
carried=$(cd "$root/.." && pwd)
out=${OUT:-/tmp/out}
export PYTHONUNBUFFERED=1 DO_NOT_TRACK=1 PREFECT_SERVER_ANALYTICS_ENABLED=false
export PREFECT_HOME=/tmp/prefect-home PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=120
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$carried"/.whl/*.whl || exit 3
export PYTHONPATH=/tmp/site:$root
cd "$root" || exit 3
nvidia-smi -q > "$out/nvidia-smi-q.txt" 2>&1
lscpu > "$out/lscpu.txt" 2>&1
l=$carried/.liger
args=(--version 0.8.5 --baseline 0.8.4 --sdist "$l/liger_kernel-0.8.5.tar.gz"
      --wheel "$l/liger_kernel-0.8.5-py3-none-any.whl"
      --baseline-wheel "$l/liger_kernel-0.8.4-py3-none-any.whl" --workdir /tmp/work)
if [ "$shard" = 0 ]; then  # the whole suite's plan on this host: what runs, what is skipped, why
    python3 -m kindex_etl.cli rerun "${args[@]}" --plan-only > "$out/suite-plan.json" 2> "$out/plan.err"
    echo "plan exit $?"
fi
python3 -m kindex_etl.cli rerun "${args[@]}" --kernels "$kernels" --repeats 2 \
    --shard-index "$shard" --shard-count "$count" --campaign-id "$campaign" --budget "$budget" \
    --upstream /tmp/upstream --output-dir /tmp/campaign-out --json > "$out/result.json"
echo "campaign exit $?"
tar czf "$out/upstream-shard$shard.tar.gz" -C /tmp upstream
cp /tmp/campaign-out/campaign.json "$out/campaign-shard$shard.json" 2>/dev/null
ls -la "$out"
