#!/usr/bin/env python3
"""How long a colocated RL policy's next-turn completions wait behind its learner, with
the learner run whole (`TRITONFORGE_POLICY_TRAIN_SHARE=0`, the order before 2026-11-29)
and a micro-batch at a time between engine steps (the default share 0.5, and others
asked for), side by side in one run.

Each arm starts the policy worker (`python -m tritonforge_worker policy MODEL DEVICE
--train`) over its protocol, sets up LoRA training, warms up, then plays one step as
`train rl` does with staleness 1:
- a first turn: FIRST requests (about PROMPT prompt tokens, FIRST_TOKENS new tokens
  each, temperature 1, the model's end token ignored by a random model) sent at once;
- when the first of them is answered, the learner's step on the previous batch: `score`
  over ROWS rows of 600 to 1,400 tokens, then two `rl_step`s over half the rows each,
  each sent when the one before it is answered (as the host does);
- from then on, every GAP seconds, a next-turn request (a longer prompt, NEXT_TOKENS new
  tokens) until NEXT were sent: the completions a rollout's later turns ask for while
  its learner works.
It reports per arm: each next-turn request's latency and the part of it spent before the
worker took it (latency less the worker's own `elapsed_ms`), the learner's time from its
`score` sent to its last `rl_done`, and the time until everything was answered.

usage: PYTHONPATH=python python3 scripts/bench_learner_overlap.py --model DIR [--device cuda]
       [--arms 0,0.5] [--rows 192] [--first 64] [--next 16] [--gap 0.5] --out OUT.json
MODEL is a directory with a config (random weights, e.g. configs/models/smollm2-135m-shape
with SmolLM2's tokenizer saved beside it: --tokenizer-from smollm2 does that in a temporary
copy). --quick: the tiny test model on the CPU, small sizes (checks the script itself).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "scripts"))

from bench_colocated import rows, setup  # noqa: E402
from tritonforge_worker.protocol import (  # noqa: E402
    ChatTurn,
    Generate,
    GenerateJob,
    RlBatch,
    RlLoss,
    RlMicroBatch,
    RlStep,
    Score,
    ScoreJob,
    Shutdown,
    TrainBatch,
    TrainSetup,
    encode,
)


class Worker:
    """The policy worker process; replies are collected by a reader thread with the time
    each arrived."""

    def __init__(self, model: str, device: str, share: float, env_extra: Dict[str, str]) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO / "python"), HF_HUB_OFFLINE="1",
                   TRITONFORGE_POLICY_TRAIN_SHARE=str(share), **env_extra)
        self.proc = subprocess.Popen([sys.executable, "-m", "tritonforge_worker", "policy", model, device, "--train"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None
        hello = json.loads(self.proc.stdout.readline())
        if hello.get("type") != "hello":
            raise RuntimeError(f"no hello: {hello}")
        self.replies: "queue.Queue[Tuple[float, Dict[str, Any]]]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.sent: Dict[str, float] = {}

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.replies.put((time.perf_counter(), json.loads(line)))

    def send(self, msg: Any) -> None:
        assert self.proc.stdin is not None
        self.sent[getattr(msg, "id", "")] = time.perf_counter()
        self.proc.stdin.write(encode(msg) + "\n")
        self.proc.stdin.flush()

    def reply(self, timeout: float = 900.0) -> Tuple[float, Dict[str, Any]]:
        at, msg = self.replies.get(timeout=timeout)
        if msg.get("type") == "error":
            raise RuntimeError(f"worker error: {msg}")
        return at, msg

    def close(self) -> None:
        self.send(Shutdown(type="shutdown"))
        self.proc.wait(timeout=120)


def gen(id_: str, words: int, tokens: int, seed: int) -> Generate:
    text = " ".join(f"kernel{(seed * 7 + i) % 97}" for i in range(words))
    return Generate(type="generate", id=id_, job=GenerateJob(
        messages=[ChatTurn(role="user", content=text)], temperature=1.0, top_p=1.0, max_tokens=tokens, seed=seed))


def rl_steps(micro: List[Any], scores: List[List[List[float]]]) -> List[RlBatch]:
    """Two optimizer steps over halves of the rows, with the scores as behaviour and proximal."""
    parts = []
    half = max(1, len(micro) // 2)
    for chunk in (range(0, half), range(half, len(micro))):
        ks = list(chunk)
        if not ks:
            continue
        targets = sum(len(r) for k in ks for r in scores[k])
        parts.append(RlBatch(
            micro=[RlMicroBatch(rows=micro[k], advantages=[[1.0 if i % 2 else -1.0] * len(r)
                                                           for i, r in enumerate(scores[k])],
                                behaviour=scores[k], proximal=scores[k], reference=None) for k in ks],
            loss=RlLoss(clip_low=0.2, clip_high=0.28, kl_coef=0.0, entropy_coef=0.0, tis_cap=2.0,
                        loss_tokens=targets)))
    return parts


def play(w: Worker, a: argparse.Namespace, micro: List[Any], tag: str) -> Dict[str, Any]:
    """One step as described above; the figures of its next-turn requests and learner."""
    t0 = time.perf_counter()
    for i in range(a.first):
        w.send(gen(f"{tag}-first-{i}", a.prompt_words, a.first_tokens, i))
    pending = {f"{tag}-first-{i}" for i in range(a.first)}
    answered: Dict[str, Tuple[float, Dict[str, Any]]] = {}
    learner: List[Any] = []  # messages still to send, in order
    learner_sent: Optional[float] = None
    learner_done: Optional[float] = None
    next_sent = 0
    next_at = 0.0
    while pending or learner or next_sent < a.next:
        now = time.perf_counter()
        if learner_sent is not None and next_sent < a.next and now >= next_at:
            id_ = f"{tag}-next-{next_sent}"
            w.send(gen(id_, 2 * a.prompt_words, a.next_tokens, 1000 + next_sent))
            pending.add(id_)
            next_sent += 1
            next_at = now + a.gap
        try:
            at, msg = w.reply(timeout=max(0.001, next_at - now) if learner_sent is not None
                              and next_sent < a.next else 900.0)
        except queue.Empty:
            continue
        mid = msg.get("id", "")
        if msg["type"] == "generation":
            answered[mid] = (at, msg)
            pending.discard(mid)
            if learner_sent is None:  # the first answer: the learner's step begins
                learner_sent = time.perf_counter()
                next_at = learner_sent
                w.send(Score(type="score", id=f"{tag}-score", job=ScoreJob(batch=TrainBatch(micro=micro),
                                                                         reference=False)))
                learner = ["score"]
        elif msg["type"] == "scored":
            learner = rl_steps(micro, msg["scores"]["logprobs"])  # the one in flight stays first
            w.send(RlStep(type="rl_step", id=f"{tag}-rl-0", batch=learner[0]))
        elif msg["type"] == "rl_done":
            learner = learner[1:]
            if learner:
                w.send(RlStep(type="rl_step", id=f"{tag}-rl-1", batch=learner[0]))
            else:
                learner_done = at
    end = time.perf_counter()
    nexts = [(w.sent[k], at, m) for k, (at, m) in answered.items() if "-next-" in k]
    lat = [at - s for s, at, _ in nexts]
    waits = [max(0.0, (at - s) - m["elapsed_ms"] / 1000.0) for s, at, m in nexts]
    firsts = [at - w.sent[k] for k, (at, _) in answered.items() if "-first-" in k]

    def summary(xs: List[float]) -> Dict[str, float]:
        xs = sorted(xs)
        return {"mean": round(statistics.fmean(xs), 3), "p90": round(xs[int(0.9 * (len(xs) - 1))], 3),
                "max": round(xs[-1], 3)} if xs else {}

    return {"next_latency_s": summary(lat), "next_wait_s": summary(waits), "first_latency_s": summary(firsts),
            "learner_s": round((learner_done or end) - (learner_sent or t0), 3), "all_s": round(end - t0, 3)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(REPO / "configs/models/smollm2-135m-shape"))
    ap.add_argument("--tokenizer-from", default="smollm2")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--arms", default="0,0.5")
    ap.add_argument("--rows", type=int, default=192)
    ap.add_argument("--first", type=int, default=64)
    ap.add_argument("--first-tokens", type=int, default=384)
    ap.add_argument("--next", type=int, default=16)
    ap.add_argument("--next-tokens", type=int, default=128)
    ap.add_argument("--prompt-words", type=int, default=300)
    ap.add_argument("--gap", type=float, default=0.5)
    ap.add_argument("--compile", default="0", help="TRITONFORGE_POLICY_COMPILE for the worker")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.quick:
        a.model, a.device, a.rows, a.first, a.first_tokens = str(REPO / "configs/models/tiny-llama"), "cpu", 8, 4, 16
        a.next, a.next_tokens, a.prompt_words, a.gap = 3, 8, 20, 0.05
    from tritonforge_worker.models import load_tokenizer

    model = tempfile.mkdtemp()
    shutil.copy(os.path.join(a.model, "config.json"), model)
    load_tokenizer(a.tokenizer_from).save_pretrained(model)
    env_extra = {"TRITONFORGE_POLICY_COMPILE": a.compile}
    if a.quick:
        env_extra["TRITONFORGE_POLICY_MAX_LEN"] = "1024"
    vocab = int(json.load(open(os.path.join(a.model, "config.json")))["vocab_size"])
    micro = rows(a.rows, vocab, 1)
    if a.quick:
        micro = [type(mb)(input_ids=[r[:64] for r in mb.input_ids], loss_mask=[[0] * 32 + [1] * 32] * len(mb.input_ids),
                          position_ids=[list(range(64))] * len(mb.input_ids), lengths=[64] * len(mb.input_ids))
                 for mb in micro]
    report: Dict[str, Any] = {"device": a.device, "model": a.model, "rows": a.rows,
                              "tokens": sum(sum(mb.lengths) for mb in micro), "first": a.first,
                              "first_tokens": a.first_tokens, "next": a.next, "next_tokens": a.next_tokens,
                              "gap_s": a.gap, "compile": a.compile, "arms": {}}
    dtype = "fp32" if a.device == "cpu" else "mixed"
    for share in [float(x) for x in a.arms.split(",")]:
        w = Worker(model, a.device, share, env_extra)
        try:
            w.send(TrainSetup(type="train_setup", id="setup", setup=setup(model, "auto", 16, dtype)))
            w.reply()
            play(w, a, micro, "warm")  # CUDA graphs, allocator, kernels' first use
            report["arms"][str(share)] = play(w, a, micro, "timed")
        finally:
            w.close()
        print(json.dumps({str(share): report["arms"][str(share)]}), file=sys.stderr)
    shutil.rmtree(model, ignore_errors=True)
    Path(a.out).write_text(json.dumps(report, indent=1))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
