import torch
import torch.nn as nn

BATCH = 64
CACHE = 4096
DIM = 2048
HEADS = 16
KV_HEADS = 4


class Model(nn.Module):
    """One decoding step of grouped-query attention against a key/value cache: the new
    token's query, key and value are projected, the key and value appended to the cache,
    and the query attends to all CACHE + 1 positions. Returns the attention output."""

    def __init__(self, dim: int, heads: int, kv_heads: int):
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads
        self.head_dim = dim // heads
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        with torch.no_grad():  # sharper attention, as a trained model's: logits of unit-ish spread
            self.q.weight.mul_(3.0)
            self.kv.weight[: kv_heads * self.head_dim].mul_(3.0)

    def forward(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        b, d = x.shape
        q = self.q(x).reshape(b, self.heads, 1, self.head_dim)
        k, v = self.kv(x).reshape(b, 2, self.kv_heads, 1, self.head_dim).unbind(1)
        k = torch.cat([k_cache, k], dim=2)
        v = torch.cat([v_cache, v], dim=2)
        group = self.heads // self.kv_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.out(a.reshape(b, d))


def get_inputs():
    head_dim = DIM // HEADS
    return [
        torch.randn(BATCH, DIM),
        torch.randn(BATCH, KV_HEADS, CACHE, head_dim),
        torch.randn(BATCH, KV_HEADS, CACHE, head_dim),
    ]


def get_init_inputs():
    return [DIM, HEADS, KV_HEADS]
