#!/usr/bin/env bash
# GPU validation of the suite's level 3 (whole architectures) and its mixed-kernel policy.
# Each mode fits one device call:
#   correctness: `suite validate --level 3` at full and heldout sizes (every problem; the
#                solutions without timing, where the modelled share decides the policy)
#   timing:      every level-3 solution at full size, one at a time, timed against eager and
#                torch.compile, with the measured GPU window share the policy checks (50%)
#   redteam:     the level-3 cheats of tests/redteam/hostile (lazy, decoys, loosened
#                precision, slowed reference) timed on the GPU: all must be `rejected`
# usage: scripts/gpu_level3.sh BINARY OUTDIR correctness|timing|redteam [extra eval args]
set -uo pipefail
B=${1:?binary}; OUT=${2:?outdir}; MODE=${3:?mode}; shift 3
S=${TF_STATE:-/tmp/tf-gpu-level3}
mkdir -p "$OUT"
tf() { "$B" --python python3 --state-dir "$S" "$@"; }
case "$MODE" in
  correctness)
    tf suite validate --level 3 --variant full --variant heldout --no-timing --jobs 8 --json \
      > "$OUT/validate_level3.json" 2> "$OUT/validate_level3.err"; echo "exit $?" >> "$OUT/validate_level3.err"
    python3 -c "import json; v=json.load(open('$OUT/validate_level3.json')); print(v['problems_checked'], 'problem variants,', v['solutions_checked'], 'solutions,', len(v['findings']), 'findings'); [print(' ', f) for f in v['findings']]"
    ;;
  timing)
    tf eval --json --jobs "${JOBS:-1}" --variant full --compile-baseline "$@" --problems bench/level3 \
      --candidates bench/solutions/level3 > "$OUT/level3_timing.jsonl" 2> "$OUT/level3_timing.err"
    echo "exit $?" >> "$OUT/level3_timing.err"
    python3 - "$OUT" <<'PY' | tee "$OUT/level3_timing.md"
import json, sys, pathlib, statistics
out = pathlib.Path(sys.argv[1])
rows = [json.loads(l) for l in (out / "level3_timing.jsonl").read_text().splitlines() if l.strip()]
print("| problem | status | eager ms | compile ms | triton ms | vs eager | vs compile | kernel share (GPU window) | modelled share |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
vs_eager, vs_compile = [], []
for r in sorted(rows, key=lambda r: r["problem"]["path"]):
    t, p = r.get("timing"), r.get("provenance") or {}
    win = p.get("window_share"); model = p.get("model_share")
    share = f"{win:.0%}" if win is not None else "-"
    modelled = f"{model:.0%}" if model is not None else "-"
    if t:
        eager, cand = t["reference"]["median_ms"], t["candidate"]["median_ms"]
        comp = (t.get("compiled") or {}).get("median_ms")
        vs_eager.append(t["speedup"])
        if comp:
            vs_compile.append(comp / cand)
        c = f"{comp:.3f}" if comp else "-"
        vc = f"{comp / cand:.2f}" if comp else "-"
        print(f"| {r['problem']['name']} | {r['status']} | {eager:.3f} | {c} | {cand:.3f} | {t['speedup']:.2f} | {vc} | {share} | {modelled} |")
    else:
        print(f"| {r['problem']['name']} | {r['status']} | - | - | - | - | - | {share} | {modelled} |")
        if r["status"] != "correct":
            print(f"|  | {r['message'][:300]} | | | | | | | |")
for name, sp in (("eager", vs_eager), ("torch.compile", vs_compile)):
    if len(sp) >= 2:
        print(f"\nvs {name}: {len(sp)} timed; median {statistics.median(sp):.2f}, min {min(sp):.2f}, max {max(sp):.2f}; "
              f"faster: {sum(s > 1 for s in sp)}")
PY
    ;;
  redteam)
    R=$(mktemp -d); mkdir -p "$R/problems" "$R/cands"
    python3 - "$R" <<'PY'
import pathlib, shutil, sys, tomllib
root = pathlib.Path(sys.argv[1])
manifest = tomllib.loads(pathlib.Path("bench/manifest.toml").read_text())["problems"]
lines = []
for f in sorted(pathlib.Path("tests/redteam/hostile").glob("*.py")):
    problem = next((l.split(": ", 1)[1] for l in f.read_text().splitlines() if l.startswith("# problem: ")), "")
    if not problem.startswith("level3/"):
        continue
    shutil.copy(f"bench/{problem}.py", root / "problems" / f.name)
    shutil.copy(f, root / "cands" / f.name)
    meta = manifest[problem]
    v = meta["variants"]
    fmt = lambda d: "{ " + ", ".join(f"{k} = {x}" for k, x in d.items()) + " }"
    lines += [f'[problems."problems/{f.stem}"]', "level = 3", f"atol = {meta['atol']}", f"rtol = {meta['rtol']}",
              f"variants.small = {fmt(v['small'])}", f"variants.heldout = {fmt(v['heldout'])}", ""]
(root / "manifest.toml").write_text("\n".join(lines))
PY
    tf eval --json --jobs 1 --variant full "$@" --problems "$R/problems" --candidates "$R/cands" \
      > "$OUT/level3_redteam.jsonl" 2> "$OUT/level3_redteam.err"; echo "exit $?" >> "$OUT/level3_redteam.err"
    python3 -c "
import json
for l in open('$OUT/level3_redteam.jsonl'):
    r = json.loads(l); print(r['problem']['name'], r['status'], r['stage'], r['message'][:240])
" | tee "$OUT/level3_redteam.txt"
    ;;
  *) echo "mode must be correctness, timing or redteam" >&2; exit 2 ;;
esac
