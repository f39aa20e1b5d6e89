"""Split a synthetic set from an unseen seed by whether each heldout problem's computation
was already trained on: a problem whose `Model` class (docstrings aside; sizes, which live
in module constants, not compared) equals a train problem's of the training set goes to
SEEN, the rest to NOVEL. The generator draws from a finite space of templates, so a new
seed repeats many training computations at other sizes; NOVEL is the honest test of
generalisation.

usage: novel_subset.py TRAIN_SUITE NEW_SUITE NOVEL_DST SEEN_DST
e.g. novel_subset.py data/bundled/synth data/bundled/synth-seed2 data/bundled/seed2-novel data/bundled/seed2-seen"""

import ast
import sys
from pathlib import Path

from subset_suite import blocks_of, key_of, write_subset


def model_shape(path: Path) -> str:
    """The `Model` class's syntax tree without docstrings, as text ("" when there is none)."""
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            for n in ast.walk(node):
                body = getattr(n, "body", None)
                if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and body and isinstance(body[0], ast.Expr) \
                        and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                    n.body = body[1:] or [ast.Pass()]
            return ast.dump(node, annotate_fields=False)
    return ""


def main() -> int:
    train, new, novel_dst, seen_dst = (Path(a) for a in sys.argv[1:5])
    _, trained = blocks_of(train, "train")
    known = {model_shape(train / f"{key_of(b)}.py") for b in trained}
    head, heldout = blocks_of(new, "heldout")
    seen = [b for b in heldout if model_shape(new / f"{key_of(b)}.py") in known]
    novel = [b for b in heldout if b not in seen]
    write_subset(new, novel_dst, head, novel)
    write_subset(new, seen_dst, head, seen)
    print(f"{len(heldout)} heldout problems of {new}: {len(novel)} novel -> {novel_dst}, "
          f"{len(seen)} with a computation trained on ({len(trained)} train problems of {train}) -> {seen_dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
