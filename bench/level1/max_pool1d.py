import torch
import torch.nn as nn

BATCH = 64
CHANNELS = 128
LENGTH = 16384
KERNEL = 4
STRIDE = 2
PADDING = 1


class Model(nn.Module):
    """1-D max pooling, window 4, stride 2, padding 1."""

    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool1d(kernel_size=KERNEL, stride=STRIDE, padding=PADDING)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, LENGTH)]


def get_init_inputs():
    return []
