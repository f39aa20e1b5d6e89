import torch
import torch.nn as nn

M = 256
K = 131072
N = 256


class Model(nn.Module):
    """Matrix product with a very large inner dimension and small outputs."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
