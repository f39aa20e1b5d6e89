import torch
import torch.nn as nn

BATCH = 4096
DIM = 8192


class Model(nn.Module):
    """KL divergence of target distributions from predicted log-probabilities, averaged over the batch."""

    def __init__(self):
        super().__init__()

    def forward(self, log_pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.kl_div(log_pred, target, reduction="batchmean")


def get_inputs():
    # A random scale per call: the loss's value moves with the inputs, so no constant can pass.
    scale = torch.rand(()) * 3.0 + 0.5
    log_pred = torch.log_softmax(torch.randn(BATCH, DIM) * scale, dim=-1)
    target = torch.softmax(torch.randn(BATCH, DIM), dim=-1)
    return [log_pred, target]


def get_init_inputs():
    return []
