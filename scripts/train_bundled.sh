#!/usr/bin/env bash
# The bundled model's whole recipe, one command from the repository root:
#   scripts/train_bundled.sh [TRITONFORGE] [--python PY]
# 1. `bench synth`: 4,800 synthetic problems (seed 1), each solution and planted wrong
#    attempt checked by the evaluator (CPU mode at `small` size without a GPU; about
#    22 minutes on 2 cores), 10% held out of training;
# 2. `data build` (configs/bundled/data.toml): synthetic + suite train pairs, agent templates;
# 3. `train sft` (configs/bundled/sft.toml): LoRA on SmolLM2-135M-Instruct (needs a GPU;
#    a few minutes on an H100);
# 4. export the adapter (bf16, ≤ 16 MiB) to models/tritonforge-smollm2/, which the binary
#    carries: rebuild it (`cargo build --release`) and `tritonforge run` uses the new one.
# Steps whose output exists are skipped (delete data/bundled or runs/bundled to redo them).
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
python3 scripts/export_adapter.py runs/bundled models/tritonforge-smollm2
