import torch
import torch.nn as nn

BATCH = 1024
IN_FEATURES = 8192
OUT_FEATURES = 2048


class Model(nn.Module):
    """A linear layer, then SiLU, then a clamp to [-0.8, 1.2]."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        y = torch.nn.functional.silu(y)
        y = torch.clamp(y, min=-0.8, max=1.2)
        return y


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
