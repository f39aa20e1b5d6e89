import torch
import torch.nn as nn

BATCH = 32
IN_CH = 128
OUT_CH = 128
LENGTH = 4096


class Model(nn.Module):
    """A transposed 1-D convolution (kernel 3, stride 2, padding 1) upsampling sequences."""

    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.conv = nn.ConvTranspose1d(in_ch, out_ch, kernel_size=3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CH, LENGTH)]


def get_init_inputs():
    return [IN_CH, OUT_CH]
