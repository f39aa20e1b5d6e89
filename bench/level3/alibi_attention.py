import torch
import torch.nn as nn

BATCH = 16
SEQ = 1024
DIM = 1024
HEADS = 16


class Model(nn.Module):
    """Causal self-attention with ALiBi: no position embeddings; each head adds a linear
    penalty, its own slope times the distance, to the attention logits."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        with torch.no_grad():  # sharper attention, as a trained model's: logits of unit-ish spread
            self.qkv.weight[: 2 * dim].mul_(3.0)
        slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)])
        self.register_buffer("slopes", slopes, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        i = torch.arange(n, device=x.device)
        dist = (i[None, :] - i[:, None]).float()
        bias = self.slopes[:, None, None] * dist[None]
        bias = bias.masked_fill(dist[None] > 0, float("-inf"))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias[None])
        return self.out(a.transpose(1, 2).reshape(b, n, d))


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM)]


def get_init_inputs():
    return [DIM, HEADS]
