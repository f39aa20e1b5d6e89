import torch
import torch.nn as nn

N = 32
C = 64
H = 112
W = 112


class Model(nn.Module):
    """Batch normalisation of a 4-D activation in training mode (batch statistics)."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.BatchNorm2d(channels, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.2)
            self.norm.bias.normal_(0.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(N, C, H, W) * 1.5 + 0.3]


def get_init_inputs():
    return [C]
