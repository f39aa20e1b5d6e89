import torch
import torch.nn as nn

BATCH = 8
IN_CH = 32
OUT_CH = 64
DEPTH = 32
HEIGHT = 64
WIDTH = 64


class Model(nn.Module):
    """A 3x3x3 3-D convolution with bias, padding 1, over video-like volumes."""

    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.conv = nn.Conv3d(in_ch, out_ch, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CH, DEPTH, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CH, OUT_CH]
