"""Joined projections for a generation model: q, k and v as one matmul, gate and up as one.

A decode step of a small model is bound by kernel launches, not by bandwidth: SmolLM2's
30 layers make 210 projection matmuls a step, each a few microseconds however small. The
three projections of the attention read the same input, as do the MLP's gate and up, so
one matmul against their weights stacked does the work of three (or two): 120 matmuls a
step instead of 210.

The stacked weight is a non-persistent buffer of the module, and each projection's own
`weight` (and `bias`) becomes a view of its rows. So the model keeps its parameter names
and shapes, and writing new weights into the parameters in place (the generation copy's
refresh) writes the stacked weight too: captured graphs and compiled steps, which read
the buffer, see the new weights without being rebuilt.

Join last: `.to()`, `.half()` or a deep copy after joining give the projections parameters
of their own, no longer views of the stacked weight (the engine joins the model it is
given, after loading; the benchmark copies before).

Only plain `nn.Linear` projections of frozen modules are joined (a trained model's
parameters must stay the optimizer's, and a LoRA layer is not a plain linear), and only in
attention and MLP classes whose forward is known (Llama, Mistral, Qwen2 and Qwen3, whose
attention normalises each head of q and k before the rotary embedding): anything else
keeps transformers' own forward.
"""

from __future__ import annotations

import sys
from types import MethodType
from typing import Any, List, Optional, Tuple

# The classes whose forwards `_attention_forward` and `_mlp_forward` reproduce; the value
# says where the attention's sliding window comes from ("" none, "config" the config's,
# "module" the module's own `sliding_window`, set per layer) and whether q and k are
# normalised per head (`q_norm`, `k_norm`) before the rotary embedding.
ATTENTION = {
    "LlamaAttention": ("", False),
    "MistralAttention": ("config", False),
    "Qwen2Attention": ("module", False),
    "Qwen3Attention": ("module", True),
}
MLP = {"LlamaMLP", "MistralMLP", "Qwen2MLP", "Qwen3MLP"}
Q_K_V = ("q_proj", "k_proj", "v_proj")
GATE_UP = ("gate_proj", "up_proj")


def _joinable(module: Any, names: Tuple[str, ...]) -> bool:
    import torch.nn as nn

    found = [getattr(module, n, None) for n in names]
    parts: List[Any] = [p for p in found if type(p) is nn.Linear]
    if len(parts) != len(names):
        return False
    first = parts[0].weight
    return all(
        p.in_features == parts[0].in_features
        and p.weight.dtype == first.dtype
        and p.weight.device == first.device
        and (p.bias is None) == (parts[0].bias is None)
        and not p.weight.requires_grad
        and (p.bias is None or not p.bias.requires_grad)
        for p in parts
    )


def _stack(module: Any, names: Tuple[str, ...]) -> None:
    """Stack the projections' weights into `joined_weight` (and `joined_bias`) and make each
    projection's parameters views of them; `joined_sizes` holds the output sizes, in order."""
    import torch
    import torch.nn as nn

    parts = [getattr(module, n) for n in names]
    sizes = [p.out_features for p in parts]
    with torch.no_grad():
        weight = torch.cat([p.weight for p in parts], dim=0)
        bias = torch.cat([p.bias for p in parts], dim=0) if parts[0].bias is not None else None
    module.register_buffer("joined_weight", weight, persistent=False)
    module.register_buffer("joined_bias", bias, persistent=False)
    start = 0
    for p, n in zip(parts, sizes, strict=True):
        p.weight = nn.Parameter(weight[start:start + n], requires_grad=False)
        if bias is not None:
            p.bias = nn.Parameter(bias[start:start + n], requires_grad=False)
        start += n
    module.joined_sizes = tuple(sizes)


def _attention_forward(self: Any, hidden_states: Any, position_embeddings: Any = None,
                       attention_mask: Any = None, past_key_values: Any = None, **kwargs: Any) -> Tuple[Any, Any]:
    """transformers' Llama-family attention forward with the three projections as one matmul."""
    import torch.nn.functional as F

    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)
    qkv = F.linear(hidden_states, self.joined_weight, self.joined_bias)
    q, k, v = qkv.split(self.joined_sizes, dim=-1)
    window, qk_norm = self.joined_window
    q, k = q.reshape(hidden_shape), k.reshape(hidden_shape)
    if qk_norm:
        q, k = self.q_norm(q), self.k_norm(k)
    query = q.transpose(1, 2)
    key = k.transpose(1, 2)
    value = v.reshape(hidden_shape).transpose(1, 2)
    cos, sin = position_embeddings
    rotary, registry, eager = self.joined_code
    query, key = rotary(query, key, cos, sin)
    if past_key_values is not None:
        key, value = past_key_values.update(key, value, self.layer_idx)
    attend = registry.get_interface(self.config._attn_implementation, eager)
    if window == "config":
        kwargs.setdefault("sliding_window", getattr(self.config, "sliding_window", None))
    elif window == "module":
        kwargs.setdefault("sliding_window", self.sliding_window)
    out, weights = attend(self, query, key, value, attention_mask,
                          dropout=0.0 if not self.training else self.attention_dropout,
                          scaling=self.scaling, **kwargs)
    out = out.reshape(*input_shape, -1).contiguous()
    return self.o_proj(out), weights


def _mlp_forward(self: Any, x: Any) -> Any:
    """transformers' gated MLP forward with gate and up as one matmul."""
    import torch.nn.functional as F

    gate, up = F.linear(x, self.joined_weight, self.joined_bias).split(self.joined_sizes, dim=-1)
    return self.down_proj(self.act_fn(gate) * up)


def _attention_code(module: Any) -> Optional[Tuple[Any, Any, Any]]:
    """The model's own rotary embedding, attention registry and eager attention, whichever
    transformers version it is (None when its module lacks one). Functions, not the module
    object, so that a joined model can still be copied."""
    code = sys.modules.get(type(module).__module__)
    names = ("apply_rotary_pos_emb", "ALL_ATTENTION_FUNCTIONS", "eager_attention_forward")
    if not hasattr(module, "head_dim") or not all(hasattr(code, n) for n in names):
        return None
    rotary, registry, eager = (getattr(code, n) for n in names)
    return rotary, registry, eager


def _has_parts(module: Any, window: str, qk_norm: bool) -> bool:
    """Whether an attention module has what its kind's forward reads besides the projections."""
    return (window != "module" or hasattr(module, "sliding_window")) and (
        not qk_norm or (hasattr(module, "q_norm") and hasattr(module, "k_norm")))


def join_projections(net: Any) -> int:
    """Join the projections of every known attention and MLP module of a frozen `net`; the
    number of its modules so joined, now or before (0 for a model of no known family)."""
    joined = 0
    for module in net.modules():
        kind = type(module).__name__
        if getattr(module, "joined_sizes", None) is not None:  # joined before
            joined += 1
            continue
        code = _attention_code(module) if kind in ATTENTION else None
        if code is not None and _has_parts(module, *ATTENTION[kind]) and _joinable(module, Q_K_V):
            _stack(module, Q_K_V)
            module.joined_code = code
            module.joined_window = ATTENTION[kind]
            module.forward = MethodType(_attention_forward, module)
            joined += 1
        elif kind in MLP and _joinable(module, GATE_UP) and hasattr(module, "act_fn"):
            _stack(module, GATE_UP)
            module.forward = MethodType(_mlp_forward, module)
            joined += 1
    return joined
