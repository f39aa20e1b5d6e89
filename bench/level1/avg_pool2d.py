import torch
import torch.nn as nn

BATCH = 32
CHANNELS = 64
HEIGHT = 224
WIDTH = 224
KERNEL = 3
STRIDE = 2
PADDING = 1


class Model(nn.Module):
    """2-D average pooling, window 3, stride 2, padding 1 (padding counts as zeros)."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size=KERNEL, stride=STRIDE, padding=PADDING)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return []
