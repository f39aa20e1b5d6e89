import torch
import torch.nn as nn

BATCH = 32
CHANNELS = 256
WIDTH_CHANNELS = 64
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
    """A ResNet bottleneck block in inference mode: 1x1 reduce, 3x3, 1x1 expand (each with
    batch norm; ReLU after the first two), identity shortcut, ReLU."""

    def __init__(self, channels: int, width: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, width, 1, bias=False)
        self.bn1 = calibrated(nn.BatchNorm2d(width))
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = calibrated(nn.BatchNorm2d(width))
        self.conv3 = nn.Conv2d(width, channels, 1, bias=False)
        self.bn3 = calibrated(nn.BatchNorm2d(channels))
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return torch.relu(y + x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS, WIDTH_CHANNELS]
