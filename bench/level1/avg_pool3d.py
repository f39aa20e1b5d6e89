import torch
import torch.nn as nn

BATCH = 16
CHANNELS = 32
DEPTH = 64
HEIGHT = 64
WIDTH = 64
KERNEL = 3
STRIDE = 2
PADDING = 1


class Model(nn.Module):
    """3-D average pooling, window 3, stride 2, padding 1 (padding counts as zeros)."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AvgPool3d(kernel_size=KERNEL, stride=STRIDE, padding=PADDING)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, DEPTH, HEIGHT, WIDTH)]


def get_init_inputs():
    return []
