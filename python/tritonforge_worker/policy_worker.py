"""The policy worker process: `python -m tritonforge_worker policy MODEL DEVICE [--train]`.

It loads MODEL (see `models.resolve`), says hello, then answers `generate` messages
through the continuous-batching `engine` (a request joins the running batch at the next
step and is answered the moment it finishes), and training messages, strictly in order,
through `trainer`. A `score` or `rl_step` runs a micro-batch at a time between engine
steps, so generations asked for meanwhile are not held up by the whole step (`_Learner`);
other training messages run whole, after the generations asked for before them and before
those asked for after. A worker started with `--train` generates from the parameters it
trains (colocated): after each optimizer step its generation copy takes the new weights
and the engine forgets its cached prefixes; rows in flight go on from there.
Settings (environment): TRITONFORGE_POLICY_BATCH (slots, default 16),
TRITONFORGE_POLICY_MAX_LEN (tokens per slot, default 4096), TRITONFORGE_POLICY_SYNC (decode
steps between reads of finished rows; default 8 on a GPU, 1 on the CPU),
TRITONFORGE_POLICY_DTYPE (float32 or bfloat16; default bfloat16 on a GPU, and on a CPU
with native bf16 arithmetic for a worker that only generates: half the bytes each decode
step reads, about twice the tokens/s on 2 cores),
TRITONFORGE_POLICY_ENGINE=0 / 1 (the earlier batch-at-a-time path, `policy.generate_batch`,
or the engine, the default), TRITONFORGE_POLICY_SPECULATE (the longest prompt-lookup draft
an eager engine step checks per row, default 16; 0 turns speculation off; steps replayed
from CUDA graphs never speculate), TRITONFORGE_POLICY_PREFILL_TOKENS (padded tokens per
prefill forward; default 32,768 on CUDA, 8,192 on the CPU; lower it to bound the
prefill's memory beside a trainer), TRITONFORGE_POLICY_DECODE_KERNEL=0 (SDPA instead of
the Triton decode attention kernel on CUDA),
TRITONFORGE_POLICY_COMPILE=0 / 1 (the engine's decode step through torch.compile: half
the step time on a GPU, for a compile of one to two minutes on the first generation;
default: on for a training worker on a GPU, whose run is long enough to repay it, off
otherwise), TRITONFORGE_POLICY_TRAIN_SHARE (the share of the time a `score` or `rl_step`
takes while generations wait, default 0.25; 0 runs them whole, after the generations in
flight, as before 2026-11-29).
Also `tokenizer MODEL DIR`.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from collections import deque
from typing import Any, Deque, Generator, Iterator, List, Optional, TypeVar, cast

from .engine import Engine, EngineError
from .models import load, load_tokenizer
from .policy import generate_batch, to_generated, to_request
from .protocol import (
    Checkpointed,
    Error,
    Generation,
    Hello,
    ProtocolError,
    RlDone,
    Sandbox,
    Scored,
    StepDone,
    TrainReady,
    decode,
    encode,
)
from .usage import Usage

T = TypeVar("T")

TRAIN_MESSAGES = ("train_setup", "train_step", "eval_loss", "save_checkpoint", "score", "rl_step")
# Training messages after which the weights are new: the engine forgets its cached prefixes.
UPDATES = ("train_step", "rl_step")
# Training messages that compute on micro-batches (and may run out of memory doing so).
COMPUTES = ("train_step", "eval_loss", "score", "rl_step")


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
    tok, net = (None, None) if train else load(model, device, _dtype(device, generate_only=True))
    trainer: List[Any] = []
    sandbox = Sandbox(landlock_abi=None, filesystem=False, network=False, signals=False,
                      gpu_memory_fraction=None, notes=["policy worker: no sandbox (it runs our model, not candidates)"])
    _send(Hello(type="hello", worker_version="policy", pid=os.getpid(),
                env=collect("cuda" if device.startswith("cuda") else "cpu"), sandbox=sandbox))
    # Requests are pipelined: a reader thread decodes and queues them while a batch is
    # generating (or a step training), and the next batch takes every request that waited
    # (generations are answered by id, in any order; training strictly in order).
    inbox = _reader()
    # The engine everywhere by default. On the CPU it was once level with the
    # batch-at-a-time path; with prompt-lookup speculation, candidates for top-p and the
    # grouped attention of a few queries it is the faster one there too (docs/agent.md).
    if os.environ.get("TRITONFORGE_POLICY_ENGINE", "1") != "0":
        return _serve_engine(inbox, _Generator(model, tok, net, device, limit, Usage(device), train))
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


def _dtype(device: str, generate_only: bool = False) -> str:
    """bfloat16 on a GPU. On a CPU, bfloat16 only for a worker that just generates and only
    where the CPU computes in bf16 natively (elsewhere it is emulated and slower than
    float32); a training worker's generation copy stays float32 there, matching the
    trainer it samples for."""
    chosen = os.environ.get("TRITONFORGE_POLICY_DTYPE")
    if chosen:
        return chosen
    if device.startswith("cuda") or (device == "cpu" and generate_only and cpu_has_bf16() and _torch_bf16()):
        return "bfloat16"
    return "float32"


def _torch_bf16() -> bool:
    """Whether this torch build does bf16 matmuls through oneDNN on this CPU (a VM may show
    the flag without letting the kernels use it)."""
    try:
        import torch

        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (ImportError, AttributeError, RuntimeError):
        return False


def cpu_has_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU has bf16 dot products (AVX-512 BF16 or AMX), which oneDNN uses for
    bf16 matmuls; read from the kernel's flags, False where they cannot be read."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[-1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        return False
    return False


def fit_to_window(req: Any, max_len: int) -> Any:
    """`max_tokens` is the caller's upper bound: where the prompt leaves less room than that
    in the engine's window, the completion gets the room there is and ends with
    finish_reason "length". A multi-turn agent's later prompts (the task, its earlier code
    and the feedback) grow past the window minus a fixed max_tokens, and refusing them
    would lose the turn. A prompt that fills the window alone is still refused."""
    room = max_len - len(req.prompt)
    if 0 < room < req.max_tokens:
        req.max_tokens = room
    return req


def _tokens_env(name: str) -> Optional[int]:
    """A whole number of tokens from the environment, or None when unset; anything else
    stops the worker at start, naming the variable."""
    value = os.environ.get(name)
    try:
        return int(value) if value else None
    except ValueError:
        raise SystemExit(f"{name}={value!r}: expected a whole number of tokens") from None


def _seconds_env(name: str) -> Optional[float]:
    """Seconds (0 or more) from the environment, or None when unset; anything else stops
    the worker at start, naming the variable."""
    value = os.environ.get(name)
    try:
        seconds = float(value) if value else None
    except ValueError:
        seconds = -1.0
    if seconds is not None and not seconds >= 0:
        raise SystemExit(f"{name}={value!r}: expected seconds, 0 or more")
    return seconds


def _switch_env(name: str) -> Optional[bool]:
    """A switch (1 or 0) from the environment, or None when unset; anything else stops the
    worker at start, naming the variable."""
    value = os.environ.get(name)
    if not value:
        return None
    if value not in ("0", "1"):
        raise SystemExit(f"{name}={value!r}: expected 1 or 0")
    return value == "1"


class _Generator:
    """The engine as the worker uses it: requests by message id, the model it generates
    from (the loaded one, or the trainer's once training is set up), its tokenizer."""

    def __init__(self, model: str, tok: Any, net: Any, device: str, slots: int, usage: Usage,
                 train: bool) -> None:
        self.model, self.tok, self.net, self.device, self.slots = model, tok, net, device, slots
        self.usage = usage
        self.max_len = int(os.environ.get("TRITONFORGE_POLICY_MAX_LEN", "4096"))
        sync = os.environ.get("TRITONFORGE_POLICY_SYNC")
        self.sync = int(sync) if sync else None
        compile_default = "1" if train and device.startswith("cuda") else "0"
        self.compile = os.environ.get("TRITONFORGE_POLICY_COMPILE", compile_default) != "0"
        self.speculate = _tokens_env("TRITONFORGE_POLICY_SPECULATE")
        self.prefill_tokens = _tokens_env("TRITONFORGE_POLICY_PREFILL_TOKENS")
        # Seconds a lone next-turn request may wait for others to share its prefill
        # (engine.py's `_hold`); 0 turns the hold off.
        self.admit_wait = _seconds_env("TRITONFORGE_POLICY_ADMIT_WAIT")
        # Prefill forwards from CUDA graphs at bucketed shapes: TRITONFORGE_POLICY_PREFILL_GRAPHS=1
        # (the engine's default is eager; graphs pay on a GPU the engine does not share).
        self.prefill_graphs = _switch_env("TRITONFORGE_POLICY_PREFILL_GRAPHS")
        # The same bucketed shapes run eagerly: TRITONFORGE_POLICY_PREFILL_BUCKETS=1.
        self.prefill_buckets = _switch_env("TRITONFORGE_POLICY_PREFILL_BUCKETS")
        self.engine: Any = None
        self.ids: dict = {}
        # Colocated: the trainer's model, and the generation copy made from it.
        self.trained: Any = None
        self.copy: Any = None

    def use(self, net: Any) -> None:
        """Generate from `net` from now on (a new engine when it is another model)."""
        if net is not self.net:
            self.net, self.engine = net, None

    def follow(self, trained: Any, updated: bool) -> None:
        """Generate from the weights of the trainer's model `trained` (colocated): through
        a generation copy (`gencopy`), made once per trainer's model and refreshed in place
        after each update; or, with TRITONFORGE_POLICY_GEN_COPY=0 or a model the copy
        cannot mirror, through the trained model itself."""
        if trained is not self.trained:
            self.trained, self.copy = trained, self._make_copy(trained)
            self.use(self.copy.net if self.copy is not None else trained)
        elif updated and self.copy is not None:
            started = time.perf_counter()
            self.copy.refresh(trained)
            self.usage.refresh_s += time.perf_counter() - started
        if updated and self.engine is not None:
            self.engine.weights_changed()

    def _make_copy(self, trained: Any) -> Any:
        if os.environ.get("TRITONFORGE_POLICY_GEN_COPY", "1") == "0":
            return None
        import torch

        from .gencopy import GenerationCopy

        try:
            return GenerationCopy(trained, self.device, getattr(torch, _dtype(self.device)))
        except Exception as exc:  # noqa: BLE001 - generating through the trained model still works
            sys.stderr.write(f"policy: no generation copy ({type(exc).__name__}: {exc}); "
                             "generating through the trained model\n")
            return None

    def busy(self) -> bool:
        return self.engine is not None and self.engine.busy()

    def _engine(self) -> Any:
        if self.engine is None:
            limit = int(getattr(self.net.config, "max_position_embeddings", 0) or self.max_len)
            # The trainer's own model is never joined (joined.py): its frozen modules'
            # forwards would change under training too.
            join = False if self.net is self.trained else None
            self.engine = Engine(self.net, self.device, max_slots=self.slots, max_len=min(self.max_len, limit),
                                 sync_every=self.sync, compile=self.compile, join=join, speculate=self.speculate,
                                 prefill_tokens=self.prefill_tokens, stats=self.usage.engine,
                                 admit_wait=self.admit_wait, prefill_graphs=self.prefill_graphs,
                                 prefill_buckets=self.prefill_buckets)
        return self.engine

    def submit(self, msg: Any) -> None:
        """Queue one generation on the engine; a refusal answers that request alone."""
        if self.net is None:
            _send(Error(type="error", id=msg.id, message="generation before train_setup: this policy worker "
                        "was started for training and has no model yet"))
            return
        try:
            if self.tok is None:
                self.tok = load_tokenizer(self.model)
            engine = self._engine()
            engine.submit(fit_to_window(to_request(self.tok, self.net, msg.job, msg.id), engine.max_len))
        except EngineError as exc:
            _send(Error(type="error", id=msg.id, message=f"generation refused: {exc}"))
            return
        except Exception as exc:  # noqa: BLE001 - a template that refuses its messages fails that request only
            _send(Error(type="error", id=msg.id, message=f"{type(exc).__name__}: {exc}"))
            return

    def step(self) -> None:
        """One engine step; finished requests are answered at once. A step that fails
        fails the requests in flight, and the worker goes on serving."""
        if self.engine is None:
            return
        training = bool(getattr(self.net, "training", False))
        self.net.eval()
        started = time.perf_counter()
        try:
            done = self.engine.step()
        except Exception as exc:  # noqa: BLE001 - reported to every caller in flight
            for key in self.engine.abort():
                _send(Error(type="error", id=key, message=f"generation failed: {type(exc).__name__}: {exc}"))
            _free_device_memory(self.device)
            return
        finally:
            self.usage.generate_s += time.perf_counter() - started
            if training:
                self.net.train()
        for fin in done:
            _send(Generation(type="generation", id=fin.key, result=to_generated(self.tok, fin),
                             elapsed_ms=fin.elapsed_ms))

    def finish(self) -> None:
        while self.busy():
            self.step()


def _free_device_memory(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def _pending(inbox: "queue.Queue[Any]", block: bool) -> List[Any]:
    """Every message waiting (at least one when `block`), stopping after the end."""
    items: List[Any] = [inbox.get()] if block else []
    while not items or items[-1] is not None:
        try:
            items.append(inbox.get_nowait())
        except queue.Empty:
            break
    return items


# Training messages a colocated worker interleaves with generation, a micro-batch at a time.
INTERLEAVED = ("score", "rl_step")


def _train_share() -> Optional[float]:
    """The share of the worker's time a training step takes while generations wait
    (TRITONFORGE_POLICY_TRAIN_SHARE, default 0.25: generation first, since a rollout's
    turns wait for it and the learner only has to be done before the rollout is); `None`
    (0): generations asked for before a training message finish first and later ones wait
    for it, as before."""
    raw = os.environ.get("TRITONFORGE_POLICY_TRAIN_SHARE", "0.25")
    try:
        share = float(raw)
    except ValueError:
        raise ValueError(f"TRITONFORGE_POLICY_TRAIN_SHARE={raw!r} is not a number (a share of time, 0 to 1)") from None
    return min(share, 1.0) if share > 0 else None


class _Learner:
    """Training messages, strictly in order. `score` and `rl_step` run a micro-batch at a
    time between engine steps: a generation asked for while the learner works (the next
    turn of a one-step-off-policy rollout) need not wait for the whole step, and the
    learner fills the time generation leaves idle. While both have work, the learner takes
    `share` of the time. A checkpoint that leaves the weights as they are runs whole
    between engine steps. Other messages (set-up, SFT steps, a merging save) run whole
    after the generations asked for before them, and those asked after wait, as before."""

    def __init__(self, gen: _Generator, share: Optional[float]) -> None:
        self.gen, self.share = gen, share
        self.state: List[Any] = []
        self.waiting: Deque[Any] = deque()
        self.job: Optional[Iterator[None]] = None
        self.msg: Any = None
        self.owed = 0.0  # engine time due before the next micro-batch, while both have work

    def busy(self) -> bool:
        return self.job is not None or bool(self.waiting)

    def holds(self) -> bool:
        """Whether a generation asked for now must wait: a message that needs the engine
        quiet is waiting, and what is asked after it comes after it."""
        return any(self._kind(m) == "quiet" for m in self.waiting)

    def _kind(self, msg: Any) -> str:
        if msg.type == "generate":
            return "generate"
        if self.share is None or not self.state:
            return "quiet"
        if msg.type in INTERLEAVED:
            return "sliced"
        if msg.type == "save_checkpoint" and not msg.save.merge_lora:
            return "inline"
        return "quiet"

    def advance(self) -> bool:
        """Move training on when its turn has come; whether it did anything."""
        while self.job is None and self.waiting:
            msg = self.waiting.popleft()
            kind = self._kind(msg)
            if kind == "generate":  # held behind a message that needed the engine quiet
                self.gen.submit(msg)
            elif kind == "sliced":
                self.job = _train_steps(self.state, msg, self.gen.device, usage=self.gen.usage)
                self.msg = msg
            else:
                if kind == "quiet":
                    self.gen.finish()
                _train(self.state, msg, self.gen.device, usage=self.gen.usage)
                self._done(msg)
                return True
        if self.job is None or (self.gen.busy() and self.owed > 0):
            return False
        started = time.perf_counter()
        try:
            next(self.job)
        except StopIteration:
            self.job = None
            self._done(self.msg)
        if self.gen.busy() and self.share is not None:
            # The micro-batch's kernels are queued, not done: wait for them, or their GPU
            # time would be charged to the engine steps queued behind them.
            _synchronize(self.gen.device)
            self.owed += (time.perf_counter() - started) * (1.0 - self.share) / self.share
        return True

    def generated(self, seconds: float) -> None:
        self.owed = max(0.0, self.owed - seconds)

    def finish(self) -> None:
        while self.busy():
            if not self.advance():
                self.gen.step()

    def _done(self, msg: Any) -> None:
        if self.state:
            self.gen.follow(self.state[0].net, updated=msg.type in UPDATES)


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def _serve_engine(inbox: "queue.Queue[Any]", gen: _Generator) -> int:
    """The worker's loop with the engine: take what arrived, then one engine step or one
    slice of training (`_Learner`)."""
    learner = _Learner(gen, _train_share())
    while True:
        stop = False
        for msg in _pending(inbox, block=not gen.busy() and not learner.busy()):
            if msg is None or (not isinstance(msg, ProtocolError) and msg.type == "shutdown"):
                stop = True
                break
            if isinstance(msg, ProtocolError):
                _send(Error(type="error", id=None, message=str(msg)))
            elif msg.type in TRAIN_MESSAGES:
                learner.waiting.append(msg)
            elif msg.type == "generate":
                if learner.holds():
                    learner.waiting.append(msg)
                else:
                    gen.submit(msg)
            else:
                _send(Error(type="error", id=getattr(msg, "id", None),
                            message=f"the policy worker does not handle {msg.type!r}"))
        if stop:
            learner.finish()
            gen.finish()
            return 0
        if not learner.advance():
            started = time.perf_counter()
            gen.step()
            learner.generated(time.perf_counter() - started)


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
        # must go (torchrun stops every rank when one exits), after rank 0 said why. A
        # request refused for what it says (`Refused`) is refused by every rank alike,
        # before any collective, and the group goes on.
        _train(trainer, msg, device, speak, fatal=True)
    dist.destroy_process_group()
    return 0


def _train(state: List[Any], msg: Any, device: str, speak: bool = True, fatal: bool = False,
           usage: Optional[Usage] = None) -> None:
    """One training request, answered in order, run to its end (`_train_steps`)."""
    for _ in _train_steps(state, msg, device, speak, fatal, usage):
        pass


def _train_steps(state: List[Any], msg: Any, device: str, speak: bool = True, fatal: bool = False,
                 usage: Optional[Usage] = None) -> Iterator[None]:
    """One training request; `score` and `rl_step` pause after each micro-batch (the
    colocated worker generates in the pauses). Errors name the request and keep the worker
    alive (nothing already trained is lost). Only its own time, not the pauses', counts to
    `usage`, whose totals an RL step's answer carries."""
    from .trainer import Refused, Trainer, TrainError, describe_oom

    started = time.perf_counter()
    spent = 0.0

    def pause() -> Iterator[None]:
        nonlocal started, spent
        spent += time.perf_counter() - started
        yield
        started = time.perf_counter()

    def run(steps: Generator[None, None, T]) -> Generator[None, None, T]:
        """Drive a pausing computation, pausing with it; its result is the return value."""
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return cast(T, done.value)
            yield from pause()

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
        elif msg.type == "score":
            scores = yield from run(trainer.score_steps(msg.job))
            reply = Scored(type="scored", id=msg.id, scores=scores)
        elif msg.type == "rl_step":
            stats = yield from run(trainer.rl_step_steps(msg.batch))
            if usage is not None:
                use, usage = usage, None  # counted here: the snapshot includes this step
                use.train_s += spent + time.perf_counter() - started
                stats.device = use.snapshot()
            reply = RlDone(type="rl_done", id=msg.id, stats=stats)
        elif msg.type == "save_checkpoint":
            trainer.save(msg.save)
            reply = Checkpointed(type="checkpointed", id=msg.id,
                                 dir=msg.save.dir, step=trainer.step)
        if speak and reply is not None:
            _send(reply)
    except Exception as exc:  # noqa: BLE001 - every failure goes back to the host, named
        text = f"{type(exc).__name__}: {exc}"
        if "OutOfMemoryError" in type(exc).__name__ and msg.type in COMPUTES:
            text = describe_oom(exc, _micro_batches(msg))
            try:
                import torch

                state[0].drop_grads()
                torch.cuda.empty_cache()
            except Exception:  # noqa: BLE001 - best effort
                pass
        if speak:
            _send(Error(type="error", id=msg.id, message=text))
        if fatal and not isinstance(exc, Refused):
            sys.stderr.write(f"rank {os.environ.get('RANK', '?')}: {text}\n")
            sys.stderr.flush()
            os._exit(1)
    finally:
        if usage is not None:
            usage.train_s += spent + time.perf_counter() - started


def _micro_batches(msg: Any) -> List[Any]:
    """The micro-batches of rows a training message computes on."""
    if msg.type == "score":
        return list(msg.job.batch.micro)
    if msg.type == "rl_step":
        return [mb.rows for mb in msg.batch.micro]
    return list(msg.batch.micro)
