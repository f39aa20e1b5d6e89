import torch
import torch.nn as nn

BATCH = 16
IN_CH = 128
OUT_CH = 64
HEIGHT = 64
WIDTH = 64


class Model(nn.Module):
    """A transposed 2-D convolution (4x4 kernel, stride 2, padding 1) that doubles the resolution."""

    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.conv = nn.ConvTranspose2d(in_ch, out_ch, kernel_size=4, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CH, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CH, OUT_CH]
