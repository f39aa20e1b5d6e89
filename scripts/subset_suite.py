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


def blocks_of(src: Path, split: str) -> tuple:
    """The manifest's head and its problem entries of `split`, as written."""
    text = (src / "manifest.toml").read_text()
    parts = re.split(r'(?m)^(?=\[problems\.")', text)
    head, blocks = parts[0], parts[1:]
    return head, [b for b in blocks if re.search(rf'(?m)^split = "{re.escape(split)}"$', b)]


def key_of(block: str) -> str:
    m = re.match(r'\[problems\."([^"]+)"\]', block)
    assert m, block[:80]
    return m.group(1)


def write_subset(src: Path, dst: Path, head: str, chosen: list) -> None:
    """Copy the chosen entries' problem files and write their manifest."""
    dst.mkdir(parents=True, exist_ok=True)
    for b in chosen:
        rel = Path(key_of(b) + ".py")
        (dst / rel.parent).mkdir(parents=True, exist_ok=True)
        shutil.copy(src / rel, dst / rel)
    (dst / "manifest.toml").write_text(head + "".join(chosen))


def main() -> int:
    src, dst, split, count, seed = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
    head, mine = blocks_of(src, split)
    if seed == "first":
        chosen = sorted(mine)[:count]
    else:
        chosen = sorted(random.Random(int(seed)).sample(mine, min(count, len(mine))))
    write_subset(src, dst, head, chosen)
    print(f"{len(chosen)} of {len(mine)} {split} problems -> {dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
