import torch
import torch.nn as nn

BATCH = 16
IN_CHANNELS = 256
OUT_CHANNELS = 128
HEIGHT = 32
WIDTH = 32


def calibrated(bn: nn.Module) -> nn.Module:
    """Inference-mode batch norm with the statistics a trained network would carry."""
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
        bn.running_mean.uniform_(-0.2, 0.2)
        bn.running_var.uniform_(0.1, 0.5)
    return bn


class Model(nn.Module):
    """A U-Net decoder stage in inference mode: a 2x2 transposed conv doubles the resolution,
    the encoder's skip map is concatenated, and two 3x3 conv + batch norm + ReLU layers follow."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.up = nn.ConvTranspose2d(in_channels, out_channels, 2, stride=2)
        self.conv1 = nn.Conv2d(2 * out_channels, out_channels, 3, padding=1, bias=False)
        self.bn1 = calibrated(nn.BatchNorm2d(out_channels))
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = calibrated(nn.BatchNorm2d(out_channels))
        self.eval()

    def forward(self, x: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        y = torch.cat([self.up(x), skip], dim=1)
        y = torch.relu(self.bn1(self.conv1(y)))
        return torch.relu(self.bn2(self.conv2(y)))


def get_inputs():
    return [
        torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH),
        torch.randn(BATCH, OUT_CHANNELS, 2 * HEIGHT, 2 * WIDTH),
    ]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS]
