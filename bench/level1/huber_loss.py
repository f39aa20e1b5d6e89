import torch
import torch.nn as nn

BATCH = 4096
DIM = 8192


class Model(nn.Module):
    """Huber loss with delta 1: quadratic near zero, linear beyond."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.huber_loss(a, b, delta=1.0)


def get_inputs():
    # A random scale per call: the loss's value moves with the inputs, so no constant can pass.
    scale = torch.rand(()) * 2.0 + 0.5
    return [torch.randn(BATCH, DIM) * scale, torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
