import torch
import torch.nn as nn

BATCH = 16
M = 1024
K = 2048
N = 1024


class Model(nn.Module):
    """A 3-D tensor times a matrix: the last dimension is contracted."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(BATCH, M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
