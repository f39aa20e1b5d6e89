import torch
import torch.nn as nn

M = 8192
K = 8192
N = 8192


class Model(nn.Module):
    """Half-precision matrix product (fp32 accumulation is allowed)."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K, dtype=torch.float16) * 0.5, torch.randn(K, N, dtype=torch.float16) * 0.5]


def get_init_inputs():
    return []
