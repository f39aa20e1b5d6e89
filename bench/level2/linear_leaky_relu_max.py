import torch
import torch.nn as nn

BATCH = 4096
IN_FEATURES = 2048
OUT_FEATURES = 4096


class Model(nn.Module):
    """A linear layer, then leaky ReLU, then a max over features."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        y = torch.nn.functional.leaky_relu(y, negative_slope=0.1)
        y = torch.amax(y, dim=1, keepdim=True)
        return y


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES) * (torch.rand(BATCH, 1) * 1.5 + 0.25)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
