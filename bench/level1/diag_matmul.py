import torch
import torch.nn as nn

N = 8192
M = 8192


class Model(nn.Module):
    """A diagonal matrix (given by its diagonal) times a dense matrix."""

    def __init__(self):
        super().__init__()

    def forward(self, d: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.diag(d) @ b


def get_inputs():
    return [torch.randn(N), torch.randn(N, M)]


def get_init_inputs():
    return []
