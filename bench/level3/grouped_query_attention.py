import torch
import torch.nn as nn

BATCH = 16
SEQ = 1024
DIM = 2048
HEADS = 16
KV_HEADS = 4


class Model(nn.Module):
    """Causal grouped-query attention: HEADS query heads share KV_HEADS key/value heads
    (each key/value head serves HEADS / KV_HEADS query heads), as in current open LLMs."""

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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q = self.q(x).reshape(b, n, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).reshape(b, n, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        group = self.heads // self.kv_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(a.transpose(1, 2).reshape(b, n, d))


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM)]


def get_init_inputs():
    return [DIM, HEADS, KV_HEADS]
