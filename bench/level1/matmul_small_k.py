import torch
import torch.nn as nn

M = 16384
K = 32
N = 16384


class Model(nn.Module):
    """Matrix product with a very small inner dimension (outer-product-like)."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
