import torch
import torch.nn as nn

BATCH = 32
IN_CHANNELS = 128
OUT_CHANNELS = 256
HEIGHT = 56
WIDTH = 56


def calibrated(bn: nn.Module) -> nn.Module:
    """Inference-mode batch norm with the statistics a trained network would carry."""
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
        bn.running_mean.uniform_(-0.2, 0.2)
        bn.running_var.uniform_(0.1, 0.5)
    return bn


class Model(nn.Module):
    """The first block of a ResNet stage: a strided 3x3 conv halves the resolution and widens
    the channels, and a strided 1x1 projection (with batch norm) carries the shortcut."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=2, padding=1, bias=False)
        self.bn1 = calibrated(nn.BatchNorm2d(out_channels))
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = calibrated(nn.BatchNorm2d(out_channels))
        self.proj = nn.Conv2d(in_channels, out_channels, 1, stride=2, bias=False)
        self.bn_proj = calibrated(nn.BatchNorm2d(out_channels))
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + self.bn_proj(self.proj(x)))


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS]
