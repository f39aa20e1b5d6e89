import torch
import torch.nn as nn

BATCH = 16
HEADS = 16
SEQ = 1024
HEAD_DIM = 64


class Model(nn.Module):
    """Scaled dot-product attention over (batch, heads, sequence, head_dim)."""

    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=False)


def get_inputs():
    shape = (BATCH, HEADS, SEQ, HEAD_DIM)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return []
