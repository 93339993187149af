#!/usr/bin/env bash
# One device-time campaign on a GPU host that has torch and triton (the lent H200): the two
# builds interleaved with repeats, every point timed by upstream's timer AND by device time
# (docs/reruns.md, "Device time"). No Prefect, nothing but this repository on PYTHONPATH.
#   usage: scripts/device_campaign.sh NAME SDIST VERSION WHEEL BASELINE BASELINE_WHEEL KERNELS REPEATS [BUDGET_S]
# Writes $OUT/NAME.tar.gz (the campaign folder: campaign.json, per run benchmark.csv,
# device_time.json, run.json, environment.json, logs) and $OUT/NAME.json (the command's JSON).
set -o pipefail
name=$1 sdist=$2 version=$3 wheel=$4 baseline=$5 baseline_wheel=$6 kernels=$7 repeats=$8
budget=${9:-500}
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$root
[ -f "$out/nvidia-smi-q.txt" ] || nvidia-smi -q > "$out/nvidia-smi-q.txt" 2>&1
python3 -m kindex_etl.gpu --version "$version" --baseline "$baseline" --sdist "$sdist" \
    --wheel "$wheel" --baseline-wheel "$baseline_wheel" --kernels "$kernels" \
    --repeats "$repeats" --device-time --campaign-id "$name" --budget "$budget" \
    --workdir "/tmp/work-$name" --output-dir "/tmp/campaign-$name" \
    --json > "$out/$name.json"
rc=$?
echo "campaign $name exit $rc"
tar czf "$out/$name.tar.gz" -C /tmp "campaign-$name"
exit $rc
