#!/usr/bin/env bash
# GPU validation of the executor: doctor, the bundled solutions at full and heldout sizes,
# and the failure fixtures (hang, abort, exception, wrong values, syntax error) on CUDA.
# usage: scripts/gpu_check.sh BINARY OUTDIR   (uses the system python3 with CUDA torch)
set -uo pipefail
B=${1:?binary}; OUT=${2:?outdir}; S=$(mktemp -d)
mkdir -p "$OUT"
tf() { "$B" --python python3 --state-dir "$S" "$@"; }
tf doctor > "$OUT/doctor.txt" 2>&1; echo "doctor exit $?" >> "$OUT/doctor.txt"
for lvl in level1 level2; do
  for v in full heldout; do
    tf eval --json --variant "$v" --problems bench/$lvl --candidates bench/solutions/$lvl \
      > "$OUT/${lvl}_${v}.jsonl" 2> "$OUT/${lvl}_${v}.err"; echo "exit $?" >> "$OUT/${lvl}_${v}.err"
  done
done
F=crates/cli/tests/fixtures; P=$(mktemp -d); C=$(mktemp -d)
for c in relu_ok wrong_values nan_output syntax_error raises hangs aborts writes_inputs prints; do
  cp $F/problems/relu_small.py "$P/$c.py"; cp "$F/candidates/$c.py" "$C/$c.py"
done
tf eval --json --budget 20 --problems "$P" --candidates "$C" > "$OUT/fixtures.jsonl" 2> "$OUT/fixtures.err"
echo "exit $?" >> "$OUT/fixtures.err"
python3 - "$OUT" <<'PY' > "$OUT/summary.md"
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
print("| set | problem | status | max abs err | ref ms | cand ms | speedup [q1,q3] |")
print("| --- | --- | --- | ---: | ---: | ---: | --- |")
for f in sorted(out.glob("*.jsonl")):
    for line in f.read_text().splitlines():
        r = json.loads(line)
        errs = [t["max_abs_err"] for t in r["trials"] if t["max_abs_err"] is not None]
        t = r["timing"]
        tm = ("-", "-", r["timing_note"] or "-") if t is None else (
            f"{t['reference']['median_ms']:.4f}", f"{t['candidate']['median_ms']:.4f}",
            f"{t['speedup']:.2f} [{t['speedup_low']:.2f}, {t['speedup_high']:.2f}]")
        print(f"| {f.stem} | {r['problem']['name']} | {r['status']} | {max(errs) if errs else '-'} | {tm[0]} | {tm[1]} | {tm[2]} |")
PY
cat "$OUT/doctor.txt" "$OUT/summary.md"; tail -n 3 "$OUT"/*.err
