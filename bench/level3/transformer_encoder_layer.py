import torch
import torch.nn as nn

BATCH = 16
SEQ = 512
DIM = 1024
HEADS = 16
HIDDEN = 4096


class Model(nn.Module):
    """A post-norm transformer encoder layer (BERT style): self-attention, residual add,
    LayerNorm; a GELU feed-forward network, residual add, LayerNorm."""

    def __init__(self, dim: int, heads: int, hidden: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        with torch.no_grad():  # sharper attention, as a trained model's: logits of unit-ish spread
            self.qkv.weight[: 2 * dim].mul_(3.0)
        self.norm1 = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
        x = self.norm1(x + self.proj(a))
        return self.norm2(x + self.down(torch.nn.functional.gelu(self.up(x))))


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM)]


def get_init_inputs():
    return [DIM, HEADS, HIDDEN]
