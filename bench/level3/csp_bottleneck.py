import torch
import torch.nn as nn

BATCH = 16
CHANNELS = 256
BLOCKS = 2
HEIGHT = 40
WIDTH = 40


def calibrated(bn: nn.Module) -> nn.Module:
    """Inference-mode batch norm with the statistics a trained network would carry."""
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
        bn.running_mean.uniform_(-0.2, 0.2)
        bn.running_var.uniform_(0.1, 0.5)
    return bn


class ConvBnSilu(nn.Module):
    def __init__(self, cin: int, cout: int, k: int):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, padding=k // 2, bias=False)
        self.bn = calibrated(nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(self.bn(self.conv(x)))


class Model(nn.Module):
    """A cross-stage-partial block of a detection backbone, in inference mode: the input is
    split by two 1x1 convs, one half runs BLOCKS residual bottlenecks (1x1 then 3x3), and
    both halves are concatenated and fused by a 1x1 conv; conv, batch norm and SiLU throughout."""

    def __init__(self, channels: int, blocks: int):
        super().__init__()
        half = channels // 2
        self.split_a = ConvBnSilu(channels, half, 1)
        self.split_b = ConvBnSilu(channels, half, 1)
        self.blocks = nn.ModuleList(
            nn.Sequential(ConvBnSilu(half, half, 1), ConvBnSilu(half, half, 3)) for _ in range(blocks)
        )
        self.fuse = ConvBnSilu(2 * half, channels, 1)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.split_a(x)
        for block in self.blocks:
            a = a + block(a)
        return self.fuse(torch.cat([a, self.split_b(x)], dim=1))


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS, BLOCKS]
