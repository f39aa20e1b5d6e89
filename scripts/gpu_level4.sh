#!/usr/bin/env bash
# GPU validation of the suite's level 4 (whole transformers models), in two modes:
#   correctness: `suite validate --level 4` at full and heldout sizes (every problem check,
#                the five solutions without timing), two at once: the models are 0.1-1.5B
#                parameters in fp32 and each evaluation holds two copies
#   timing:      each level-4 solution at full size, one at a time, timed against eager and
#                against `torch.compile` of the reference (speedups in timing.md)
# Solutions keep part of the model in PyTorch, as the manifest's level-4 policy allows (their
# kernels must carry at least its share of the GPU time).
# usage: scripts/gpu_level4.sh BINARY OUTDIR correctness|timing [extra eval args]
set -uo pipefail
B=${1:?binary}; OUT=${2:?outdir}; MODE=${3:?mode}; shift 3
S=${TF_STATE:-/tmp/tf-gpu-level4}
mkdir -p "$OUT"
# The problems are written against transformers 5.23.0 (the managed environment's pin); a
# system python with another version may build different models or refuse a config field.
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)" \
  | tee "$OUT/level4_versions.txt"
grep -q "transformers 5.23.0" "$OUT/level4_versions.txt" || echo "warning: not transformers 5.23.0" >&2
tf() { "$B" --python python3 --state-dir "$S" "$@"; }
case "$MODE" in
  correctness)
    tf suite validate --level 4 ${L4_VARIANTS:---variant full --variant heldout} --no-timing --jobs ${JOBS:-2} \
      --json > "$OUT/level4_validate.json" 2> "$OUT/level4_validate.err"; echo "exit $?" >> "$OUT/level4_validate.err"
    python3 -c "import json; v=json.load(open('$OUT/level4_validate.json')); print(v['problems_checked'], 'problem variants,', v['solutions_checked'], 'solutions,', len(v['findings']), 'findings'); [print(' ', f) for f in v['findings']]"
    ;;
  timing)
    # One pair at a time, from bench/ itself, so the manifest's tolerances apply.
    : > "$OUT/level4_timing.jsonl"; : > "$OUT/level4_timing.err"
    for c in ${L4_ONLY:-bench/solutions/level4/*.py}; do
      tf eval --json --variant full --compile-baseline "$@" \
        --problem "bench/level4/$(basename "$c")" --candidate "$c" \
        >> "$OUT/level4_timing.jsonl" 2>> "$OUT/level4_timing.err"; echo "$(basename "$c"): exit $?" >> "$OUT/level4_timing.err"
    done
    python3 - "$OUT" <<'PY' | tee "$OUT/timing.md"
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
rows = [json.loads(l) for l in (out / "level4_timing.jsonl").read_text().splitlines() if l.strip().startswith("{")]
print("| problem | status | eager ms | torch.compile ms | triton ms | vs eager | vs compile | kernels' GPU share |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in sorted(rows, key=lambda r: r.get("problem", {}).get("name", "")):
    t = r.get("timing")
    prov = r.get("provenance") or {}
    # The policy's figure: the kernels' share of the timed calls' GPU window (the
    # profiler's gpu_share is only there with --profile).
    share = prov.get("gpu_share") if prov.get("gpu_share") is not None else prov.get("window_share")
    share = f"{share:.2f}" if isinstance(share, (int, float)) else "-"
    name = r.get("problem", {}).get("name", "?")
    if not t:
        print(f"| {name} | {r.get('status')} | - | - | - | - | - | {share} |")
        continue
    ref, cand, comp = t["reference"]["median_ms"], t["candidate"]["median_ms"], t.get("compiled")
    comp_ms = comp["median_ms"] if comp else None
    vs_comp = f"{comp_ms / cand:.2f}" if comp_ms else "-"
    comp_s = f"{comp_ms:.2f}" if comp_ms else "-"
    print(f"| {name} | {r['status']} | {ref:.2f} | {comp_s} | {cand:.2f} | {t['speedup']:.2f} | {vs_comp} | {share} |")
PY
    ;;
  *) echo "mode must be correctness or timing" >&2; exit 2 ;;
esac
