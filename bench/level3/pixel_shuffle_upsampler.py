import torch
import torch.nn as nn

BATCH = 16
CHANNELS = 64
SCALE = 2
HEIGHT = 128
WIDTH = 128


class Model(nn.Module):
    """A super-resolution upsampling tail: a 3x3 conv to CHANNELS x SCALE^2 channels, pixel
    shuffle to SCALE times the resolution, PReLU-free LeakyReLU, and a 3x3 conv to RGB."""

    def __init__(self, channels: int, scale: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels * scale * scale, 3, padding=1)
        self.shuffle = nn.PixelShuffle(scale)
        self.out = nn.Conv2d(channels, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.leaky_relu(self.shuffle(self.conv(x)), 0.1)
        return self.out(y) * 4.0


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS, SCALE]
