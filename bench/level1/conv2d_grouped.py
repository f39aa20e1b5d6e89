import torch
import torch.nn as nn

BATCH = 16
IN_CH = 128
OUT_CH = 128
GROUPS = 4
HEIGHT = 96
WIDTH = 96


class Model(nn.Module):
    """A grouped 3x3 convolution with 4 groups."""

    def __init__(self, in_ch: int, out_ch: int, groups: int):
        super().__init__()
        self.conv = nn.Conv2d(in_ch, out_ch, kernel_size=3, padding=1, groups=groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CH, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CH, OUT_CH, GROUPS]
