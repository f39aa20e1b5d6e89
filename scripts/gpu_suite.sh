#!/usr/bin/env bash
# GPU validation of the suite, in two modes (each fits one device call):
#   correctness: `suite validate` at full and heldout sizes, solutions without timing, 8 at once
#   timing:      every solution at full size, one candidate at a time, with timing (speedups)
# usage: scripts/gpu_suite.sh BINARY OUTDIR correctness|timing [extra eval args]
set -uo pipefail
B=${1:?binary}; OUT=${2:?outdir}; MODE=${3:?mode}; shift 3
S=${TF_STATE:-/tmp/tf-gpu-suite}
mkdir -p "$OUT"
tf() { "$B" --python python3 --state-dir "$S" "$@"; }
case "$MODE" in
  correctness)
    tf suite validate --variant full --variant heldout --no-timing --jobs 8 --json \
      > "$OUT/validate.json" 2> "$OUT/validate.err"; echo "exit $?" >> "$OUT/validate.err"
    python3 -c "import json,sys; v=json.load(open('$OUT/validate.json')); print(v['problems_checked'], 'problem variants,', v['solutions_checked'], 'solutions,', len(v['findings']), 'findings'); [print(' ', f) for f in v['findings']]"
    ;;
  timing)
    for lvl in level1 level2; do
      tf eval --json --jobs 1 --variant full "$@" --problems bench/$lvl --candidates bench/solutions/$lvl \
        > "$OUT/${lvl}_timing.jsonl" 2> "$OUT/${lvl}_timing.err"; echo "exit $?" >> "$OUT/${lvl}_timing.err"
    done
    python3 - "$OUT" <<'PY' | tee "$OUT/timing.md"
import json, sys, pathlib, statistics
out = pathlib.Path(sys.argv[1])
rows = [json.loads(l) for f in sorted(out.glob("*_timing.jsonl")) for l in f.read_text().splitlines() if l.strip()]
print("| problem | status | eager ms | triton ms | speedup |")
print("| --- | --- | ---: | ---: | ---: |")
sp = []
for r in sorted(rows, key=lambda r: r["problem"]["path"]):
    t = r["timing"]
    if t:
        sp.append(t["speedup"])
        print(f"| {r['problem']['name']} | {r['status']} | {t['reference']['median_ms']:.4f} | {t['candidate']['median_ms']:.4f} | {t['speedup']:.2f} |")
    else:
        print(f"| {r['problem']['name']} | {r['status']} | - | - | - |")
if sp:
    q = statistics.quantiles(sp, n=4)
    print(f"\n{len(rows)} solutions timed; speedup median {statistics.median(sp):.2f}, quartiles {q[0]:.2f} / {q[2]:.2f}, "
          f"min {min(sp):.2f}, max {max(sp):.2f}; faster than eager: {sum(s > 1 for s in sp)}")
PY
    ;;
  *) echo "mode must be correctness or timing" >&2; exit 2 ;;
esac
