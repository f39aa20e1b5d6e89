"""The policy worker process: `python -m tritonforge_worker policy MODEL DEVICE [--train]`.

It loads MODEL (see `models.resolve`), says hello, then answers `generate` messages in
batches (every request waiting when a batch starts joins it) through `policy`, and
training messages, strictly in order, through `trainer`. Also `tokenizer MODEL DIR`.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from typing import Any, List

from .models import load, load_tokenizer
from .policy import generate_batch
from .protocol import (
    Checkpointed,
    Error,
    Generation,
    Hello,
    ProtocolError,
    Sandbox,
    StepDone,
    TrainReady,
    decode,
    encode,
)

TRAIN_MESSAGES = ("train_setup", "train_step", "eval_loss", "save_checkpoint")


def _send(msg: Any) -> None:
    sys.stdout.write(encode(msg) + "\n")
    sys.stdout.flush()


def export_tokenizer(argv: List[str]) -> int:
    """`tokenizer MODEL DIR`: write MODEL's tokenizer (tokenizer.json, its configuration and
    chat template) to DIR, where Rust renders and tokenises prompts from it."""
    if len(argv) != 2:
        sys.stderr.write("usage: python -m tritonforge_worker tokenizer MODEL DIR\n")
        return 2
    tok = load_tokenizer(argv[0])
    if not getattr(tok, "is_fast", False):
        sys.stderr.write(f"{argv[0]}: no fast tokenizer (tokenizer.json) can be made from it\n")
        return 1
    tok.save_pretrained(argv[1])
    print(json.dumps({"dir": argv[1], "files": sorted(os.listdir(argv[1]))}))
    return 0


def _is_train(item: Any) -> bool:
    return getattr(item, "type", None) in TRAIN_MESSAGES


def _take_batch(inbox: "queue.Queue[Any]", limit: int, window_s: float) -> List[Any]:
    """Block for one request, then take whatever else arrives within the window (up to
    limit). A training request ends the window at once: it runs alone and in order, and
    the host sends the next step only ahead of time, so waiting would only idle the GPU."""
    items = [inbox.get()]
    deadline = time.perf_counter() + window_s
    while len(items) < limit and items[-1] is not None and not _is_train(items[-1]):
        left = deadline - time.perf_counter()
        try:
            items.append(inbox.get(timeout=max(left, 0.0)) if left > 0 else inbox.get_nowait())
        except queue.Empty:
            break
    return items


def _reader() -> "queue.Queue[Any]":
    """A thread that reads stdin into a queue, ending with None. Each line becomes its
    message (or the ProtocolError naming what is wrong with it) there, beside the
    device's work: a training batch is a large line, and decoding it on the main thread
    would leave the GPU waiting."""
    inbox: "queue.Queue[Any]" = queue.Queue()

    def read() -> None:
        try:
            for raw in sys.stdin:
                if not raw.strip():
                    continue
                try:
                    inbox.put(decode(raw))
                except ProtocolError as exc:
                    inbox.put(exc)
                except Exception as exc:  # noqa: BLE001 - any undecodable line is the sender's error
                    inbox.put(ProtocolError(f"undecodable request: {type(exc).__name__}: {exc}"))
        finally:
            # Whatever ends the reading (end of input, unreadable bytes), the main thread
            # must learn it rather than wait forever.
            inbox.put(None)

    threading.Thread(target=read, daemon=True).start()
    return inbox


def serve_policy(argv: List[str]) -> int:
    train = "--train" in argv
    argv = [a for a in argv if a != "--train"]
    if len(argv) != 2:
        sys.stderr.write("usage: python -m tritonforge_worker policy MODEL DEVICE [--train]\n")
        return 2
    model, device = argv
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if train and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return _serve_ranks(device)
    limit = max(1, int(os.environ.get("TRITONFORGE_POLICY_BATCH", "16")))
    window_s = float(os.environ.get("TRITONFORGE_POLICY_WINDOW_MS", "50")) / 1000.0
    from .envinfo import collect

    # A training worker loads its model when `train_setup` says how.
    tok, net = (None, None) if train else load(model, device)
    trainer: List[Any] = []
    sandbox = Sandbox(landlock_abi=None, filesystem=False, network=False, signals=False,
                      gpu_memory_fraction=None, notes=["policy worker: no sandbox (it runs our model, not candidates)"])
    _send(Hello(type="hello", worker_version="policy", pid=os.getpid(),
                env=collect("cuda" if device.startswith("cuda") else "cpu"), sandbox=sandbox))
    # Requests are pipelined: a reader thread decodes and queues them while a batch is
    # generating (or a step training), and the next batch takes every request that waited
    # (generations are answered by id, in any order; training strictly in order).
    inbox = _reader()
    while True:
        jobs: List[Any] = []
        stop = False
        for msg in _take_batch(inbox, limit, window_s):
            if msg is None:
                stop = True
                break
            if isinstance(msg, ProtocolError):
                _send(Error(type="error", id=None, message=str(msg)))
                continue
            if msg.type == "shutdown":
                stop = True
                break
            if msg.type in TRAIN_MESSAGES:
                # Training is strictly in order: generations asked for before it go first.
                if jobs:
                    _answer(tok, net, jobs, device)
                    jobs = []
                _train(trainer, msg, device)
                continue
            if msg.type == "generate" and net is None:
                _send(Error(type="error", id=msg.id,
                            message="this policy worker was started for training, not generation"))
                continue
            if msg.type != "generate":
                _send(Error(type="error", id=getattr(msg, "id", None),
                            message=f"the policy worker does not handle {msg.type!r}"))
                continue
            jobs.append(msg)
        if jobs:
            _answer(tok, net, jobs, device)
        if stop:
            return 0


def _answer(tok: Any, net: Any, msgs: List[Any], device: str) -> None:
    start = time.perf_counter()
    try:
        results = generate_batch(tok, net, [m.job for m in msgs], device)
    except Exception as exc:  # noqa: BLE001 - reported to the caller, who names the request
        if len(msgs) > 1:
            # One bad request (a template that refuses its messages, a prompt too long for
            # memory) must not fail the requests it happened to share a batch with.
            for m in msgs:
                _answer(tok, net, [m], device)
            return
        _send(Error(type="error", id=msgs[0].id, message=f"{type(exc).__name__}: {exc}"))
        return
    elapsed = (time.perf_counter() - start) * 1000.0
    for m, result in zip(msgs, results, strict=True):
        _send(Generation(type="generation", id=m.id, result=result, elapsed_ms=elapsed))


def _serve_ranks(device: str) -> int:
    """Training under `torchrun`: rank 0 reads the protocol and broadcasts every message;
    all ranks run it (FSDP2 shards the model over them); only rank 0 answers."""
    import torch
    import torch.distributed as dist

    from .envinfo import collect

    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device.startswith("cuda"):
        torch.cuda.set_device(local)
        device, backend = f"cuda:{local}", "nccl"
    else:
        backend = "gloo"
    import datetime

    # A rank stuck in a collective (its peer died) gives up instead of hanging forever.
    dist.init_process_group(backend, timeout=datetime.timedelta(minutes=30))
    speak = rank == 0
    if speak:
        sandbox = Sandbox(landlock_abi=None, filesystem=False, network=False, signals=False, gpu_memory_fraction=None,
                          notes=["policy worker: no sandbox (it runs our model, not candidates)"])
        _send(Hello(type="hello", worker_version="policy", pid=os.getpid(),
                    env=collect("cuda" if device.startswith("cuda") else "cpu"), sandbox=sandbox))
    trainer: List[Any] = []
    # Rank 0 reads and decodes ahead, so the host's next step is taken in while this one
    # runs; the other ranks get the decoded message (or the error naming what was wrong).
    inbox = _reader() if speak else None
    while True:
        box: List[Any] = [inbox.get() if inbox is not None else None]
        dist.broadcast_object_list(box, src=0)
        msg = box[0]
        if msg is None:
            break
        if isinstance(msg, ProtocolError):
            if speak:
                _send(Error(type="error", id=None, message=str(msg)))
            continue
        if msg.type == "shutdown":
            break
        if msg.type not in TRAIN_MESSAGES:
            if speak:
                _send(Error(type="error", id=getattr(msg, "id", None),
                            message=f"a worker of several ranks only trains; {msg.type!r} is not handled"))
            continue
        # A failure on one rank leaves the others inside a collective: the whole group
        # must go (torchrun stops every rank when one exits), after rank 0 said why.
        _train(trainer, msg, device, speak, fatal=True)
    dist.destroy_process_group()
    return 0


def _train(state: List[Any], msg: Any, device: str, speak: bool = True, fatal: bool = False) -> None:
    """One training request, answered in order; errors name the request and keep the
    worker alive (nothing already trained is lost)."""
    from .trainer import Trainer, TrainError, describe_oom

    try:
        if msg.type == "train_setup":
            state.clear()
            state.append(Trainer(msg.setup, device))
            if speak:
                _send(TrainReady(type="train_ready", id=msg.id, info=state[0].info()))
            return
        if not state:
            raise TrainError(f"{msg.type} before train_setup")
        trainer = state[0]
        reply: Any = None
        if msg.type == "train_step":
            reply = StepDone(type="step_done", id=msg.id,
                             stats=trainer.train_step(msg.batch))
        elif msg.type == "eval_loss":
            reply = StepDone(type="step_done", id=msg.id,
                             stats=trainer.eval_loss(msg.batch))
        elif msg.type == "save_checkpoint":
            trainer.save(msg.save)
            reply = Checkpointed(type="checkpointed", id=msg.id,
                                 dir=msg.save.dir, step=trainer.step)
        if speak and reply is not None:
            _send(reply)
    except Exception as exc:  # noqa: BLE001 - every failure goes back to the host, named
        text = f"{type(exc).__name__}: {exc}"
        if "OutOfMemoryError" in type(exc).__name__ and msg.type in ("train_step", "eval_loss"):
            text = describe_oom(exc, msg.batch)
            try:
                import torch

                state[0].drop_grads()
                torch.cuda.empty_cache()
            except Exception:  # noqa: BLE001 - best effort
                pass
        if speak:
            _send(Error(type="error", id=msg.id, message=text))
        if fatal:
            sys.stderr.write(f"rank {os.environ.get('RANK', '?')}: {text}\n")
            sys.stderr.flush()
            os._exit(1)
