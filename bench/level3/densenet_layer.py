import torch
import torch.nn as nn

BATCH = 32
IN_CHANNELS = 256
GROWTH = 32
BOTTLENECK = 4
HEIGHT = 28
WIDTH = 28


def calibrated(bn: nn.Module) -> nn.Module:
    """Inference-mode batch norm with the statistics a trained network would carry."""
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
        bn.running_mean.uniform_(-0.2, 0.2)
        bn.running_var.uniform_(0.1, 0.5)
    return bn


class Model(nn.Module):
    """A DenseNet layer in inference mode: batch norm, ReLU, 1x1 conv to BOTTLENECK x GROWTH
    channels, batch norm, ReLU, 3x3 conv to GROWTH channels, concatenated onto the input."""

    def __init__(self, in_channels: int, growth: int, bottleneck: int):
        super().__init__()
        mid = growth * bottleneck
        self.bn1 = calibrated(nn.BatchNorm2d(in_channels))
        self.conv1 = nn.Conv2d(in_channels, mid, 1, bias=False)
        self.bn2 = calibrated(nn.BatchNorm2d(mid))
        self.conv2 = nn.Conv2d(mid, growth, 3, padding=1, bias=False)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv1(torch.relu(self.bn1(x)))
        y = self.conv2(torch.relu(self.bn2(y)))
        return torch.cat([x, y], dim=1)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, GROWTH, BOTTLENECK]
