import torch
import torch.nn as nn

BATCH = 8192
IN_FEATURES = 1024
OUT_FEATURES = 1024


class Model(nn.Module):
    """A linear layer, then Mish."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        y = torch.nn.functional.mish(y)
        return y


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
