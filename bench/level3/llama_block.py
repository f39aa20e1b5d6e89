import torch
import torch.nn as nn

BATCH = 8
SEQ = 1024
DIM = 2048
HEADS = 16
KV_HEADS = 4
HIDDEN = 5632


class Model(nn.Module):
    """A Llama-style decoder block: RMSNorm, causal grouped-query attention with rotary
    embeddings, residual; RMSNorm, SwiGLU feed-forward, residual. No biases."""

    def __init__(self, dim: int, heads: int, kv_heads: int, hidden: int):
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads
        self.head_dim = dim // heads
        self.attn_norm = nn.RMSNorm(dim, eps=1e-5)
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        with torch.no_grad():  # sharper attention, as a trained model's: logits of unit-ish spread
            self.q.weight.mul_(3.0)
            self.kv.weight[: kv_heads * self.head_dim].mul_(3.0)
        self.ffn_norm = nn.RMSNorm(dim, eps=1e-5)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)
        half = self.head_dim // 2
        self.register_buffer("inv_freq", 1.0 / (500000.0 ** (torch.arange(half, dtype=torch.float32) / half)),
                             persistent=False)

    @staticmethod
    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        h = self.attn_norm(x)
        q = self.q(h).reshape(b, n, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(h).reshape(b, n, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        angles = torch.arange(n, device=x.device, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
        cos, sin = angles.cos(), angles.sin()
        q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, n, d))
        h = self.ffn_norm(x)
        return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM)]


def get_init_inputs():
    return [DIM, HEADS, KV_HEADS, HIDDEN]
