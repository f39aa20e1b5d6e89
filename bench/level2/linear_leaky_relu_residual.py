import torch
import torch.nn as nn

BATCH = 1024
IN_FEATURES = 8192
OUT_FEATURES = 2048


class Model(nn.Module):
    """A linear layer, then leaky ReLU, then a residual add."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        y = torch.nn.functional.leaky_relu(y, negative_slope=0.1)
        y = y + residual
        return y


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES), torch.randn(BATCH, OUT_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
