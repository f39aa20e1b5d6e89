import torch
import torch.nn as nn

ROWS = 16384
COLS = 1024


class Model(nn.Module):
    """Inclusive cumulative product along the last dimension of values near one."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumprod(x, dim=-1)


def get_inputs():
    return [1.0 + 0.02 * torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
