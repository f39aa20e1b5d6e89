"""Reinforcement learning's tensor math: per-token log-probabilities and entropies taken
from the output projection chunk by chunk, and the PPO-clip loss over them.

The trainer (`trainer.Trainer.score`, `Trainer.rl_step`) feeds these the hidden states at
the target positions; everything here is per target token, in the order the trainer
selects them (row by row, position by position).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from .protocol import RlLoss


def token_logprobs(hidden: Any, weight: Any, targets: Any, dtype: Any, chunk: int = 4096,
                   temperature: float = 1.0) -> Tuple[Any, Any]:
    """(log p(target), entropy) per row of `hidden`, under softmax(hidden @ weight.T /
    temperature), both fp32 and differentiable with respect to `hidden` and `weight`.

    The logits are computed in `dtype`, one chunk of rows at a time, and dropped; the
    backward pass computes each chunk's logits again. With a 151,936-token vocabulary the
    whole [rows, vocabulary] logits would be gigabytes per micro-batch; here only one chunk
    and the per-row log-normaliser are kept. The temperature divides the fp32 logits, as
    the generation engine does: divided in bf16 before the head, the two sides' rounding
    would differ by up to 0.2 nats a token."""
    import torch

    inv_t = 1.0 / temperature

    def chunk_stats(h: Any, w: Any, tgt: Any) -> Tuple[Any, Any, Any]:
        z = (h.to(dtype) @ w.to(dtype).t()).float()
        if inv_t != 1.0:
            z = z * inv_t
        lse = torch.logsumexp(z, dim=-1)
        p = torch.exp(z - lse[:, None])
        return z.gather(1, tgt[:, None]).squeeze(1) - lse, lse - (p * z).sum(-1), lse

    class TokenLogprobs(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, h_in: Any, w_in: Any) -> Tuple[Any, Any]:
            rows = h_in.shape[0]
            logp = torch.empty(rows, dtype=torch.float32, device=h_in.device)
            ent = torch.empty_like(logp)
            lse = torch.empty_like(logp)
            for s in range(0, rows, chunk):
                logp[s:s + chunk], ent[s:s + chunk], lse[s:s + chunk] = chunk_stats(
                    h_in[s:s + chunk], w_in, targets[s:s + chunk])
            ctx.save_for_backward(h_in, w_in, lse, ent)
            ctx.set_materialize_grads(False)
            return logp, ent

        @staticmethod
        def backward(ctx: Any, g_logp: Any, g_ent: Any) -> Tuple[Any, Any]:
            h_in, w_in, lse, ent = ctx.saved_tensors
            need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
            if (g_logp is None and g_ent is None) or not (need_h or need_w):
                return None, None
            w = w_in.to(dtype)
            gh = torch.empty(h_in.shape, dtype=h_in.dtype, device=h_in.device) if need_h else None
            gw = torch.zeros(w_in.shape, dtype=torch.float32, device=w_in.device) if need_w else None
            for s in range(0, h_in.shape[0], chunk):
                h = h_in[s:s + chunk].to(dtype)
                logq = (h @ w.t()).float() * inv_t - lse[s:s + chunk, None]  # log p of every token
                p = torch.exp(logq)
                # d log p(t) / dz = onehot(t) - p;  d H / dz = -p * (log p + H).
                gz = torch.zeros_like(p)
                if g_logp is not None:
                    g = g_logp[s:s + chunk, None].float()
                    gz -= g * p
                    gz.scatter_add_(1, targets[s:s + chunk, None], g)
                if g_ent is not None:
                    gz -= g_ent[s:s + chunk, None].float() * p * (logq + ent[s:s + chunk, None])
                if inv_t != 1.0:  # d/d(raw logits) = d/d(tempered logits) / temperature
                    gz *= inv_t
                gz = gz.to(dtype)
                if gh is not None:
                    gh[s:s + chunk] = (gz @ w).to(h_in.dtype)
                if gw is not None:
                    gw += (gz.t() @ h).float()
            return gh, None if gw is None else gw.to(w_in.dtype)

    if not torch.is_grad_enabled() or not (hidden.requires_grad or weight.requires_grad):
        with torch.no_grad():
            parts = [chunk_stats(hidden[s:s + chunk], weight, targets[s:s + chunk])
                     for s in range(0, hidden.shape[0], chunk)]
            if not parts:
                empty = torch.zeros(0, dtype=torch.float32, device=hidden.device)
                return empty, empty
            return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
    both: Tuple[Any, Any] = TokenLogprobs.apply(hidden, weight)
    return both


def logits_logprobs(logits: Any, targets: Any, temperature: float = 1.0) -> Tuple[Any, Any]:
    """(log p(target), entropy) per row of logits already computed in full (a model whose
    output projection the trainer cannot apply itself), under softmax(logits /
    temperature), divided in fp32."""
    import torch

    logq = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logq.gather(1, targets[:, None]).squeeze(1), -(torch.exp(logq) * logq).sum(-1)


# The sums `ppo_loss` reports, added over micro-batches (and ranks) by the trainer;
# `ratio_max` is the one taken as a maximum.
STAT_SUMS = ("tokens", "loss", "policy", "kl", "kl_tokens", "entropy", "clipped", "ratio", "capped")


@dataclass
class PpoTerms:
    """One micro-batch's part of the PPO loss: `loss` is what backward takes (its tokens'
    summed loss divided by `RlLoss.loss_tokens`, so micro-batches add up to the step's
    loss); `sums` are detached sums over its tokens (`STAT_SUMS`) and `ratio_max`."""

    loss: Any
    sums: Dict[str, Any]
    ratio_max: Any


def ppo_loss(logp: Any, proximal: Optional[Any], behaviour: Any, advantages: Any, loss: RlLoss, entropy: Any,
             reference: Optional[Any] = None) -> PpoTerms:
    """PPO-clip over target tokens (all arguments but `loss` are per-token tensors).

    With `proximal` (the trainer's own log-probs before this rollout batch's first
    update) the ratio is exp(logp - proximal) and each token is weighted by the truncated
    importance weight min(exp(proximal - behaviour), tis_cap), which corrects for the
    generator being stale or numerically different (no correction when tis_cap is 0);
    without it the ratio is taken against `behaviour` and the weight is 1. Per token:
    -w * min(r * A, clip(r, 1 - clip_low, 1 + clip_high) * A), plus kl_coef times the k3
    estimate of KL to `reference` (when given and kl_coef > 0), minus entropy_coef times
    the entropy. The gradient flows through `logp` and `entropy` only."""
    import torch

    old = behaviour if proximal is None else proximal
    ratio = torch.exp(logp - old)
    weight = torch.ones_like(logp)
    capped = torch.zeros((), device=logp.device)
    if proximal is not None and loss.tis_cap > 0:
        raw = torch.exp(proximal - behaviour).detach()
        weight = raw.clamp(max=loss.tis_cap)
        capped = (raw > loss.tis_cap).sum()
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - loss.clip_low, 1.0 + loss.clip_high) * advantages
    policy = -weight * torch.minimum(unclipped, clipped)
    total = policy.sum()
    kl_sum = torch.zeros((), device=logp.device)
    if reference is not None:
        diff = reference - logp
        kl = torch.exp(diff) - diff - 1.0
        kl_sum = kl.sum()
        if loss.kl_coef > 0:
            total = total + loss.kl_coef * kl_sum
        kl_sum = kl_sum.detach()
    if loss.entropy_coef > 0:
        total = total - loss.entropy_coef * entropy.sum()
    n = logp.shape[0]
    sums = {
        "tokens": torch.tensor(float(n), device=logp.device),
        "loss": total.detach(),
        "policy": policy.detach().sum(),
        "kl": kl_sum,
        "kl_tokens": torch.tensor(float(n if reference is not None else 0), device=logp.device),
        "entropy": entropy.detach().sum(),
        # The clipped branch is the smaller one: its gradient is zero.
        "clipped": (clipped < unclipped).sum(),
        "ratio": ratio.detach().sum(),
        "capped": capped,
    }
    ratio_max = ratio.detach().max() if n else torch.zeros((), device=logp.device)
    return PpoTerms(loss=total / loss.loss_tokens, sums={k: v.double() for k, v in sums.items()},
                    ratio_max=ratio_max.double())
