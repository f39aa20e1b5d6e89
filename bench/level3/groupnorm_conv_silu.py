import torch
import torch.nn as nn

BATCH = 16
IN_CHANNELS = 256
OUT_CHANNELS = 256
GROUPS = 32
HEIGHT = 64
WIDTH = 64


class Model(nn.Module):
    """Group norm, SiLU, then a 3x3 conv: the pre-activation layer of diffusion U-Nets."""

    def __init__(self, in_channels: int, out_channels: int, groups: int):
        super().__init__()
        self.norm = nn.GroupNorm(groups, in_channels)
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.nn.functional.silu(self.norm(x))) * 2.0


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH) * 2.0 + 0.5]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, GROUPS]
