import torch
import torch.nn as nn

BATCH = 16
IN_CHANNELS = 32
OUT_CHANNELS = 64
HEIGHT = 128
WIDTH = 128


class Model(nn.Module):
    """A 3x3 convolution (padding 1), then sigmoid, then a residual add, then tanh, then 2x2 max pooling."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        y = torch.sigmoid(y)
        y = y + residual
        y = torch.tanh(y)
        y = torch.nn.functional.max_pool2d(y, kernel_size=2)
        return y


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH), torch.randn(BATCH, OUT_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS]
