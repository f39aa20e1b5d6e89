import torch
import torch.nn as nn

BATCH = 32
CHANNELS = 128
HEIGHT = 112
WIDTH = 112


class Model(nn.Module):
    """A depthwise 3x3 convolution: one filter per channel (groups = channels)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, kernel_size=3, padding=1, groups=channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS]
