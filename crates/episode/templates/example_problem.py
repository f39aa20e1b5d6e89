import torch
import torch.nn as nn

ROWS = 512
COLS = 256


class Model(nn.Module):
    """Scale each element, then add a per-column bias."""

    def __init__(self, cols: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(cols))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + self.bias


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [COLS, 0.5]
