"""Copy a seeded random subset of one split of a suite (problem files and their manifest
entries, as written) into a new suite directory: a small synthetic train pool for an RL
run on the GPU machine, which takes at most 64 MiB per carry.
usage: subset_suite.py SRC DST SPLIT COUNT SEED
SEED `first`: the first COUNT problems of the split by name (data/bundled/synth-heldout40 is
`subset_suite.py data/bundled/synth data/bundled/synth-heldout40 heldout 40 first`)."""

import random
import re
import shutil
import sys
from pathlib import Path


def main() -> int:
    src, dst, split, count, seed = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
    text = (src / "manifest.toml").read_text()
    parts = re.split(r'(?m)^(?=\[problems\.")', text)
    head, blocks = parts[0], parts[1:]
    mine = [b for b in blocks if re.search(rf'(?m)^split = "{re.escape(split)}"$', b)]
    if seed == "first":
        chosen = sorted(mine)[:count]
    else:
        chosen = sorted(random.Random(int(seed)).sample(mine, min(count, len(mine))))
    dst.mkdir(parents=True, exist_ok=True)
    for b in chosen:
        m = re.match(r'\[problems\."([^"]+)"\]', b)
        assert m, b[:80]
        rel = Path(m.group(1) + ".py")
        (dst / rel.parent).mkdir(parents=True, exist_ok=True)
        shutil.copy(src / rel, dst / rel)
    (dst / "manifest.toml").write_text(head + "".join(chosen))
    print(f"{len(chosen)} of {len(mine)} {split} problems -> {dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
