import torch
import torch.nn as nn

N = 32
C = 64
G = 8
H = 112
W = 112


class Model(nn.Module):
    """Group normalisation: statistics per sample over groups of channels."""

    def __init__(self, groups: int, channels: int):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.2)
            self.norm.bias.normal_(0.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(N, C, H, W) * 1.5 + 0.3]


def get_init_inputs():
    return [G, C]
