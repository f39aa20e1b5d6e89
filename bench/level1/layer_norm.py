import torch
import torch.nn as nn

ROWS = 8192
HIDDEN = 4096


class Model(nn.Module):
    """Layer normalisation over the last dimension with a learned scale and shift."""

    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.2)
            self.norm.bias.normal_(0.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(ROWS, HIDDEN) * 2.0 + 0.5]


def get_init_inputs():
    return [HIDDEN]
