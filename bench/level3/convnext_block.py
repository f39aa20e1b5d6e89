import torch
import torch.nn as nn

BATCH = 32
CHANNELS = 192
HEIGHT = 28
WIDTH = 28


class Model(nn.Module):
    """A ConvNeXt block: 7x7 depthwise conv, LayerNorm over channels (channels last), an
    inverted MLP (4x, GELU), a learned per-channel layer scale, residual add."""

    def __init__(self, channels: int):
        super().__init__()
        self.dw = nn.Conv2d(channels, channels, 7, padding=3, groups=channels)
        self.norm = nn.LayerNorm(channels, eps=1e-6)
        self.up = nn.Linear(channels, 4 * channels)
        self.down = nn.Linear(4 * channels, channels)
        self.gamma = nn.Parameter(torch.full((channels,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.down(torch.nn.functional.gelu(self.up(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS]
