import torch
import torch.nn as nn

BATCH = 32
CHANNELS = 128
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
    """A ResNet basic block in inference mode: 3x3 conv, batch norm, ReLU, 3x3 conv, batch
    norm, identity shortcut, ReLU."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = calibrated(nn.BatchNorm2d(channels))
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = calibrated(nn.BatchNorm2d(channels))
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS]
