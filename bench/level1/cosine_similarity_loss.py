import torch
import torch.nn as nn

BATCH = 4096
DIM = 8192


class Model(nn.Module):
    """Mean of 1 - cosine similarity between paired rows."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.mean(1.0 - torch.nn.functional.cosine_similarity(a, b, dim=1))


def get_inputs():
    # A random scale per call: the loss's value moves with the inputs, so no constant can pass.
    rho = torch.rand(()) * 2.0 - 1.0
    a = torch.randn(BATCH, DIM)
    return [a, rho * a + torch.randn(BATCH, DIM) * 0.7]


def get_init_inputs():
    return []
