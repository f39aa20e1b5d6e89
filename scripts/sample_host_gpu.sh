#!/usr/bin/env bash
# Sample the GPU's utilisation and the host's CPU use every half second while a command
# runs, to tell which of the two a batch is bound by (docs/results/evaluator-load.md).
# usage: scripts/sample_host_gpu.sh OUTDIR COMMAND...
set -u
out=$1; shift
mkdir -p "$out"
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader,nounits -lms 500 > "$out/gpu.csv" 2>/dev/null &
gpu=$!
( while :; do echo "$(date +%s.%N) $(head -1 /proc/stat)"; sleep 0.5; done ) > "$out/cpu.txt" &
cpu=$!
"$@"
rc=$?
kill $gpu $cpu 2>/dev/null
python3 - "$out" <<'PY'
import sys, statistics
out = sys.argv[1]
util = [float(l.split(",")[1]) for l in open(f"{out}/gpu.csv") if l.count(",") >= 2]
rows = [l.split() for l in open(f"{out}/cpu.txt")]
busy = []
for a, b in zip(rows, rows[1:]):
    ta, tb = [int(x) for x in a[2:]], [int(x) for x in b[2:]]
    d = [y - x for x, y in zip(ta, tb)]
    idle = d[3] + d[4]
    busy.append(1 - idle / max(sum(d), 1))
if util:
    print(f"gpu utilisation: mean {statistics.mean(util):.0f}% median {statistics.median(util):.0f}% over {len(util)} samples")
else:
    print("gpu utilisation: no samples (no nvidia-smi)")
print(f"host cpu busy: mean {100*statistics.mean(busy):.0f}% median {100*statistics.median(busy):.0f}% over {len(busy)} samples")
PY
exit $rc
