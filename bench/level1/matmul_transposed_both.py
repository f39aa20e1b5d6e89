import torch
import torch.nn as nn

M = 4096
K = 4096
N = 4096


class Model(nn.Module):
    """Product of two transposed operands: A^T B^T."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a.T, b.T)


def get_inputs():
    return [torch.randn(K, M), torch.randn(N, K)]


def get_init_inputs():
    return []
