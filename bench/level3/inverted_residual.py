import torch
import torch.nn as nn

BATCH = 64
CHANNELS = 64
EXPAND = 6
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
    """A MobileNetV2 inverted residual block in inference mode: 1x1 expansion with ReLU6, 3x3
    depthwise conv with ReLU6, linear 1x1 projection, residual add."""

    def __init__(self, channels: int, expand: int):
        super().__init__()
        hidden = channels * expand
        self.expand = nn.Conv2d(channels, hidden, 1, bias=False)
        self.bn1 = calibrated(nn.BatchNorm2d(hidden))
        self.dw = nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False)
        self.bn2 = calibrated(nn.BatchNorm2d(hidden))
        self.project = nn.Conv2d(hidden, channels, 1, bias=False)
        self.bn3 = calibrated(nn.BatchNorm2d(channels))
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.relu6(self.bn1(self.expand(x)))
        y = torch.nn.functional.relu6(self.bn2(self.dw(y)))
        return x + self.bn3(self.project(y))


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS, EXPAND]
