import torch
import torch.nn as nn

BATCH = 4096
DIM = 8192


class Model(nn.Module):
    """Triplet margin loss with margin 1 and Euclidean distance."""

    def __init__(self):
        super().__init__()

    def forward(self, anchor: torch.Tensor, positive: torch.Tensor, negative: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2.0)


def get_inputs():
    # A random scale per call: the loss's value moves with the inputs, so no constant can pass.
    anchor = torch.randn(BATCH, DIM)
    s = torch.rand(2) * 0.05 + 0.005
    return [anchor, anchor + torch.randn(BATCH, DIM) * s[0], anchor + torch.randn(BATCH, DIM) * s[1]]


def get_init_inputs():
    return []
