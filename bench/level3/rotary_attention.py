import torch
import torch.nn as nn

BATCH = 16
SEQ = 1024
DIM = 1024
HEADS = 16


class Model(nn.Module):
    """Causal self-attention with rotary position embeddings: queries and keys are rotated
    pairwise (first half against second half of each head) by position-dependent angles
    before the attention; no bias in the projections."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        with torch.no_grad():  # sharper attention, as a trained model's: logits of unit-ish spread
            self.qkv.weight[: 2 * dim].mul_(3.0)
        half = dim // heads // 2
        self.register_buffer("inv_freq", 1.0 / (10000.0 ** (torch.arange(half, dtype=torch.float32) / half)),
                             persistent=False)

    @staticmethod
    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        angles = torch.arange(n, device=x.device, dtype=torch.float32)[:, None] * self.inv_freq[None, :]
        cos, sin = angles.cos(), angles.sin()
        q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(a.transpose(1, 2).reshape(b, n, d))


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM)]


def get_init_inputs():
    return [DIM, HEADS]
