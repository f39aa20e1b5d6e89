import torch
import torch.nn as nn

BATCH = 4096
DIM = 8192


class Model(nn.Module):
    """Hinge loss mean(max(0, 1 - prediction * label)) with labels in {-1, +1}."""

    def __init__(self):
        super().__init__()

    def forward(self, pred: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
        return torch.clamp(1.0 - pred * label, min=0.0).mean()


def get_inputs():
    # A random scale per call: the loss's value moves with the inputs, so no constant can pass.
    scale = torch.rand(()) * 2.0 + 0.2
    label = torch.randint(0, 2, (BATCH, DIM)).float() * 2.0 - 1.0
    return [torch.randn(BATCH, DIM) * scale + 0.3, label]


def get_init_inputs():
    return []
