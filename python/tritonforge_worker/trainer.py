"""The policy worker's trainer: tensor math only.

Rust renders, tokenises, masks, packs and schedules; this module receives batches of
token ids with a loss mask and position ids, and does forward, backward and the
optimizer step. It loads a model for training (a Hugging Face directory; a directory
with a config alone gives random weights; a GGUF file, dequantised), optionally wraps it
in LoRA adapters, and writes checkpoints in the Hugging Face layout with the optimizer,
schedule and random state beside them so a run can resume exactly.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import time
from pathlib import Path
from typing import Any, Callable, Dict, Generator, List, Optional, Sequence, Tuple, TypeVar, cast

from .models import ADAPTER_CONFIG, adapter_chain, gguf_kwargs, has_weights, merge_adapters, resolve
from .protocol import (
    MicroBatch,
    RlBatch,
    RlMicroBatch,
    RlStats,
    SaveJob,
    ScoreJob,
    Scores,
    StepStats,
    TrainBatch,
    TrainInfo,
    TrainSetupJob,
)
from .rl import STAT_SUMS, PpoTerms, logits_logprobs, ppo_loss, token_logprobs

STATE_FILE = "trainer_state.pt"
ADAPTER_DIR = "adapter"
PROBE_FILE = "probe.pt"


VARLEN = "tritonforge_varlen"


class TrainError(RuntimeError):
    """A training request that cannot be done, said plainly."""


class Refused(TrainError):
    """A request refused from what it says alone, before any computation: every rank
    refuses it alike, and none is left inside a collective, so several ranks go on."""


# How rows of one conversation each (padding after it) get causal attention on a GPU:
# `cudnn` once checked against flash attention on this device, `flash` where cuDNN
# fails or disagrees, `sdpa` (PyTorch's own choice) where even flash cannot be called.
_ROWS: Dict[str, str] = {"kernel": "sdpa"}


def _causal_rows(query: Any, key: Any, value: Any, scaling: Optional[float]) -> Any:
    """Causal attention over rows that each hold one conversation, padding after it (so
    no real token sees padding). On Hopper cuDNN's kernel is about twice as fast as flash
    attention here (docs/training.md); both take grouped key/value heads as they are.
    Each kernel is called by name: `scaled_dot_product_attention` picks one by rules of
    its own (cuDNN for these shapes on an H100 with torch 2.11), which would make the
    check below compare cuDNN with itself."""
    import torch
    import torch.nn.functional as F

    kernel = _ROWS["kernel"]
    if kernel == "cudnn":
        return torch.ops.aten._scaled_dot_product_cudnn_attention(
            query, key, value, None, True, 0.0, True, False, scale=scaling)[0]
    if kernel == "flash":
        return torch.ops.aten._scaled_dot_product_flash_attention(query, key, value, 0.0, True, False,
                                                                  scale=scaling)[0]
    return F.scaled_dot_product_attention(query, key, value, is_causal=True, scale=scaling, enable_gqa=True)


def _check_cudnn_rows(device: str, heads: int, kv_heads: int, head_dim: int) -> str:
    """Settles `_ROWS` and says how: cuDNN's causal attention is used only where it runs
    and agrees with flash attention, output and gradients. PyTorch's packed cuDNN path
    gave wrong gradients (docs/training.md), and cuDNN's backward is sensitive to the
    layout of what it is given, so this checks it on every start, with the layouts
    training gives it: query, key and value are (batch, heads, tokens, dim) views of
    (batch, tokens, heads, dim) memory, as transformers makes them, and the output
    gradient arrives through the same transpose and reshape. Two shapes: a batch of short
    rows and one long row. `TRITONFORGE_ROWS_ATTENTION=flash` skips cuDNN (for
    comparisons)."""
    import torch

    _ROWS["kernel"] = "sdpa"
    if not device.startswith("cuda") or kv_heads <= 0 or heads % kv_heads:
        return "sdpa (no CUDA or odd heads)"
    gen = torch.Generator(device=device).manual_seed(0)

    def run(kernel: str, b: int, t: int) -> List[Any]:
        _ROWS["kernel"] = kernel
        gen.manual_seed(b * 100_003 + t)

        def rand(h: int) -> Any:
            x = torch.randn(b, t, h, head_dim, device=device, dtype=torch.bfloat16, generator=gen)
            return x.transpose(1, 2).detach().requires_grad_(True)

        q, k, v = rand(heads), rand(kv_heads), rand(kv_heads)
        grad = torch.randn(b, t, heads * head_dim, device=device, dtype=torch.bfloat16, generator=gen)
        out = _causal_rows(q, k, v, head_dim ** -0.5).transpose(1, 2).reshape(b, t, -1)
        out.backward(grad)
        return [x.detach().float() for x in (out, q.grad, k.grad, v.grad)]

    shapes = ((4, 320), (1, 1088))
    try:
        flash = [run("flash", b, t) for b, t in shapes]
    except Exception as exc:  # noqa: BLE001 - any failure means: not on this device
        _ROWS["kernel"] = "sdpa"
        return f"sdpa (flash failed: {type(exc).__name__}: {str(exc)[:160]})"
    if os.environ.get("TRITONFORGE_ROWS_ATTENTION") == "flash":
        _ROWS["kernel"] = "flash"
        return "flash (TRITONFORGE_ROWS_ATTENTION)"
    try:
        cudnn = [run("cudnn", b, t) for b, t in shapes]
    except Exception as exc:  # noqa: BLE001
        _ROWS["kernel"] = "flash"
        return f"flash (cuDNN failed: {type(exc).__name__}: {str(exc)[:160]})"
    diffs = [float((a - b).abs().max() / b.abs().max().clamp_min(1e-6))
             for got, ref in zip(cudnn, flash, strict=True) for a, b in zip(got, ref, strict=True)]
    # max() would pass over a NaN after the first element; a NaN anywhere means flash.
    worst = max(diffs) if all(math.isfinite(d) for d in diffs) else math.nan
    _ROWS["kernel"] = "cudnn" if worst <= 2e-2 else "flash"
    return f"{_ROWS['kernel']} (cuDNN against flash: {worst:.1e})"


def _keep_rows(one_per_row: bool, position_ids: List[List[int]]) -> bool:
    """Whether a micro-batch's padded rows go to attention as they are (rather than joined,
    padding dropped): only when the plan groups rows by length, so that padding is small
    and widths are few (`group_by_length`), and every row does hold one conversation: its
    positions start at 0 once (padding continues them)."""
    return one_per_row and all(row.count(0) == 1 for row in position_ids)


def _register_varlen() -> bool:
    """Registers our GPU attention with transformers. Packed rows: flash attention over
    the joined rows, each conversation attending only to itself, with no dense mask
    (PyTorch's `varlen_attn`); the boundaries arrive as `cu_seq_lens_q` with each forward.
    Rows of one conversation each (no boundaries given): causal attention, through cuDNN
    where it was checked (`_check_cudnn_rows`)."""
    try:
        import torch
        from torch.nn.attention.varlen import varlen_attn
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError:
        return False

    def attend(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
               scaling: Optional[float] = None, dropout: float = 0.0, **kw: Any) -> Tuple[Any, None]:
        if query.dtype not in (torch.float16, torch.bfloat16):
            # Under autocast, rotary embeddings leave q and k in fp32; flash needs 16 bits.
            low = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else torch.bfloat16
            query, key, value = query.to(low), key.to(low), value.to(low)
        cu = kw.get("cu_seq_lens_q")
        if cu is None:
            return _causal_rows(query, key, value, scaling).transpose(1, 2), None
        longest = kw["max_length_q"]
        b, h, t, d = query.shape
        kv = key.shape[1]  # grouped-query attention: the flash kernel takes fewer key/value heads
        q = query.transpose(1, 2).reshape(b * t, h, d)
        k = key.transpose(1, 2).reshape(b * t, kv, d)
        v = value.transpose(1, 2).reshape(b * t, kv, d)
        out = varlen_attn(q, k, v, cu, cu, longest, longest, scale=scaling, window_size=(-1, 0))
        return out.reshape(b, t, h, d), None

    AttentionInterface.register(VARLEN, attend)
    AttentionMaskInterface.register(VARLEN, lambda *a, **k: None)
    return True


def _to_device(values: Any, device: str, dtype: Any = None) -> Any:
    """A host list as a device tensor without waiting for the device: through pinned
    memory, copied asynchronously, so the host can prepare the next micro-batch while the
    device still works on this one."""
    import torch

    t = torch.tensor(values, dtype=dtype or torch.long)
    if device.startswith("cuda"):
        return t.pin_memory().to(device, non_blocking=True)
    return t


def _boundaries(position_ids: List[List[int]], device: str) -> Tuple[Any, int]:
    """Cumulative sequence starts over the flattened batch (a sequence starts wherever
    its position is 0) and the longest sequence."""
    import torch

    width = len(position_ids[0]) if position_ids else 0
    starts = [r * width + j for r, row in enumerate(position_ids) for j, p in enumerate(row) if p == 0]
    starts.append(len(position_ids) * width)
    longest = max(b - a for a, b in zip(starts, starts[1:], strict=False))
    return _to_device(starts, device, torch.int32), longest


def _plain_head(head: Any) -> bool:
    """An output projection that is a bias-free linear map we may apply ourselves (not a
    LoRA-wrapped or otherwise decorated module)."""
    import torch

    return type(head) is torch.nn.Linear and head.bias is None


def _precision(name: str, device: str) -> Tuple[Any, Any]:
    """(weight and optimizer dtype, compute dtype under autocast or None).

    `mixed` keeps fp32 weights and optimizer state and computes in bf16: an AdamW step of
    1e-5 is below half a bf16 ulp for most weights, so training bf16 weights directly
    loses most updates. `bf16` does exactly that (half the memory, for throughput
    measurements and very large models); `fp32` computes in fp32. `auto`: `mixed` on a
    GPU, `fp32` on a CPU."""
    import torch

    if name == "auto":
        name = "mixed" if device.startswith("cuda") else "fp32"
    table = {"mixed": (torch.float32, torch.bfloat16), "bf16": (torch.bfloat16, None),
             "fp32": (torch.float32, None)}
    if name not in table:
        raise TrainError(f"dtype {name!r}: expected auto, mixed, bf16 or fp32")
    return table[name]


def load_for_training(model: str, dtype: Any, seed: int, attention: str = "sdpa", device: str = "cpu") -> Any:
    """The model to train: from weights, or randomly initialised from a config alone
    (directly on the device: initialising billions of weights on the CPU is slow). An
    adapter directory (or a chain of them) is merged into its base, and training starts
    from the merged model."""
    try:
        base, adapters = adapter_chain(model)
    except ValueError as exc:
        raise TrainError(str(exc)) from None
    return merge_adapters(_load_plain(base, dtype, seed, attention, device), adapters)


def _load_plain(model: str, dtype: Any, seed: int, attention: str, device: str) -> Any:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    path, gguf = resolve(model)
    p = Path(path)
    if not p.exists():
        raise TrainError(f"model {model}: no such file or directory")
    if gguf is None and p.is_dir() and not has_weights(p):
        if not (p / "config.json").is_file():
            raise TrainError(f"model {model}: neither weights nor config.json in the directory")
        config = AutoConfig.from_pretrained(path)
        torch.manual_seed(seed)
        with torch.device(device):
            return AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attention)
    net = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=attention, **gguf_kwargs(gguf))
    if gguf:
        # The weights were dequantised on load; what is trained and saved is a plain model.
        net.hf_quantizer = None
        net.is_quantized = False
        if hasattr(net.config, "quantization_config"):
            del net.config.quantization_config
    return net


def _world() -> Tuple[int, int]:
    """(world size, rank): several when running under `torchrun`."""
    try:
        import torch.distributed as dist
    except ImportError:
        return 1, 0
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def _rank_rows(rows: int, rank: int, world: int) -> List[int]:
    """The rows of a micro-batch that this rank computes: every world-th, from its rank."""
    return list(range(rank, rows, world))


def _my_rows(mb: MicroBatch, rank: int, world: int) -> MicroBatch:
    """This rank's rows of a micro-batch (every rank must run forward and backward, so a
    rank left without a row gets the first one with no targets)."""
    take = _rank_rows(len(mb.input_ids), rank, world)
    if take:
        return MicroBatch(input_ids=[mb.input_ids[i] for i in take], loss_mask=[mb.loss_mask[i] for i in take],
                          position_ids=[mb.position_ids[i] for i in take], lengths=[mb.lengths[i] for i in take])
    return MicroBatch(input_ids=mb.input_ids[:1], loss_mask=[[0] * len(mb.loss_mask[0])],
                      position_ids=mb.position_ids[:1], lengths=mb.lengths[:1])


def _one_row(mb: MicroBatch) -> MicroBatch:
    """The micro-batch's rows end to end in one row, padding dropped: with attention
    bounded per conversation (varlen), rows are only a packing device, and padding would be
    computed on for nothing. A row's first token is never a target (as in the padded
    rows, where it has nothing before it), so no token learns to predict across a join."""
    if len(mb.lengths) != len(mb.input_ids):
        raise TrainError(f"a micro-batch with {len(mb.input_ids)} rows and {len(mb.lengths)} lengths")
    if any(any(m[n:]) for m, n in zip(mb.loss_mask, mb.lengths, strict=False)):
        raise TrainError("a micro-batch with targets in its padding (loss_mask set beyond lengths)")
    cut = list(zip(mb.input_ids, mb.loss_mask, mb.position_ids, mb.lengths, strict=False))
    return MicroBatch(input_ids=[[t for i, _, _, n in cut for t in i[:n]]],
                      loss_mask=[[t for _, m, _, n in cut for t in [0, *m[1:n]][:n]]],
                      position_ids=[[t for _, _, p, n in cut for t in p[:n]]],
                      lengths=[sum(n for *_, n in cut)])


def _max_over_ranks(world: int, device: str, value: float) -> float:
    if world == 1:
        return value
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def _targets_per_row(mb: MicroBatch) -> List[int]:
    """How many target tokens each row holds: positions t > 0 with loss_mask[t] set (the
    tokens `Trainer._inputs` selects, and the length of every per-token list of RL)."""
    return [sum(1 for keep in m[1:] if keep) for m in mb.loss_mask]


def _check_rl(batch: RlBatch) -> None:
    """Every per-token list of an RL batch holds one value per target token of its row;
    the step has target tokens and a positive divisor. The error names the culprit."""
    if batch.loss.loss_tokens <= 0:
        raise Refused(f"rl_step: loss_tokens is {batch.loss.loss_tokens}; it must be positive")
    if not batch.loss.temperature > 0:
        raise Refused(f"rl_step: temperature is {batch.loss.temperature}; it must be positive")
    total = 0
    for k, mb in enumerate(batch.micro):
        counts = _targets_per_row(mb.rows)
        if len(mb.rows.input_ids) != len(counts):
            raise Refused(f"rl_step micro-batch {k}: {len(mb.rows.input_ids)} rows of ids, {len(counts)} masks")
        lists = {"advantages": mb.advantages, "behaviour": mb.behaviour, "proximal": mb.proximal,
                 "reference": mb.reference}
        for name, per_row in lists.items():
            if per_row is None:
                continue
            if len(per_row) != len(counts):
                raise Refused(f"rl_step micro-batch {k}: {name} has {len(per_row)} rows, the micro-batch "
                              f"{len(counts)}")
            for r, (values, n) in enumerate(zip(per_row, counts, strict=True)):
                if len(values) != n:
                    raise Refused(f"rl_step micro-batch {k} row {r}: {name} has {len(values)} values for "
                                  f"{n} target tokens")
        total += sum(counts)
    if total == 0:
        raise Refused("an RL step with no target tokens (no loss_mask set past a row's first token)")


def _name_base(adapter: Path, model: str) -> None:
    """peft names an adapter's base as transformers loaded it (for a GGUF file, only its
    directory); the saved adapter names the setup's model instead (a path made absolute),
    so that its directory loads by itself (`models.load`, `tritonforge run --model DIR`)."""
    path = adapter / ADAPTER_CONFIG
    config = json.loads(path.read_text())
    named = model == "smollm2" or not Path(model).exists()
    config["base_model_name_or_path"] = model if named else str(Path(model).resolve())
    path.write_text(json.dumps(config, indent=2) + "\n")


def _sum_over_ranks(world: int, device: str, *values: float) -> Tuple[Any, ...]:
    if world == 1:
        return values
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return tuple(t.tolist())


def _tidy_config(out: Path, dtype: Optional[str] = None) -> None:
    """A checkpoint must load anywhere: no trace of our own attention function in its
    configuration. With `dtype`, the configuration states the dtype its weights are
    stored in (save_pretrained names the dtype of the model in memory)."""
    path = out / "config.json"
    if not path.is_file():
        return
    config = json.loads(path.read_text())
    changed = False
    if config.get("_attn_implementation") == VARLEN or config.get("attn_implementation") == VARLEN:
        config.pop("_attn_implementation", None)
        config.pop("attn_implementation", None)
        changed = True
    if dtype is not None:
        config["dtype"] = dtype
        if "torch_dtype" in config:
            config["torch_dtype"] = dtype
        changed = True
    if changed:
        path.write_text(json.dumps(config, indent=2) + "\n")


T = TypeVar("T")


def drive(steps: Generator[None, None, T]) -> T:
    """Run a computation that pauses (`Trainer.score_steps`, `rl_step_steps`) to its end."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return cast(T, done.value)


def _lr_at(step: int, setup: TrainSetupJob) -> float:
    """Linear warm-up to `lr`, then cosine decay to `min_lr` at `total_steps`."""
    if setup.warmup_steps > 0 and step < setup.warmup_steps:
        return setup.lr * (step + 1) / setup.warmup_steps
    span = max(1, setup.total_steps - setup.warmup_steps)
    progress = min(1.0, (step - setup.warmup_steps) / span)
    return setup.min_lr + 0.5 * (setup.lr - setup.min_lr) * (1.0 + math.cos(math.pi * progress))


def _ce_chunk(logits: Any, targets: Any) -> Tuple[Any, Any]:
    """Summed cross-entropy of one chunk of logits and its gradient with respect to the
    logits (softmax minus one-hot), in the logits' dtype. Under `torch.compile` this is
    two passes over the chunk instead of a string of fp32 element-wise kernels."""
    import torch

    x = logits.float()
    lse = torch.logsumexp(x, dim=-1)
    picked = x.gather(1, targets[:, None]).squeeze(1)
    grad = torch.exp(x - lse[:, None])
    grad = grad.scatter_add(1, targets[:, None], torch.full_like(picked[:, None], -1.0))
    return (lse - picked).sum(), grad.to(logits.dtype)


def head_loss(hidden: Any, weight: Any, targets: Any, dtype: Any, chunk: int = 4096,
              ce: Any = _ce_chunk) -> Any:
    """Sum over rows of cross-entropy(hidden @ weight.T, targets), without ever holding
    the whole [rows, vocabulary] logits: chunk by chunk, the logits are computed in
    `dtype`, their gradients with respect to `hidden` and `weight` are taken at once, and
    the logits are dropped. With a 151,936-token vocabulary the full fp32 logits and their
    gradient are gigabytes per micro-batch; here they are one chunk."""
    import torch

    class HeadLoss(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, h_in: Any, w_in: Any) -> Any:
            h_all, w = h_in.to(dtype), w_in.to(dtype)
            need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
            total = torch.zeros((), dtype=torch.float32, device=h_in.device)
            gh = torch.empty_like(h_all) if need_h else None
            gw = torch.zeros(w_in.shape, dtype=torch.float32, device=w_in.device) if need_w else None
            for s in range(0, h_all.shape[0], chunk):
                h = h_all[s:s + chunk]
                loss, g = ce(h @ w.t(), targets[s:s + chunk])
                total += loss
                if gh is not None:
                    gh[s:s + chunk] = g @ w
                if gw is not None:
                    gw += (g.t() @ h).float()
            ctx.save_for_backward(gh, gw)
            ctx.dtypes = (h_in.dtype, w_in.dtype)
            return total

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Tuple[Any, Any]:
            gh, gw = ctx.saved_tensors
            h_dtype, w_dtype = ctx.dtypes
            return (None if gh is None else (gh.float() * grad).to(h_dtype),
                    None if gw is None else (gw * grad).to(w_dtype))

    if not torch.is_grad_enabled() or not (hidden.requires_grad or weight.requires_grad):
        with torch.no_grad():
            w = weight.to(dtype)
            return sum((ce(hidden[s:s + chunk].to(dtype) @ w.t(), targets[s:s + chunk])[0]
                        for s in range(0, hidden.shape[0], chunk)),
                       torch.zeros((), dtype=torch.float32, device=hidden.device))
    return HeadLoss.apply(hidden, weight)


def _compile_wanted(mode: str, device: str) -> bool:
    if mode not in ("auto", "on", "off"):
        raise TrainError(f"compile {mode!r}: expected auto, on or off")
    return mode == "on" or (mode == "auto" and device.startswith("cuda"))


def _compile_layers(layers: Any) -> None:
    """Regional compilation: each decoder layer's forward (FSDP's hooks stay outside;
    transformers' activation checkpointing, which wraps `forward`, is compiled with it).
    Every layer runs the same code, so one compiled graph with dynamic shapes serves them
    all and every packing of a row."""
    import torch

    config = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(config, name):
            setattr(config, name, max(64, getattr(config, name)))
    for layer in layers:
        layer.forward = torch.compile(layer.forward, dynamic=True)


class Trainer:
    def __init__(self, setup: TrainSetupJob, device: str) -> None:
        import torch

        self.setup = setup
        self.device = device
        self.dtype, self.compute = _precision(setup.dtype, device)
        self.compute_dtype = self.compute or self.dtype  # what the forward pass computes in
        torch.manual_seed(setup.seed)
        random.seed(setup.seed)
        resume = Path(setup.resume) if setup.resume else None
        if resume is not None and not (resume / STATE_FILE).is_file():
            raise TrainError(f"resume {resume}: not a checkpoint of ours (no {STATE_FILE})")
        # Full fine-tuning resumes from the checkpoint's weights; LoRA from the base model
        # plus the checkpoint's adapter.
        source = str(resume) if resume is not None and setup.lora is None else setup.model
        # The requested kernel, then the one chosen (the varlen kernel's registered name).
        attention: str = setup.attention
        # Flash attention computes in 16 bits: fine under bf16 or mixed, not a silent
        # downgrade of a run that asked for fp32.
        sixteen = self.dtype != torch.float32 or self.compute is not None
        if attention == "auto":
            attention = VARLEN if device.startswith("cuda") and sixteen and _register_varlen() else "sdpa"
        elif attention == "varlen":
            if not (device.startswith("cuda") and _register_varlen()):
                raise TrainError("attention 'varlen' needs CUDA and torch.nn.attention.varlen")
            if not sixteen:
                raise TrainError("attention 'varlen' computes in bf16; use dtype mixed or bf16, or attention sdpa")
            attention = VARLEN
        elif attention not in ("sdpa", "flex_attention", "eager"):
            raise TrainError(f"attention {attention!r}: expected auto, varlen, sdpa, flex_attention or eager")
        self.attention = attention
        net = load_for_training(source, self.dtype, setup.seed, attention, device)
        self.attention_note = attention
        if attention == VARLEN:
            cfg = net.config
            heads = int(getattr(cfg, "num_attention_heads", 0) or 0)
            kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
            head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // max(1, heads))
            self.attention_note = f"{attention}, rows: {_check_cudnn_rows(device, heads, kv_heads, head_dim)}"
        net.config.use_cache = False
        if setup.gradient_checkpointing:
            net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if setup.lora is not None:
            from peft import LoraConfig, PeftModel, get_peft_model

            if resume is not None:
                net = PeftModel.from_pretrained(net, str(resume / ADAPTER_DIR), is_trainable=True)
            else:
                cfg = LoraConfig(r=setup.lora.rank, lora_alpha=setup.lora.alpha,
                                 lora_dropout=setup.lora.dropout,
                                 target_modules=list(setup.lora.target_modules), task_type="CAUSAL_LM")
                net = get_peft_model(net, cfg)
            if setup.gradient_checkpointing:
                net.enable_input_require_grads()
        self.world, self.rank = _world()
        self.net = net.to(device)
        self.compiled = _compile_wanted(setup.compile, device)
        self.ce = _ce_chunk
        if self.world > 1:
            if setup.lora is not None:
                raise TrainError("LoRA on several GPUs is not supported yet; use one GPU or full fine-tuning")
            from torch.distributed.fsdp import fully_shard

            # FSDP2: every decoder layer is its own unit (its weights gathered just in time),
            # the rest (embeddings, final norm, head) the root unit.
            kw: Dict[str, Any] = {}
            if self.compute is not None:
                from torch.distributed.fsdp import MixedPrecisionPolicy

                # Weights gathered in bf16 for compute, gradients reduced in fp32.
                kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=self.compute, reduce_dtype=torch.float32)
                self.compute = None
            for layer in self._base().model.layers:
                fully_shard(layer, **kw)
            fully_shard(self.net, **kw)
        self.params = [p for p in self.net.parameters() if p.requires_grad]
        # `mixed` on one device: fp32 master weights beside bf16 model weights, rather
        # than fp32 weights under autocast, which casts every weight at every micro-batch
        # and every gradient back. The masters take the summed gradient and the update;
        # the model's weights are their bf16 copy, refreshed once per step. (Several
        # ranks get the same split from FSDP2's mixed-precision policy; LoRA keeps
        # autocast, its adapters being too few to matter.)
        self.masters: Optional[List[Any]] = None
        if self.compute is not None and self.world == 1 and setup.lora is None:
            self.masters = [p.detach().clone() for p in self.params]
            with torch.no_grad():
                for p in self.params:  # parameters only: buffers (rotary frequencies) stay fp32
                    p.data = p.data.to(self.compute)
            self.compute = None
        if self.compiled:
            # After sharding: transformers' checkpointing wrapper only checkpoints when it
            # is the outermost `forward` of the layer's class, and `fully_shard` gives each
            # layer a new class; compiled earlier, the old wrapper would silently skip it.
            _compile_layers(self._base().model.layers)
            self.ce = torch.compile(_ce_chunk, dynamic=True)
        self.net.train()
        self.trained = self.masters if self.masters is not None else self.params
        decay = [p for p in self.trained if p.dim() >= 2]
        no_decay = [p for p in self.trained if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": setup.weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
        self.opt = torch.optim.AdamW(groups, lr=setup.lr, betas=(0.9, 0.95), eps=1e-8,
                                     fused=device.startswith("cuda"))
        self.step = 0
        # Full fine-tuning's starting policy, for `score(reference=True)`: loaded when first
        # asked for (`_frozen_reference`).
        self.reference: Any = None
        if resume is not None:
            self._load_state(resume)

    # -- the model's parts, for a loss computed only where it counts ----------------------

    def _base(self) -> Any:
        return self.net.get_base_model() if hasattr(self.net, "get_base_model") else self.net

    def info(self) -> TrainInfo:
        import torch

        base = self._base()
        cfg = base.config
        head = base.get_output_embeddings()
        heads = getattr(cfg, "num_attention_heads", 0) or 0
        head_dim = getattr(cfg, "head_dim", None) or (cfg.hidden_size // max(1, heads))
        gpu = torch.cuda.get_device_name(0) if self.device.startswith("cuda") else None
        return TrainInfo(
            parameters=sum(p.numel() for p in self.net.parameters()),
            trainable=sum(p.numel() for p in self.params),
            head_parameters=head.weight.numel() if head is not None else 0,
            vocab_size=int(base.get_input_embeddings().weight.shape[0]),
            layers=int(getattr(cfg, "num_hidden_layers", 0)),
            attention_width=int(heads * head_dim),
            dtype="bfloat16" if self.dtype == torch.bfloat16 else "float32",
            device=self.device,
            world_size=self.world,
            gpu_name=gpu,
            step=self.step,
            compiled=self.compiled,
            attention=self.attention_note,
        )

    def _inputs(self, mb: MicroBatch) -> Dict[str, Any]:
        """One micro-batch as device tensors, copied without waiting for the device, so
        a step builds micro-batch k+1 while the device runs k. The positions to score
        arrive as indices worked out here from the lists; a boolean mask on the device
        would make the host wait for the forward pass. Position t predicts token t+1, so
        the mask is read shifted by one; only positions whose next token is a target are
        scored (most of a prompt never is)."""
        if self.world > 1:
            mb = _my_rows(mb, self.rank, self.world)
        rows = self.attention == VARLEN and _keep_rows(self.setup.one_per_row, mb.position_ids)
        if self.attention == VARLEN and not rows:
            mb = _one_row(mb)
        width = len(mb.input_ids[0]) if mb.input_ids else 0
        sel = [r * width + t - 1 for r, m in enumerate(mb.loss_mask) for t, keep in enumerate(m) if keep and t > 0]
        tgt = [mb.input_ids[i // width][i % width + 1] for i in sel]

        def put(x: Any) -> Any:
            return _to_device(x, self.device)

        extra = {} if rows else self._varlen_kwargs(mb.position_ids)
        return {"ids": put(mb.input_ids), "pos": put(mb.position_ids), "extra": extra,
                "sel": put(sel), "tgt": put(tgt), "n": len(sel), "tokens": width * len(mb.input_ids)}

    def _at_targets(self, inp: Dict[str, Any], of_hidden: Callable[[Any, Any, Any], Any],
                    of_logits: Callable[[Any], Any], net: Any = None) -> Any:
        """What one micro-batch (from `_inputs`) gives at its target positions:
        `of_hidden(hidden, head weight, dtype)` of the final hidden states there, where the
        output projection is a plain linear map we apply ourselves (chunked: no logits for
        every position and the whole vocabulary), else `of_logits` of the model's logits
        there. `net`: the model to run (the trainer's own by default)."""
        net = self.net if net is None else net
        base = net.get_base_model() if hasattr(net, "get_base_model") else net
        decoder = getattr(base, "model", None)
        head = base.get_output_embeddings()

        def at(hidden: Any) -> Any:
            hidden = hidden.reshape(-1, hidden.shape[-1]).index_select(0, inp["sel"])
            return of_hidden(hidden, head.weight, self.compute or hidden.dtype)

        with self._autocast():
            if decoder is not None and head is not None and _plain_head(head):
                if self.world == 1:
                    return at(decoder(input_ids=inp["ids"], position_ids=inp["pos"], **inp["extra"]).last_hidden_state)
                # Several ranks: the whole model's forward must run, since FSDP gathers the
                # head's (root unit's) weights in its hooks; the head computes what is
                # asked in place of logits, so no rank ever holds logits for every position.
                head.forward = at
                try:
                    return net(input_ids=inp["ids"], position_ids=inp["pos"], **inp["extra"]).logits
                finally:
                    del head.forward
            logits = net(input_ids=inp["ids"], position_ids=inp["pos"], **inp["extra"]).logits
        return of_logits(logits.reshape(-1, logits.shape[-1]).index_select(0, inp["sel"]))

    def _loss_sum(self, inp: Dict[str, Any]) -> Any:
        """The sum of target-token losses of one micro-batch (from `_inputs`)."""
        import torch.nn.functional as F

        return self._at_targets(
            inp, lambda h, w, dtype: head_loss(h, w, inp["tgt"], dtype, ce=self.ce),
            lambda logits: F.cross_entropy(logits.float(), inp["tgt"], reduction="sum"))

    def _autocast(self) -> Any:
        import contextlib

        import torch

        if self.compute is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type="cuda", dtype=self.compute)

    def _varlen_kwargs(self, position_ids: List[List[int]]) -> Dict[str, Any]:
        if self.attention != VARLEN:
            return {}
        cu, longest = _boundaries(position_ids, self.device)
        return {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": longest, "max_length_k": longest}

    def _stats(self, loss: float, n: int, tokens: int, grad_norm: Optional[float], lr: float,
               started: float) -> StepStats:
        return StepStats(step=self.step, loss=loss, loss_tokens=n, tokens=tokens, grad_norm=grad_norm,
                         lr=lr, elapsed_ms=(time.perf_counter() - started) * 1000.0, memory_bytes=self._peak_memory())

    def _peak_memory(self) -> Optional[int]:
        """Peak accelerator memory since the last call (None on a CPU)."""
        import torch

        if not self.device.startswith("cuda"):
            return None
        mem = int(torch.cuda.max_memory_allocated())
        torch.cuda.reset_peak_memory_stats()
        return mem

    def _begin_step(self) -> float:
        """The learning rate of the step about to be taken, set in the optimizer."""
        lr = _lr_at(self.step, self.setup)
        for group in self.opt.param_groups:
            group["lr"] = lr
        self.net.train()
        return lr

    def _apply_step(self) -> float:
        """Clip the summed gradients, take the optimizer step and advance the schedule;
        the gradient norm before clipping. A non-finite norm refuses the step."""
        import torch

        clip = self.setup.grad_clip if self.setup.grad_clip > 0 else float("inf")
        norm_t = torch.nn.utils.clip_grad_norm_(self.trained, clip)
        norm = float(norm_t.full_tensor() if hasattr(norm_t, "full_tensor") else norm_t)
        if not math.isfinite(norm):
            self.drop_grads()
            raise TrainError(f"step {self.step + 1}: gradient norm is {norm}; the step was not applied")
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if self.masters is not None:
            with torch.no_grad():
                torch._foreach_copy_(self.params, self.masters)
        self.step += 1
        return norm

    def train_step(self, batch: TrainBatch) -> StepStats:
        import torch

        started = time.perf_counter()
        total = sum(sum(sum(row[1:]) for row in mb.loss_mask) for mb in batch.micro)
        if total == 0:
            raise TrainError("a step with no target tokens (no assistant token in any row)")
        lr = self._begin_step()
        losses, tokens = [], 0
        last = len(batch.micro) - 1
        for k, inp in enumerate(map(self._inputs, batch.micro)):  # the next one is built while the device works
            if self.world > 1:
                # Gradients are reduced across ranks once per step, after the last
                # micro-batch; until then each rank accumulates its own (FSDP2 keeps the
                # accumulation in the fp32 reduce dtype).
                self.net.set_requires_gradient_sync(k == last)
            loss = self._loss_sum(inp)
            # Every target token weighs the same whatever micro-batch (or rank) it is in;
            # FSDP averages gradients over ranks, so each rank's share is scaled back up.
            (loss * self.world / total).backward()
            self._fold_grads()
            losses.append(loss.detach())  # read once at the end: no device sync per micro-batch
            tokens += inp["tokens"]
        loss_sum, tokens = _sum_over_ranks(self.world, self.device, float(torch.stack(losses).sum()), tokens)
        norm = self._apply_step()
        return self._stats(loss_sum / total, total, int(tokens), norm, lr, started)

    def _fold_grads(self) -> None:
        """With master weights: a micro-batch's bf16 gradients are added into the masters'
        fp32 gradients, so accumulation over micro-batches rounds in fp32."""
        import torch

        if self.masters is None:
            return
        into, grads = [], []
        for p, m in zip(self.params, self.masters, strict=True):
            if p.grad is None:
                continue
            if m.grad is None:
                m.grad = p.grad.float()
            else:
                into.append(m.grad)
                grads.append(p.grad)
            p.grad = None
        if into:
            torch._foreach_add_(into, grads)

    def drop_grads(self) -> None:
        """Forget a step's gradients (it failed: out of memory, a non-finite norm)."""
        self.opt.zero_grad(set_to_none=True)
        for p in self.params:
            p.grad = None

    def eval_loss(self, batch: TrainBatch) -> StepStats:
        import torch

        started = time.perf_counter()
        self.net.eval()
        loss_sum, n_sum, tokens = 0.0, 0, 0
        with torch.no_grad():
            for inp in [self._inputs(mb) for mb in batch.micro]:
                loss_sum += float(self._loss_sum(inp))
                n_sum += inp["n"]
                tokens += inp["tokens"]
        self.net.train()
        loss_sum, n_sum, tokens = _sum_over_ranks(self.world, self.device, loss_sum, n_sum, tokens)
        if n_sum == 0:
            raise TrainError("an evaluation batch with no target tokens")
        return self._stats(loss_sum / n_sum, int(n_sum), int(tokens), None, _lr_at(self.step, self.setup), started)

    # -- reinforcement learning -----------------------------------------------------------

    def score(self, job: ScoreJob) -> Scores:
        """Log-probabilities of every target token, per micro-batch and row (the order of
        `RlMicroBatch`'s lists), under the current weights or, with `reference`, the
        starting policy; no update. In eval mode: no dropout."""
        return drive(self.score_steps(job))

    def score_steps(self, job: ScoreJob) -> Generator[None, None, Scores]:
        """`score`, pausing after each micro-batch (the colocated worker generates in the
        pauses); the model is in train mode, adapters on, at every pause."""
        import torch

        if not job.temperature > 0:
            raise Refused(f"score: temperature is {job.temperature}; it must be positive")
        started = time.perf_counter()
        flat: List[Any] = []
        for inp in map(self._inputs, job.batch.micro):
            net, context = self._reference() if job.reference else (self.net, contextlib.nullcontext())
            self.net.eval()
            try:
                with torch.no_grad(), context:
                    flat.append(self._logprobs(inp, net, job.temperature))
            finally:
                self.net.train()
            yield
        return Scores(logprobs=self._per_row(job.batch.micro, flat),
                      elapsed_ms=(time.perf_counter() - started) * 1000.0)

    def _logprobs(self, inp: Dict[str, Any], net: Any, temperature: float) -> Any:
        """Log-probs of the target tokens under softmax(logits / temperature): the
        distribution the rollout sampled from."""
        tgt = inp["tgt"]
        return self._at_targets(inp, lambda h, w, dtype: token_logprobs(h, w, tgt, dtype, temperature=temperature)[0],
                                lambda logits: logits_logprobs(logits, tgt, temperature)[0], net)

    def _per_row(self, micro: List[MicroBatch], flat: List[Any]) -> List[List[List[float]]]:
        """Each micro-batch's values at its target tokens (this rank's rows, in order) cut
        into rows; with several ranks, every row gathered in its place."""
        import torch

        values = torch.cat(flat).tolist() if flat else []  # one read from the device
        out: List[List[List[float]]] = []
        at = 0
        for mb in micro:
            counts = _targets_per_row(mb)
            rows = []
            for r in _rank_rows(len(counts), self.rank, self.world):
                rows.append(values[at:at + counts[r]])
                at += counts[r]
            out.append(rows)
        if at != len(values):
            raise TrainError(f"{len(values)} target tokens scored where the loss masks name {at}")
        if self.world == 1:
            return out
        import torch.distributed as dist

        parts: List[Any] = [None] * self.world
        dist.all_gather_object(parts, out)
        return [[parts[r % self.world][k][r // self.world] for r in range(len(mb.input_ids))]
                for k, mb in enumerate(micro)]

    def _reference(self) -> Tuple[Any, Any]:
        """(the model, a context to run it in) of the starting policy: LoRA, the adapters
        switched off; full fine-tuning, a frozen copy of the setup's weights."""
        if self.setup.lora is None:
            return self._frozen_reference(), contextlib.nullcontext()
        if not hasattr(self.net, "disable_adapter"):
            raise Refused("the LoRA adapters were merged into the weights (a save with merge_lora); "
                          "the starting policy is no longer at hand")
        return self.net, self.net.disable_adapter()

    def _frozen_reference(self) -> Any:
        """Full fine-tuning's starting policy: the setup's model loaded again on first use
        (weights from a config alone come back the same: same seed), frozen, parameters in
        the dtype of the trainer's own (bf16 under mixed, as its forward uses). It costs one
        more copy of the weights on the device (2 bytes a parameter under mixed or bf16, 4 under fp32) for the trainer's
        life, no gradients or optimizer state; a run that never asks pays nothing. Loaded
        rather than copied from the trainer, so it is the starting policy even when first
        asked for after updates, or after a resume (then: the setup's model, as LoRA's
        reference is the base without the resumed adapter)."""
        import torch

        if self.reference is not None:
            return self.reference
        if self.world > 1:
            raise Refused("scoring under the reference policy with full fine-tuning on several GPUs is not "
                          "supported yet; score the reference on one device, or train with kl_coef 0")
        devices = [torch.cuda.current_device()] if self.device.startswith("cuda") else []
        with torch.random.fork_rng(devices=devices):  # the training run's random state is left as it was
            net = load_for_training(self.setup.model, self.dtype, self.setup.seed, self.attention, self.device)
        net.config.use_cache = False
        with torch.no_grad():
            for p in net.parameters():  # buffers (rotary frequencies) stay as loaded, as in the trainer
                p.requires_grad_(False)
                p.data = p.data.to(self.params[0].dtype if self.params else self.dtype)
        self.reference = net.to(self.device).eval()
        return self.reference

    def rl_step(self, batch: RlBatch) -> RlStats:
        """One optimizer step of PPO-clip over the micro-batches (gradients accumulated), on
        the same schedule, clipping and precision as `train_step` (`rl.ppo_loss` says what
        the loss is). Every per-token list is checked against its row first: a step that
        does not fit is refused before anything is computed. The statistics' means are
        over the target tokens counted here (`loss_tokens`); `loss` is per target token,
        whatever `RlLoss.loss_tokens` the gradient was divided by."""
        return drive(self.rl_step_steps(batch))

    def rl_step_steps(self, batch: RlBatch) -> Generator[None, None, RlStats]:
        """`rl_step`, pausing after each micro-batch's backward (the colocated worker
        generates from its generation copy in the pauses; the gradients accumulated so
        far wait untouched)."""
        import torch

        started = time.perf_counter()
        _check_rl(batch)
        lr = self._begin_step()
        sums: List[Any] = []
        maxes: List[Any] = []
        tokens = 0
        last = len(batch.micro) - 1
        for k, mb in enumerate(batch.micro):
            inp = self._inputs(mb.rows)
            if self.world > 1:
                self.net.set_requires_gradient_sync(k == last)  # as in train_step
            loss, terms = self._ppo(inp, mb, batch)
            # FSDP averages gradients over ranks, so each rank's share is scaled back up.
            (loss * self.world).backward()
            self._fold_grads()
            sums.append(torch.stack([terms.sums[key] for key in STAT_SUMS]))
            maxes.append(terms.ratio_max)
            tokens += inp["tokens"]
            yield
        # Read once, at the end: no device sync per micro-batch.
        summed = _sum_over_ranks(self.world, self.device, *torch.stack(sums).sum(0).tolist(), tokens)
        got = dict(zip((*STAT_SUMS, "positions"), summed, strict=True))
        ratio_max = _max_over_ranks(self.world, self.device, float(torch.stack(maxes).max()))
        norm = self._apply_step()
        n = max(1.0, got["tokens"])
        return RlStats(
            step=self.step, loss=got["loss"] / n, policy_loss=got["policy"] / n,
            kl=got["kl"] / got["kl_tokens"] if got["kl_tokens"] > 0 else None,
            entropy=got["entropy"] / n, clip_fraction=got["clipped"] / n, ratio_mean=got["ratio"] / n,
            ratio_max=ratio_max, tis_capped=got["capped"] / n, grad_norm=norm, lr=lr,
            loss_tokens=int(got["tokens"]), tokens=int(got["positions"]),
            elapsed_ms=(time.perf_counter() - started) * 1000.0, memory_bytes=self._peak_memory())

    def _ppo(self, inp: Dict[str, Any], mb: RlMicroBatch, batch: RlBatch) -> Tuple[Any, PpoTerms]:
        """One micro-batch's share of the PPO loss (what backward takes) and its sums."""
        import torch

        take = _rank_rows(len(mb.rows.input_ids), self.rank, self.world)

        def put(lists: Optional[List[List[float]]]) -> Any:
            if lists is None:
                return None
            return _to_device([v for r in take for v in lists[r]], self.device, torch.float32)

        adv, behaviour, proximal, reference = map(put, (mb.advantages, mb.behaviour, mb.proximal, mb.reference))
        found: List[PpoTerms] = []

        def terms(logp: Any, entropy: Any) -> Any:
            found.append(ppo_loss(logp, proximal, behaviour, adv, batch.loss, entropy, reference))
            return found[-1].loss

        tgt = inp["tgt"]
        t = batch.loss.temperature
        loss = self._at_targets(inp, lambda h, w, dtype: terms(*token_logprobs(h, w, tgt, dtype, temperature=t)),
                                lambda logits: terms(*logits_logprobs(logits, tgt, t)))
        return loss, found[-1]

    # -- checkpoints ---------------------------------------------------------------------

    def save(self, job: SaveJob) -> None:
        out = Path(job.dir)
        out.mkdir(parents=True, exist_ok=True)
        if self.world > 1:
            self._save_sharded(out, job)
            return
        if job.trainer_state:
            # Parameter names, not positions, key the optimizer state, so a checkpoint
            # resumes on any number of GPUs.
            from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

            optim = (self._named_optim_state() if self.masters is not None
                     else get_optimizer_state_dict(self.net, self.opt))
            self._write_state(out, optim)
        if self.masters is not None:
            # The fp32 masters are the weights; the model's bf16 copy is only for compute.
            self.net.save_pretrained(str(out), state_dict=self._master_state_dict(), safe_serialization=True)
        elif self.setup.lora is not None:
            self.net.save_pretrained(str(out / ADAPTER_DIR))
            _name_base(out / ADAPTER_DIR, self.setup.model)
            if job.merge_lora:
                # The run's last save: merge in place (a copy would double the memory).
                self.net = self.net.merge_and_unload()
                self.net.save_pretrained(str(out), safe_serialization=True)
        else:
            self.net.save_pretrained(str(out), safe_serialization=True)
        _tidy_config(out, "float32" if self.masters is not None else None)
        self._probe(out)

    def _master_names(self) -> List[str]:
        """The parameter name of each master, in the optimizer's order."""
        name_of = {id(p): n for n, p in self.net.named_parameters()}
        by_master = {id(m): name_of[id(p)] for p, m in zip(self.params, self.masters or [], strict=False)}
        return [by_master[id(m)] for g in self.opt.param_groups for m in g["params"]]

    def _master_state_dict(self) -> Dict[str, Any]:
        """The model's state dict with each trained weight replaced by its fp32 master
        (tied weights keep sharing one tensor)."""
        master_of = {id(p): m for p, m in zip(self.params, self.masters or [], strict=False)}
        return {n: master_of.get(id(t), t).detach() for n, t in self.net.state_dict(keep_vars=True).items()}

    def _named_optim_state(self) -> Dict[str, Any]:
        """The optimizer state keyed by parameter name, the layout torch.distributed's
        `get_optimizer_state_dict` writes, so either path resumes the other's checkpoint."""
        names = self._master_names()
        sd = self.opt.state_dict()
        return {"state": {names[i]: v for i, v in sd["state"].items()},
                "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in sd["param_groups"]]}

    def _load_named_optim_state(self, named: Dict[str, Any]) -> None:
        index = {n: i for i, n in enumerate(self._master_names())}
        missing = [n for g in named["param_groups"] for n in g["params"] if n not in index]
        if missing:
            raise TrainError(f"the checkpoint's optimizer state names parameters this model lacks: {missing[:3]}")
        self.opt.load_state_dict({
            "state": {index[n]: v for n, v in named["state"].items()},
            "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in named["param_groups"]]})

    def _write_state(self, out: Path, optim: Any) -> None:
        import torch

        state = {"step": self.step, "optimizer": optim, "torch_rng": torch.get_rng_state(),
                 "python_rng": random.getstate(),
                 "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}
        tmp = out / (STATE_FILE + ".partial")
        torch.save(state, tmp)
        os.replace(tmp, out / STATE_FILE)

    def _save_sharded(self, out: Path, job: SaveJob) -> None:
        """Several ranks: the full weights and optimizer state are gathered to rank 0 (on
        the CPU), which writes the same files a single device writes."""
        import torch.distributed as dist
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        full = StateDictOptions(full_state_dict=True, cpu_offload=True)
        weights = get_model_state_dict(self.net, options=full)
        optim = get_optimizer_state_dict(self.net, self.opt, options=full) if job.trainer_state else None
        if self.rank == 0:
            self.net.save_pretrained(str(out), state_dict=weights, safe_serialization=True)
            _tidy_config(out)
        self._probe(out)
        if self.rank == 0 and optim is not None:
            self._write_state(out, optim)
        dist.barrier()

    def _probe(self, out: Path) -> None:
        """The last position's logits for a fixed input, from the model as saved, with the
        dtype they were computed in: whoever loads the checkpoint in that dtype can check
        that it reproduces them."""
        import torch

        vocab = self.info().vocab_size
        gen = torch.Generator().manual_seed(1234)
        ids = torch.randint(0, vocab, (1, 16), generator=gen).to(self.device)
        was_training = self.net.training
        self.net.eval()
        with torch.no_grad():
            extra = self._varlen_kwargs([list(range(ids.shape[1]))])
            with self._autocast():
                logits = self.net(input_ids=ids, **extra).logits[:, -1].float().cpu()
        if was_training:
            self.net.train()
        if self.rank == 0:
            # The dtype the forward pass computed in: a `mixed` checkpoint stores fp32
            # masters, and loading them in bf16 gives back the weights that made these.
            dtype = str(self.compute_dtype).replace("torch.", "")
            torch.save({"input_ids": ids.cpu(), "logits": logits, "dtype": dtype}, out / PROBE_FILE)

    def _load_state(self, ckpt: Path) -> None:
        import torch
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        state = torch.load(ckpt / STATE_FILE, map_location="cpu", weights_only=False)
        if self.masters is not None:
            self._load_named_optim_state(state["optimizer"])
        else:
            options = StateDictOptions(full_state_dict=self.world > 1)
            set_optimizer_state_dict(self.net, self.opt, optim_state_dict=state["optimizer"], options=options)
        self.step = int(state["step"])
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])
        if state.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])


def describe_oom(exc: BaseException, micro: Sequence[MicroBatch]) -> str:
    rows = sum(len(mb.input_ids) for mb in micro)
    longest = max((len(r) for mb in micro for r in mb.input_ids), default=0)
    return (f"out of memory on a batch of {rows} rows of up to {longest} tokens "
            f"({type(exc).__name__}); lower micro_batch or seq_len, or turn on gradient_checkpointing")
