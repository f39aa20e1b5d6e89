import torch
import torch.nn as nn

BATCH = 16
IN_CHANNELS = 64
OUT_CHANNELS = 128
HEIGHT = 128
WIDTH = 128


def calibrated(bn: nn.Module) -> nn.Module:
    """Inference-mode batch norm with the statistics a trained network would carry."""
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
        bn.running_mean.uniform_(-0.2, 0.2)
        bn.running_var.uniform_(0.1, 0.5)
    return bn


class Model(nn.Module):
    """A U-Net encoder stage in inference mode: two 3x3 conv + batch norm + ReLU layers, then
    2x2 max pooling. Returns the pooled map and the skip connection."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False)
        self.bn1 = calibrated(nn.BatchNorm2d(out_channels))
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = calibrated(nn.BatchNorm2d(out_channels))
        self.eval()

    def forward(self, x: torch.Tensor):
        y = torch.relu(self.bn1(self.conv1(x)))
        skip = torch.relu(self.bn2(self.conv2(y)))
        return torch.nn.functional.max_pool2d(skip, 2), skip


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS]
