import torch
import torch.nn as nn

BATCH = 32
IN_CH = 128
OUT_CH = 256
LENGTH = 8192


class Model(nn.Module):
    """A 1-D convolution with kernel 7 and padding 3 over sequences."""

    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.conv = nn.Conv1d(in_ch, out_ch, kernel_size=7, padding=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CH, LENGTH)]


def get_init_inputs():
    return [IN_CH, OUT_CH]
