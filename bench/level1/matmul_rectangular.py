import torch
import torch.nn as nn

M = 8192
K = 2048
N = 3072


class Model(nn.Module):
    """Matrix product of a tall matrix and a wide one (M, K, N all different)."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
