#!/usr/bin/env python3
"""The SFT data build, written the straightforward Python way, for comparison with
`tritonforge data build` on the same input.

The same stages and settings as `examples/data.toml` with a tokenizer: ingest (pyarrow ->
pandas, field checks), normalise (class renames, the agent's Jinja templates, thinking
wrapped), length (the model's chat template rendered with Jinja2 as transformers does,
`tokenizers` batch encoding, 100..8192), quality (`ast.parse` of both sides and a
structural check: a `@triton.jit` function launched as `name[grid](...)`), exact dedup
(sha256 of comment-stripped, whitespace-collapsed code), near dedup (token
5-grams of problem and answer, shingles in more than 5% of rows set aside, MinHash with
128 permutations in numpy, 32 LSH bands nominate, Jaccard >= 0.8 against the bucket's first
row confirms, keeping the best row), decontamination (the same distinctive 5-grams,
Jaccard >= 0.6 against heldout suite problems), seeded split, JSONL and
parquet out. It is a baseline, not a reimplementation of the guard: its quality check is
lighter than the Rust guard's.

usage: python scripts/bench_data.py INPUT.parquet TOKENIZER_DIR OUT_DIR [--suite bench]
needs: pandas, pyarrow, tokenizers, jinja2, numpy
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
import time
from pathlib import Path

import jinja2
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from tokenizers import Tokenizer

REPO = Path(__file__).resolve().parent.parent
TEMPLATES = REPO / "crates/episode/templates"


def normalize_code(src: str) -> str:
    out, quote, i, n = [], None, 0, len(src)
    while i < n:
        c = src[i]
        if quote:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(src[i + 1])
                i += 1
            elif c == quote:
                quote = None
        elif c == "#":
            while i < n and src[i] != "\n":
                i += 1
            continue
        elif c in "'\"":
            quote = c
            out.append(c)
        else:
            out.append(c)
        i += 1
    return " ".join("".join(out).split())


TOKEN = re.compile(r"[A-Za-z0-9_\x80-\uffff]+|\S")


def shingles(code: str, k: int = 5) -> set:
    toks = TOKEN.findall(normalize_code(code))
    if len(toks) <= k:
        return {hash(tuple(toks))}
    return {hash(tuple(toks[i:i + k])) for i in range(len(toks) - k + 1)}


def jaccard(a: set, b: set) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def drop_boilerplate(sets: list, share: float = 0.05) -> list:
    """Sets without the shingles found in more than `share` of them (and in at least 3)."""
    df: dict = {}
    for s in sets:
        for h in s:
            df[h] = df.get(h, 0) + 1
    limit = max(int(share * len(sets)), 3)
    return [{h for h in s if df[h] <= limit} for s in sets]


MERSENNE = (1 << 61) - 1
RNG = np.random.default_rng(0)
A = RNG.integers(1, MERSENNE, 128, dtype=np.uint64)
B = RNG.integers(0, MERSENNE, 128, dtype=np.uint64)


def signature(sh: set) -> np.ndarray:
    x = np.fromiter((h & 0xFFFFFFFF for h in sh), dtype=np.uint64, count=len(sh))
    # (a*x + b) mod p with 32-bit x, vectorised over permutations and shingles.
    return ((np.outer(A, x) + B[:, None]) % MERSENNE).min(axis=1)


def launched_kernel(src: str) -> bool:
    tree = ast.parse(src)
    kernels = {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
               and any("jit" in ast.unparse(d) for d in f.decorator_list)}
    if not kernels:
        return False
    for cls in (c for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and c.name == "ModelNew"):
        for call in ast.walk(cls):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Subscript) \
                    and isinstance(call.func.value, ast.Name) and call.func.value.id in kernels:
                return True
    return False


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("input")
    ap.add_argument("tokenizer")
    ap.add_argument("out")
    ap.add_argument("--suite", default=str(REPO / "bench"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    stats = {}
    clock = [time.perf_counter()]
    seconds = {}

    def mark(stage: str, rows: int) -> None:
        stats[stage] = rows
        now = time.perf_counter()
        seconds[stage] = round(now - clock[0], 2)
        clock[0] = now
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    df = pq.read_table(args.input).to_pandas()
    n_in = len(df)
    ok = df["python_code"].map(lambda s: isinstance(s, str) and s.strip() != "") & \
        df["triton_code"].map(lambda s: isinstance(s, str) and s.strip() != "")
    df = df[ok].copy()
    mark("ingest", len(df))

    env = jinja2.Environment(keep_trailing_newline=True)
    system = env.from_string((TEMPLATES / "system.j2").read_text()).render()
    task = env.from_string((TEMPLATES / "task.j2").read_text())
    ex_p = (TEMPLATES / "example_problem.py").read_text().rstrip()
    ex_s = (TEMPLATES / "example_solution.py").read_text().rstrip()

    def normalise(r: pd.Series) -> list | None:
        entry = r["entry_point"]
        problem = re.sub(rf"\b{re.escape(entry)}\b", "Model", r["python_code"])
        answer = re.sub(rf"\b{re.escape(entry)}New\b", "ModelNew", r["triton_code"])
        if "class Model" not in problem:
            return None
        user = task.render(problem_name=r.get("module_name") or entry, problem_source=problem.rstrip(),
                           device="NVIDIA GPU (CUDA)", dtype="float32", timing=True,
                           example_problem=ex_p, example_solution=ex_s)
        reply = f"```python\n{answer.rstrip()}\n```"
        if isinstance(r.get("reasoning"), str) and r["reasoning"].strip():
            reply = f"<think>\n{r['reasoning'].strip()}\n</think>\n\n{reply}"
        return [problem, answer, [{"role": "system", "content": system}, {"role": "user", "content": user},
                                  {"role": "assistant", "content": reply}]]

    norm = df.apply(normalise, axis=1)
    df = df[norm.notna()].copy()
    norm = norm[norm.notna()]
    df["problem"] = norm.map(lambda x: x[0])
    df["answer"] = norm.map(lambda x: x[1])
    df["messages"] = norm.map(lambda x: x[2])
    mark("normalise", len(df))

    tdir = Path(args.tokenizer)
    tok = Tokenizer.from_file(str(tdir / "tokenizer.json"))
    cfg = json.loads((tdir / "tokenizer_config.json").read_text())
    source = (tdir / "chat_template.jinja").read_text() if (tdir / "chat_template.jinja").exists() \
        else cfg["chat_template"]
    chat_env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    chat = chat_env.from_string(source)
    special = {k: v for k, v in cfg.items() if k.endswith("_token") and isinstance(v, str)}
    texts = [chat.render(messages=m, add_generation_prompt=False, **special) for m in df["messages"]]
    counts = [len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False)]
    df["tokens"] = counts
    df = df[(df["tokens"] >= 100) & (df["tokens"] <= 8192)].copy()
    mark("length", len(df))

    def quality(r: pd.Series) -> bool:
        try:
            ast.parse(r["problem"])
            return launched_kernel(r["answer"])
        except SyntaxError:
            return False

    df = df[df.apply(quality, axis=1)].copy()
    mark("quality", len(df))

    df["score"] = df["stars"].fillna(0).map(lambda s: 0.1 * np.log1p(max(float(s), 0.0))) + \
        df.get("reasoning", pd.Series(index=df.index, dtype=object)).map(lambda r: 0.05 if isinstance(r, str) else 0.0)
    df = df.sort_values(["score", "uuid"], ascending=[False, True])
    df["exact"] = [hashlib.sha256((normalize_code(p) + "\0" + normalize_code(a)).encode()).hexdigest()
                   for p, a in zip(df["problem"], df["answer"])]
    df = df.drop_duplicates("exact")
    mark("dedup_exact", len(df))

    sets = drop_boilerplate([shingles(p) | shingles(a) for p, a in zip(df["problem"], df["answer"])])
    sigs = [signature(s) for s in sets]
    parent = list(range(len(sigs)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for band in range(32):
        buckets: dict = {}
        for i, s in enumerate(sigs):
            buckets.setdefault(s[band * 4:(band + 1) * 4].tobytes(), []).append(i)
        for members in buckets.values():
            for j in members[1:]:
                if jaccard(sets[members[0]], sets[j]) >= 0.8:
                    ra, rb = find(members[0]), find(j)
                    parent[max(ra, rb)] = min(ra, rb)
    keep = [find(i) == i for i in range(len(sigs))]  # rows are sorted best first
    df = df[keep].copy()
    mark("dedup_near", len(df))

    import tomllib
    manifest = tomllib.loads((Path(args.suite) / "manifest.toml").read_text())
    heldout = [shingles((Path(args.suite) / f"{k}.py").read_text())
               for k, m in manifest["problems"].items() if m.get("split") == "heldout"]
    both = drop_boilerplate(heldout + [shingles(p) for p in df["problem"]])
    heldout, own = both[:len(heldout)], both[len(heldout):]
    clean = [not any(jaccard(s, h) >= 0.6 for h in heldout) for s in own]
    df = df[clean].copy()
    mark("decontaminate", len(df))

    val = df["uuid"].map(lambda u: int(hashlib.sha256(f"0:{u}".encode()).hexdigest()[:16], 16) / 2**64 < 0.05)
    for name, part in (("train", df[~val]), ("validation", df[val])):
        with open(out / f"{name}.jsonl", "w") as f:
            for r in part.itertuples():
                f.write(json.dumps({"id": r.uuid, "messages": r.messages, "tokens": r.tokens}) + "\n")
        pq.write_table(pa.table({"id": part["uuid"].tolist(),
                                 "messages": [json.dumps(m) for m in part["messages"]],
                                 "tokens": part["tokens"].tolist()}), out / f"{name}.parquet")
    mark("split+write", len(df))
    secs = time.perf_counter() - t0
    print(json.dumps({"rows_in": n_in, "kept": int(len(df)), "stages": stats, "stage_seconds": seconds, "seconds": round(secs, 2),
                      "rows_per_second": round(n_in / secs, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
