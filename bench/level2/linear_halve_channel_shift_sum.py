import torch
import torch.nn as nn

BATCH = 8192
IN_FEATURES = 1024
OUT_FEATURES = 1024


class Model(nn.Module):
    """A linear layer, then halving, then a learned per-channel shift, then a sum over features."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.channel_shift = nn.Parameter(torch.randn(out_features) * 0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        y = y * 0.5
        y = y + self.channel_shift
        y = torch.sum(y, dim=1, keepdim=True)
        return y


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES) * (torch.rand(BATCH, 1) * 1.5 + 0.25)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
