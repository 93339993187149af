#!/usr/bin/env bash
# One paired device-time campaign on a GPU host with torch and triton (issue 53; docs/reruns.md,
# "Paired device time"): per kernel, a sitting of the baseline against itself (the protocol's
# own A/A) and one of the baseline against the candidate, each interleaving the two builds
# point by point. No Prefect; nothing but this repository on PYTHONPATH.
#   usage: scripts/paired_campaign.sh NAME SDIST BASELINE BASELINE_WHEEL CANDIDATE CANDIDATE_WHEEL KERNELS [BUDGET_S] [AB_KERNELS] [MEASURED_CAMPAIGN_JSON]
# AB_KERNELS (default: all of KERNELS) limits the A/B sitting to those kernels.
# Writes $OUT/NAME.tar.gz (campaign.json, sittings/*.jsonl and the sides' logs), $OUT/NAME.log.
set -o pipefail
name=$1 sdist=$2 base=$3 base_wheel=$4 cand=$5 cand_wheel=$6 kernels=$7 budget=${8:-480}
ab_kernels=${9:-$kernels} measured=${10:-}
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH=$root KINDEX_PAIR_SNAPSHOT=$out/$name.tar.gz
[ -f "$out/nvidia-smi-q.txt" ] || nvidia-smi -q > "$out/nvidia-smi-q.txt" 2>&1
python3 -m kindex_etl.gpu.device_pair --harness "$sdist" \
    --wheel "$base=$base_wheel" --wheel "$cand=$cand_wheel" \
    --sitting "aa=$base,$base" --sitting "ab=$base,$cand" \
    --kernels "$kernels" --only "ab=$ab_kernels" --budget "$budget" --timeout 300 --out "/tmp/campaign-$name" \
    --campaign-id "$name" ${measured:+--measured "$measured"} 2>&1 | tee "$out/$name.log"
rc=$?
echo "campaign $name exit $rc"  # $out/$name.tar.gz: written after every sitting
exit $rc
