import torch
import torch.nn as nn

M = 16384
K = 16384


class Model(nn.Module):
    """Matrix-vector product with the vector as an (K, 1) column."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, v)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, 1)]


def get_init_inputs():
    return []
