import torch
import torch.nn as nn

BATCH = 16
HEADS = 16
SEQ = 1024
HEAD_DIM = 64


class Model(nn.Module):
    """Causal scaled dot-product attention: each query sees only earlier keys."""

    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def get_inputs():
    shape = (BATCH, HEADS, SEQ, HEAD_DIM)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return []
