#!/usr/bin/env bash
# Sample the GPU's utilisation and the host's CPU use every half second while a command
# runs, to tell which of the two a batch is bound by (docs/results/evaluator-load.md).
# usage: scripts/sample_host_gpu.sh OUTDIR COMMAND...   (exits with COMMAND's status)
set -u
if [ $# -lt 2 ]; then
  echo "usage: $0 OUTDIR COMMAND..." >&2
  exit 2
fi
out=$1; shift
mkdir -p "$out"
: > "$out/gpu.csv"
: > "$out/cpu.txt"
nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used --format=csv,noheader,nounits -lms 500 > "$out/gpu.csv" 2>/dev/null &
gpu=$!
( while :; do echo "$(date +%s.%N) $(head -1 /proc/stat)"; sleep 0.5; done ) > "$out/cpu.txt" &
cpu=$!
# The samplers end with this script, however it ends.
trap 'kill $gpu $cpu 2>/dev/null; wait 2>/dev/null' EXIT INT TERM
"$@"
rc=$?
kill $gpu $cpu 2>/dev/null
python3 - "$out" <<'PY'
import statistics
import sys

out = sys.argv[1]
util = []
for line in open(f"{out}/gpu.csv"):
    parts = [p.strip() for p in line.split(",")]
    # GPU 0 only (one timing lane per device); "[N/A]" where the driver cannot say.
    if len(parts) >= 3 and parts[1] == "0" and parts[2].replace(".", "", 1).isdigit():
        util.append(float(parts[2]))
rows = [line.split() for line in open(f"{out}/cpu.txt")]
busy = []
for a, b in zip(rows, rows[1:]):
    # user nice system idle iowait irq softirq steal (guest time is inside user and nice).
    ta, tb = [int(x) for x in a[2:10]], [int(x) for x in b[2:10]]
    d = [y - x for x, y in zip(ta, tb)]
    busy.append(1 - (d[3] + d[4]) / max(sum(d), 1))
if util:
    print(f"gpu 0 utilisation: mean {statistics.mean(util):.0f}% median {statistics.median(util):.0f}% "
          f"over {len(util)} samples")
else:
    print("gpu 0 utilisation: no samples (no nvidia-smi, or the command ended at once)")
if busy:
    print(f"host cpu busy: mean {100 * statistics.mean(busy):.0f}% median {100 * statistics.median(busy):.0f}% "
          f"over {len(busy)} samples")
else:
    print("host cpu busy: no samples (the command ended at once)")
PY
exit $rc
