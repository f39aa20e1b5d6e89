import torch
import torch.nn as nn

BATCH = 32
CHANNELS = 80
EXPAND = 6
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
    """An EfficientNet MBConv block in inference mode: 1x1 expansion with SiLU, 3x3 depthwise
    conv with SiLU, squeeze-and-excitation on the expanded channels, linear 1x1 projection,
    residual add."""

    def __init__(self, channels: int, expand: int):
        super().__init__()
        hidden = channels * expand
        squeezed = max(1, channels // 4)
        self.expand = nn.Conv2d(channels, hidden, 1, bias=False)
        self.bn1 = calibrated(nn.BatchNorm2d(hidden))
        self.dw = nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False)
        self.bn2 = calibrated(nn.BatchNorm2d(hidden))
        self.se_reduce = nn.Conv2d(hidden, squeezed, 1)
        self.se_expand = nn.Conv2d(squeezed, hidden, 1)
        self.project = nn.Conv2d(hidden, channels, 1, bias=False)
        self.bn3 = calibrated(nn.BatchNorm2d(channels))
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.silu(self.bn1(self.expand(x)))
        y = torch.nn.functional.silu(self.bn2(self.dw(y)))
        s = y.mean(dim=(2, 3), keepdim=True)
        s = torch.sigmoid(self.se_expand(torch.nn.functional.silu(self.se_reduce(s))))
        return x + self.bn3(self.project(y * s))


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS, EXPAND]
