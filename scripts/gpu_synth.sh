#!/usr/bin/env bash
# GPU check of a synthetic set (docs/synth.md): `suite validate` at full and heldout sizes,
# one family at a time (a timeout loses one family, not all), solutions without timing.
# usage: scripts/gpu_synth.sh BINARY SUITE OUTDIR [JOBS]
# The set checked on the H200: `scripts/subset_suite.py data/bundled/synth
# data/bundled/synth-gpu all 30 3 --per-family --solutions` (30 problems of each family).
set -uo pipefail
B=${1:?binary}; SUITE=${2:?suite}; OUT=${3:?outdir}; JOBS=${4:-8}
S=${TF_STATE:-/tmp/tf-gpu-synth}
mkdir -p "$OUT"
families=$(grep -h '^family = ' "$SUITE/manifest.toml" | sort -u | cut -d'"' -f2)
for f in $families; do
  start=$(date +%s)
  "$B" --python python3 --state-dir "$S" --suite "$SUITE" suite validate --family "$f" \
    --variant full --variant heldout --no-timing --jobs "$JOBS" --json \
    > "$OUT/$f.json" 2> "$OUT/$f.err"
  echo "exit $? after $(( $(date +%s) - start )) s" >> "$OUT/$f.err"
  python3 - "$OUT/$f.json" "$f" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
try:
    v = json.load(open(sys.argv[1]))
except Exception as e:  # a crashed run: its .err says why
    print(f"{sys.argv[2]}: no report ({e})"); sys.exit(0)
print(f"{sys.argv[2]}: {v['problems_checked']} problem variants, {v['solutions_checked']} solutions, {len(v['findings'])} findings")
for f in v["findings"]:
    print("  ", json.dumps(f)[:400])
PY
  tail -1 "$OUT/$f.err" | tee -a "$OUT/summary.txt"
done
