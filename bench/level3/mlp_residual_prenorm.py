import torch
import torch.nn as nn

BATCH = 8
SEQ = 1024
DIM = 1024
HIDDEN = 4096


class Model(nn.Module):
    """A pre-norm residual MLP block: x + W2 · GELU(W1 · LayerNorm(x)), over a sequence."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM)]


def get_init_inputs():
    return [DIM, HIDDEN]
