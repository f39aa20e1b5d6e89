import torch
import torch.nn as nn

BATCH = 16
IN_CHANNELS = 128
OUT_CHANNELS = 256
TIME_DIM = 512
GROUPS = 32
HEIGHT = 32
WIDTH = 32


class Model(nn.Module):
    """A diffusion U-Net residual block: group norm, SiLU, 3x3 conv; a projection of the time
    embedding added per channel; group norm, SiLU, 3x3 conv; a 1x1 conv on the shortcut."""

    def __init__(self, in_channels: int, out_channels: int, time_dim: int, groups: int):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, in_channels)
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.time = nn.Linear(time_dim, out_channels)
        self.norm2 = nn.GroupNorm(groups, out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1)
        self.skip = nn.Conv2d(in_channels, out_channels, 1)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        h = self.conv1(torch.nn.functional.silu(self.norm1(x)))
        h = h + self.time(torch.nn.functional.silu(t))[:, :, None, None]
        h = self.conv2(torch.nn.functional.silu(self.norm2(h)))
        return self.skip(x) + h


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH), torch.randn(BATCH, TIME_DIM)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, TIME_DIM, GROUPS]
