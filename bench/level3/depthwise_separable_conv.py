import torch
import torch.nn as nn

BATCH = 64
IN_CHANNELS = 256
OUT_CHANNELS = 512
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
    """A MobileNet depthwise-separable block in inference mode: 3x3 depthwise conv, batch
    norm, ReLU, then a 1x1 pointwise conv, batch norm, ReLU."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.dw = nn.Conv2d(in_channels, in_channels, 3, padding=1, groups=in_channels, bias=False)
        self.bn1 = calibrated(nn.BatchNorm2d(in_channels))
        self.pw = nn.Conv2d(in_channels, out_channels, 1, bias=False)
        self.bn2 = calibrated(nn.BatchNorm2d(out_channels))
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.dw(x)))
        return torch.relu(self.bn2(self.pw(y)))


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS]
