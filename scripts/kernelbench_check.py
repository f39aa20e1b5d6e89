#!/usr/bin/env python3
"""Evaluate our suite's solutions against unmodified KernelBench problem files.

Fetches nothing. Given a KernelBench checkout (its `KernelBench/level1/19_ReLU.py`, ...)
and a mapping (KernelBench file -> one of our solution files, for operators whose
signatures match: `scripts/kernelbench_map.toml`), it copies each KernelBench file as it
is and our solution beside it under the same name, runs

    tritonforge eval --json --problems OUT/problems --candidates OUT/candidates

with default flags (the pool, its memory admission, its out-of-memory retries), prints a
table (problem, status, message) and exits 1 unless every pair is `correct` (2 for bad
arguments, a mapping that does not parse, or a KernelBench file that is missing).

usage: python3 scripts/kernelbench_check.py KB_CHECKOUT MAPPING [--binary tritonforge]
       [--python PY] [--state-dir DIR] [--out DIR] [--only TEXT ...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import tomllib

REPO = Path(__file__).resolve().parent.parent


def load_mapping(path: Path) -> Dict[str, str]:
    """`[pairs]`: KernelBench path under `KernelBench/` -> our solution, relative to the repo."""
    with path.open("rb") as f:
        doc = tomllib.load(f)
    pairs = doc.get("pairs")
    if not isinstance(pairs, dict) or not all(isinstance(v, str) for v in pairs.values()):
        raise ValueError(f"{path}: expected a [pairs] table of file names")
    return {str(k): str(v) for k, v in pairs.items()}


def local_name(kb_file: str) -> str:
    """`level1/19_ReLU.py` -> `level1_19_ReLU.py`: one flat name, the same for both sides."""
    return kb_file.replace("/", "_")


def stage(checkout: Path, pairs: Dict[str, str], out: Path) -> Tuple[Path, Path, List[str]]:
    """Copy each pair under one name into OUT/problems and OUT/candidates; returns the two
    directories and the KernelBench files (or solutions) that are missing."""
    problems, candidates = out / "problems", out / "candidates"
    for d in (problems, candidates):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    missing = []
    for kb_file, ours in pairs.items():
        src, sol = checkout / "KernelBench" / kb_file, REPO / ours
        if not src.is_file() or not sol.is_file():
            missing.append(kb_file if not src.is_file() else ours)
            continue
        shutil.copyfile(src, problems / local_name(kb_file))
        shutil.copyfile(sol, candidates / local_name(kb_file))
    return problems, candidates, missing


def run_eval(binary: str, python: Optional[str], state_dir: Optional[str], problems: Path,
             candidates: Path, out: Path) -> Tuple[int, List[Dict[str, Any]]]:
    """Run the batch (progress goes to our stderr); returns its exit code and JSON lines."""
    cmd = [binary]
    if python:
        cmd += ["--python", python]
    if state_dir:
        cmd += ["--state-dir", state_dir]
    cmd += ["eval", "--json", "--problems", str(problems), "--candidates", str(candidates)]
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    lines_path = out / "records.jsonl"
    with lines_path.open("w") as lines:
        code = subprocess.run(cmd, stdout=lines, check=False).returncode
    rows: List[Dict[str, Any]] = []
    for line in lines_path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return code, rows


def table(pairs: Dict[str, str], rows: List[Dict[str, Any]], missing: List[str]) -> Tuple[str, bool]:
    """The table, one line per pair in mapping order, and whether every pair is correct."""
    by_name = {r.get("problem", {}).get("name"): r for r in rows}
    lines = []
    all_correct = True
    width = max([len(k) for k in pairs] + [7])
    lines.append(f"{'problem':<{width}}  {'status':<14} message")
    for kb_file in pairs:
        r = by_name.get(local_name(kb_file)[: -len(".py")])
        if kb_file in missing or pairs[kb_file] in missing:
            status, message = "missing", "the KernelBench file or our solution is not there"
        elif r is None:
            status, message = "no_result", "tritonforge reported nothing for this pair"
        else:
            status = str(r.get("status"))
            message = str(r.get("message", "")).splitlines()[0] if r.get("message") else ""
            # A problem error names the staged copy's path first; the sizes that follow matter.
            if status == "problem_error" and message.startswith("problem ") and ": " in message:
                message = message.split(": ", 1)[1]
        all_correct &= status == "correct"
        lines.append(f"{kb_file:<{width}}  {status:<14} {message}")
    return "\n".join(lines), all_correct


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkout", type=Path, help="a KernelBench checkout (holding KernelBench/level1/...)")
    ap.add_argument("mapping", type=Path, help="KernelBench file -> our solution (scripts/kernelbench_map.toml)")
    ap.add_argument("--binary", default="tritonforge", help="the tritonforge binary [tritonforge on PATH]")
    ap.add_argument("--python", help="interpreter for the workers (tritonforge --python)")
    ap.add_argument("--state-dir", help="tritonforge --state-dir")
    ap.add_argument("--out", type=Path, help="where the problems/candidates pair goes [a temporary directory]")
    ap.add_argument("--only", action="append", default=[], metavar="TEXT",
                    help="only the pairs whose KernelBench path contains TEXT (repeatable): "
                         "finish a check a device command cut short")
    args = ap.parse_args(argv)
    try:
        pairs = load_mapping(args.mapping)
    except (OSError, ValueError, tomllib.TOMLDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.only:
        pairs = {k: v for k, v in pairs.items() if any(t in k for t in args.only)}
        if not pairs:
            print(f"error: no pair of {args.mapping} matches --only {' '.join(args.only)}", file=sys.stderr)
            return 2
    if not (args.checkout / "KernelBench").is_dir():
        print(f"error: {args.checkout} holds no KernelBench/ directory", file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="kernelbench-check-"))
    out.mkdir(parents=True, exist_ok=True)
    problems, candidates, missing = stage(args.checkout, pairs, out)
    code = 0
    rows: List[Dict[str, Any]] = []
    if len(missing) < len(pairs):
        code, rows = run_eval(args.binary, args.python, args.state_dir, problems, candidates, out)
    text, all_correct = table(pairs, rows, missing)
    print(text)
    print(f"tritonforge exited {code}; records in {out / 'records.jsonl'}", file=sys.stderr)
    if missing:
        return 2
    return 0 if all_correct else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
