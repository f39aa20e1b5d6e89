import torch
import torch.nn as nn

ROWS = 8192
HIDDEN = 4096
EPS = 1e-6


class Model(nn.Module):
    """RMS normalisation over the last dimension with a learned scale."""

    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms * self.weight


def get_inputs():
    return [torch.randn(ROWS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, EPS]
