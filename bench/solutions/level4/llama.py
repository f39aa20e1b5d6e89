"""Llama-style model (level4/llama) with its heavy parts in Triton: every projection as a
tiled GEMM, the gated MLP fused into one GEMM with a SiLU-times epilogue, RMSNorm, and flash
attention with grouped-query heads. The rest (embeddings, rotary positions, residual adds) is
the transformers model itself."""

import torch
import torch.nn as nn
import triton
import triton.language as tl
from transformers import AttentionInterface, LlamaConfig, LlamaForCausalLM

# -- Triton kernels -----------------------------------------------------------------

# Every fp32 product as three TF32 tensor-core products: fp32-level accuracy (the reference
# is fp32 throughout) at tensor-core speed; plain TF32 drifts over a deep model.
DOT = tl.constexpr("tf32x3")


@triton.jit
def linear_kernel(a_ptr, w_ptr, bias_ptr, res_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_wn, stride_wk, stride_cm, stride_cn,
                  HAS_BIAS: tl.constexpr, HAS_RES: tl.constexpr, ACT: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C = act(A @ W^T + bias) + residual; ACT 0: none, 1: tanh-GELU, 2: erf-GELU, 3: ReLU."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * stride_am + kk[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * stride_wn + kk[:, None] * stride_wk,
                    mask=(rn[None, :] < N) & (kk[:, None] < K), other=0.0)
        acc += tl.dot(a, w, input_precision=DOT)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0)[None, :]
    if ACT == 1:
        inner = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        acc = 0.5 * acc * (1.0 + (2.0 / (1.0 + tl.exp(-2.0 * inner)) - 1.0))
    elif ACT == 2:
        acc = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))
    elif ACT == 3:
        acc = tl.maximum(acc, 0.0)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None] * stride_cm + rn[None, :] * stride_cn
    if HAS_RES:
        acc += tl.load(res_ptr + offs, mask=mask, other=0.0)
    tl.store(c_ptr + offs, acc, mask=mask)


@triton.jit
def swiglu_kernel(a_ptr, wg_ptr, wu_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_wn, stride_wk, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """C = silu(A @ Wg^T) * (A @ Wu^T): both projections of a gated MLP in one pass over A."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * stride_am + kk[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        wmask = (rn[None, :] < N) & (kk[:, None] < K)
        woffs = rn[None, :] * stride_wn + kk[:, None] * stride_wk
        gate += tl.dot(a, tl.load(wg_ptr + woffs, mask=wmask, other=0.0), input_precision=DOT)
        up += tl.dot(a, tl.load(wu_ptr + woffs, mask=wmask, other=0.0), input_precision=DOT)
    out = gate / (1.0 + tl.exp(-gate)) * up
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, out, mask=mask)


@triton.jit
def rms_norm_kernel(x_ptr, w_ptr, y_ptr, N, eps, BLOCK_N: tl.constexpr):
    """One row per program: y = x / sqrt(mean(x^2) + eps) * w."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0)
    inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * N + cols, x * inv * w, mask=mask)


@triton.jit
def layer_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, eps, BLOCK_N: tl.constexpr):
    """One row per program: y = (x - mean) / sqrt(var + eps) * w + b."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / N
    d = tl.where(mask, x - mean, 0.0)
    inv = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * N + cols, d * inv * w + b, mask=mask)


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, H, GROUP, SQ, SK, D, scale,
                     sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sob, sos, soh,
                     CAUSAL: tl.constexpr, WINDOW: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_D: tl.constexpr):
    """Flash attention over one (batch, head, query block): online softmax over key blocks.
    Query head h reads key-value head h // GROUP; CAUSAL keeps keys j <= i, and WINDOW > 0
    further keeps only j > i - WINDOW. Output laid out (batch, seq, head, dim)."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    kvh = h // GROUP
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rd = tl.arange(0, BLOCK_D)
    q = tl.load(q_ptr + b * sqb + h * sqh + rm[:, None] * sqs + rd[None, :],
                mask=(rm[:, None] < SQ) & (rd[None, :] < D), other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    lo = 0
    hi = SK
    if CAUSAL:
        hi = tl.minimum(SK, (pid_m + 1) * BLOCK_M)
        if WINDOW > 0:
            lo = tl.maximum(0, pid_m * BLOCK_M - WINDOW + 1) // BLOCK_N * BLOCK_N
    for n0 in range(lo, hi, BLOCK_N):
        rn = n0 + tl.arange(0, BLOCK_N)
        kmask = (rn[None, :] < SK) & (rd[:, None] < D)
        k = tl.load(k_ptr + b * skb + kvh * skh + rn[None, :] * sks + rd[:, None], mask=kmask, other=0.0)
        s = tl.dot(q, k, input_precision=DOT) * scale
        keep = (rn[None, :] < SK) & (rm[:, None] >= 0)
        if CAUSAL:
            keep = keep & (rn[None, :] <= rm[:, None])
            if WINDOW > 0:
                keep = keep & (rn[None, :] > rm[:, None] - WINDOW)
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        # Rows with nothing kept yet stay at -inf: shift by 0 there to avoid inf - inf.
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + b * svb + kvh * svh + rn[:, None] * svs + rd[None, :],
                    mask=(rn[:, None] < SK) & (rd[None, :] < D), other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=DOT)
        m_i = m_new
    # Rows past the sequence (never stored) may have kept no key at all.
    out = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
    tl.store(o_ptr + b * sob + rm[:, None] * sos + h * soh + rd[None, :], out,
             mask=(rm[:, None] < SQ) & (rd[None, :] < D))


# -- launchers ----------------------------------------------------------------------


def _blocks(m: int, n: int, most: int = 128):
    """Tile sizes, and warps enough that a 128x128 fp32 accumulator does not spill."""
    bm = min(most, max(16, triton.next_power_of_2(m)))
    bn = min(most, max(16, triton.next_power_of_2(n)))
    return bm, bn, 32, 8 if bm * bn >= 128 * 128 else 4


def triton_linear(x, weight, bias=None, act=0, residual=None):
    """x @ weight.T (+ bias), an activation, (+ residual), for any leading shape of x."""
    shape = x.shape
    a = x.reshape(-1, shape[-1])
    if not a.is_contiguous():
        a = a.contiguous()
    m, k = a.shape
    n = weight.shape[0]
    c = torch.empty((m, n), device=x.device, dtype=torch.float32)
    res = residual.reshape(m, n).contiguous() if residual is not None else c
    bm, bn, bk, warps = _blocks(m, n)
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn))
    linear_kernel[grid](a, weight, bias if bias is not None else c, res, c, m, n, k,
                        a.stride(0), a.stride(1), weight.stride(0), weight.stride(1), c.stride(0), c.stride(1),
                        HAS_BIAS=bias is not None, HAS_RES=residual is not None, ACT=act,
                        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps)
    return c.reshape(*shape[:-1], n)


def triton_swiglu(x, w_gate, w_up):
    shape = x.shape
    a = x.reshape(-1, shape[-1]).contiguous()
    m, k = a.shape
    n = w_gate.shape[0]
    c = torch.empty((m, n), device=x.device, dtype=torch.float32)
    # Two accumulators: half the tile of a plain GEMM.
    bm, bn, bk, warps = _blocks(m, n, most=64)
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn))
    swiglu_kernel[grid](a, w_gate, w_up, c, m, n, k, a.stride(0), a.stride(1),
                        w_gate.stride(0), w_gate.stride(1), c.stride(0), c.stride(1),
                        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps)
    return c.reshape(*shape[:-1], n)


def triton_rms_norm(x, weight, eps):
    rows = x.contiguous().reshape(-1, x.shape[-1])
    y = torch.empty_like(rows)
    n = rows.shape[1]
    rms_norm_kernel[(rows.shape[0],)](rows, weight, y, n, eps, BLOCK_N=triton.next_power_of_2(n))
    return y.reshape(x.shape)


def triton_layer_norm(x, weight, bias, eps):
    rows = x.contiguous().reshape(-1, x.shape[-1])
    y = torch.empty_like(rows)
    n = rows.shape[1]
    layer_norm_kernel[(rows.shape[0],)](rows, weight, bias, y, n, eps, BLOCK_N=triton.next_power_of_2(n))
    return y.reshape(x.shape)


def triton_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, is_causal=None,
                     sliding_window=None, **kwargs):
    """The attention function transformers calls (registered below): query (B, H, S, D),
    key and value (B, KV, S, D) in; (B, S, H, D) out. The problems feed no padding, so
    the mask is causality and the sliding window, computed in the kernel."""
    # The kernel reads each head's vector with unit stride.
    query, key, value = (t if t.stride(-1) == 1 else t.contiguous() for t in (query, key, value))
    b, h, sq, d = query.shape
    kv, sk = key.shape[1], key.shape[2]
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", False)) and sq > 1
    window = int(sliding_window) if sliding_window else 0
    scale = float(scaling) if scaling is not None else d ** -0.5
    out = torch.empty((b, sq, h, d), device=query.device, dtype=torch.float32)
    # fp32 tiles: at a head size of 128, 64-key blocks in three pipeline stages need 256 KB
    # of shared memory (an H100 has 227 KB), so wide heads take 32-key blocks in two.
    block_m, block_n = 64, (32 if d > 64 else 64)
    grid = (triton.cdiv(sq, block_m), b * h)
    attention_kernel[grid](query, key, value, out, h, h // kv, sq, sk, d, scale,
                           query.stride(0), query.stride(1), query.stride(2),
                           key.stride(0), key.stride(1), key.stride(2),
                           value.stride(0), value.stride(1), value.stride(2),
                           out.stride(0), out.stride(1), out.stride(2),
                           CAUSAL=causal, WINDOW=window, BLOCK_M=block_m, BLOCK_N=block_n,
                           BLOCK_D=max(16, triton.next_power_of_2(d)), num_warps=8 if d > 64 else 4,
                           num_stages=2 if d > 64 else 3)
    return out, None


AttentionInterface.register("tritonforge_triton", triton_attention)


class TritonLinear(nn.Module):
    """An `nn.Linear` computed by `linear_kernel`, sharing the original's parameters."""

    def __init__(self, linear: nn.Linear, act: int = 0):
        super().__init__()
        self.weight = linear.weight
        self.bias = linear.bias
        self.act = act

    def forward(self, x):
        return triton_linear(x, self.weight, self.bias, self.act)


# -- the model ----------------------------------------------------------------------


def llama_config(vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, ffn: int) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        use_cache=False,
        attn_implementation="sdpa",
    )


class TritonRMSNorm(nn.Module):
    def __init__(self, norm: nn.Module):
        super().__init__()
        self.weight = norm.weight
        self.eps = float(norm.variance_epsilon)

    def forward(self, x):
        return triton_rms_norm(x, self.weight, self.eps)


class TritonSwiGLU(nn.Module):
    """The gated MLP: gate and up projections and SiLU-times in one kernel, then the down projection."""

    def __init__(self, mlp: nn.Module):
        super().__init__()
        self.gate = mlp.gate_proj.weight
        self.up = mlp.up_proj.weight
        self.down = mlp.down_proj.weight

    def forward(self, x):
        return triton_linear(triton_swiglu(x, self.gate, self.up), self.down)


class ModelNew(nn.Module):
    """The same Llama-style model (same config, same seeded weights) with its norms, every
    projection, the gated MLP, attention and the output head in Triton; embeddings, rotary
    positions and residual adds stay in PyTorch."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, ffn: int):
        super().__init__()
        self.lm = LlamaForCausalLM(llama_config(vocab, hidden, layers, heads, kv_heads, ffn)).eval()
        self.lm.set_attn_implementation("tritonforge_triton")
        body = self.lm.model
        for layer in body.layers:
            attn = layer.self_attn
            attn.q_proj = TritonLinear(attn.q_proj)
            attn.k_proj = TritonLinear(attn.k_proj)
            attn.v_proj = TritonLinear(attn.v_proj)
            attn.o_proj = TritonLinear(attn.o_proj)
            layer.mlp = TritonSwiGLU(layer.mlp)
            layer.input_layernorm = TritonRMSNorm(layer.input_layernorm)
            layer.post_attention_layernorm = TritonRMSNorm(layer.post_attention_layernorm)
        # The decoder body runs with its final norm; the logits are computed here.
        self.final_norm = TritonRMSNorm(body.norm)
        body.norm = nn.Identity()
        self.head = self.lm.lm_head.weight

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        hidden = self.lm.model(input_ids=input_ids, use_cache=False).last_hidden_state
        return triton_linear(triton_rms_norm(hidden, self.final_norm.weight, self.final_norm.eps), self.head)
