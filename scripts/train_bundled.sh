#!/usr/bin/env bash
# The bundled model's whole recipe, one command from the repository root:
#   scripts/train_bundled.sh [TRITONFORGE] [--python PY]
# 1. `bench synth`: 4,800 synthetic problems (seed 1), each solution and planted wrong
#    attempt checked by the evaluator (CPU mode at `small` size without a GPU; about
#    22-35 minutes on 2 cores), 10% held out of training;
# 2. `data build` (configs/bundled/data.toml): synthetic + suite train pairs, agent templates;
# 3. `train sft` (configs/bundled/sft.toml): LoRA on SmolLM2-135M-Instruct (needs a GPU;
#    a few minutes on an H100), exported to runs/bundled-stage1 (the first-stage adapter);
# 4. repair rows: the first-stage adapter plays the suite's first 24 level-1 train problems
#    (2 samples) and the synthetic set's first 30 train problems with two turns; every
#    unsolved episode becomes its first attempt, the evaluator's feedback and the reference
#    solution (configs/bundled/data-repair.toml; docs/bundled-model.md, "Repair rows");
# 5. `train sft` again from the base (configs/bundled/sft-repair.toml) on that set,
#    exported to runs/bundled-stage2;
# 6. repair rows, round two: the stage-two adapter plays the suite's other 57 level-1 train
#    problems (2 samples, two turns); `data build` (configs/bundled/data-repair2.toml) adds
#    its unsolved episodes to step 4's set;
# 7. `train sft` from the base (configs/bundled/sft-repair2.toml) on that set;
# 8. export the adapter (bf16, ≤ 16 MiB) to models/tritonforge-smollm2/, which the binary
#    carries: rebuild it (`cargo build --release`) and `tritonforge run` uses the new one.
# Steps whose output exists are skipped (delete data/bundled or runs/bundled* to redo them).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-target/release/tritonforge}; shift || true
if [ ! -f data/bundled/synth/manifest.toml ]; then
  "$B" "$@" bench synth --count 4800 --seed 1 --heldout 0.1 --attempts 0.3 --out data/bundled/synth
fi
if [ ! -f data/bundled/tok/tokenizer.json ]; then
  "$B" "$@" tokenizer export --model smollm2 --out data/bundled/tok
fi
if [ ! -f data/bundled/sft/train.jsonl ]; then
  "$B" "$@" data build --config configs/bundled/data.toml
fi
if ! ls -d runs/bundled/checkpoint-* > /dev/null 2>&1; then
  "$B" "$@" train sft --config configs/bundled/sft.toml
fi
if [ ! -f runs/bundled-stage1/adapter_config.json ]; then
  python3 scripts/export_adapter.py runs/bundled runs/bundled-stage1
fi
# The store records problem paths as given, and the data config reads them from here. A
# state directory of its own keeps other runs' episodes out; the environment is the usual one.
. scripts/repair_play.sh
G=(--state-dir "$REPAIR_STATE" --venv "${TRITONFORGE_VENV:-.tritonforge/venv}")
R=(--model "$PWD/runs/bundled-stage1" "${REPAIR_RUN[@]}" --out data/bundled/repair-report)
if [ ! -f "$REPAIR_STATE/played" ]; then
  "$B" "$@" "${G[@]}" run "${R[@]}" "${REPAIR_SUITE[@]}"
  "$B" "$@" "${G[@]}" run "${R[@]}" "${REPAIR_SYNTH[@]}"
  touch "$REPAIR_STATE/played"
fi
if [ ! -f data/bundled/sft-repair/train.jsonl ]; then
  "$B" "$@" "${G[@]}" data build --config configs/bundled/data-repair.toml
fi
if ! ls -d runs/bundled-repair/checkpoint-* > /dev/null 2>&1; then
  "$B" "$@" train sft --config configs/bundled/sft-repair.toml
fi
if [ ! -f runs/bundled-stage2/adapter_config.json ]; then
  python3 scripts/export_adapter.py runs/bundled-repair runs/bundled-stage2
fi
G2=(--state-dir "$REPAIR2_STATE" --venv "${TRITONFORGE_VENV:-.tritonforge/venv}")
if [ ! -f "$REPAIR2_STATE/played" ]; then
  "$B" "$@" "${G2[@]}" run --model "$PWD/runs/bundled-stage2" "${REPAIR_RUN[@]}" \
    --out data/bundled/repair2-report "${REPAIR2_SUITE[@]}"
  touch "$REPAIR2_STATE/played"
fi
if [ ! -f data/bundled/sft-repair2/train.jsonl ]; then
  "$B" "$@" "${G2[@]}" data build --config configs/bundled/data-repair2.toml
fi
if ! ls -d runs/bundled-repair2/checkpoint-* > /dev/null 2>&1; then
  "$B" "$@" train sft --config configs/bundled/sft-repair2.toml
fi
python3 scripts/export_adapter.py runs/bundled-repair2 models/tritonforge-smollm2
