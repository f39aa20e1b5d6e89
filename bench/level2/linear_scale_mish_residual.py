import torch
import torch.nn as nn

BATCH = 2048
IN_FEATURES = 4096
OUT_FEATURES = 4096


class Model(nn.Module):
    """A linear layer, then a scale by 1.7, then Mish, then a residual add."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        y = y * 1.7
        y = torch.nn.functional.mish(y)
        y = y + residual
        return y


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES), torch.randn(BATCH, OUT_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
