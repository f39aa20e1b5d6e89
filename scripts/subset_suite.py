"""Copy a seeded random subset of one split of a suite (problem files and their manifest
entries, as written) into a new suite directory: a small synthetic train pool for an RL
run on the GPU machine, which takes at most 64 MiB per carry.
usage: subset_suite.py SRC DST SPLIT COUNT SEED [--per-family] [--solutions]
SEED `first`: the first COUNT problems of the split by name (data/bundled/synth-heldout40 is
`subset_suite.py data/bundled/synth data/bundled/synth-heldout40 heldout 40 first`).
SPLIT `all`: both splits. `--per-family`: COUNT problems of each family (a sample that
covers every family, for a GPU check of the generator). `--solutions`: copy each problem's
reference solution too (`suite validate` checks them)."""

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
    if split == "all":
        return head, blocks
    return head, [b for b in blocks if re.search(rf'(?m)^split = "{re.escape(split)}"$', b)]


def family_of(block: str) -> str:
    m = re.search(r'(?m)^family = "([^"]+)"$', block)
    return m.group(1) if m else ""


def key_of(block: str) -> str:
    m = re.match(r'\[problems\."([^"]+)"\]', block)
    assert m, block[:80]
    return m.group(1)


def write_subset(src: Path, dst: Path, head: str, chosen: list, solutions: bool) -> None:
    """Copy the chosen entries' problem files (and solutions) and write their manifest."""
    dst.mkdir(parents=True, exist_ok=True)
    for b in chosen:
        rel = Path(key_of(b) + ".py")
        rels = [rel, Path("solutions") / rel] if solutions else [rel]
        for r in rels:
            if (src / r).is_file():
                (dst / r.parent).mkdir(parents=True, exist_ok=True)
                shutil.copy(src / r, dst / r)
    (dst / "manifest.toml").write_text(head + "".join(chosen))


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    flags = {a for a in sys.argv[1:] if a.startswith("--")}
    src, dst, split, count, seed = Path(args[0]), Path(args[1]), args[2], int(args[3]), args[4]
    head, mine = blocks_of(src, split)
    groups = {}
    for b in mine:
        groups.setdefault(family_of(b) if "--per-family" in flags else "", []).append(b)
    chosen = []
    for _, group in sorted(groups.items()):
        if seed == "first":
            chosen += sorted(group)[:count]
        else:
            chosen += random.Random(int(seed)).sample(group, min(count, len(group)))
    chosen.sort()
    write_subset(src, dst, head, chosen, "--solutions" in flags)
    print(f"{len(chosen)} of {len(mine)} {split} problems -> {dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
