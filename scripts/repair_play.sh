# The repair stage's play settings, sourced by scripts/train_bundled.sh (on any machine)
# and scripts/gpu_bundled.sh (on the GPU machine), so the two cannot drift apart: the
# stage-one model plays these train problems with two turns, and its failed episodes
# become repair rows (configs/bundled/data-repair.toml reads them from this state dir).
REPAIR_STATE=data/bundled/repair-state
REPAIR_RUN=(--turns 2 --seed 7 --json)
REPAIR_SUITE=(--suite bench --split train --level 1 --limit 24 --samples 2)
REPAIR_SYNTH=(--suite data/bundled/synth --split train --limit 30)
