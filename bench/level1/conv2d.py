import torch
import torch.nn as nn

BATCH = 16
IN_CH = 64
OUT_CH = 128
HEIGHT = 128
WIDTH = 128


class Model(nn.Module):
    """A standard 3x3 2-D convolution with bias, padding 1."""

    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CH, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CH, OUT_CH]
