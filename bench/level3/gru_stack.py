import torch
import torch.nn as nn

BATCH = 64
SEQ = 256
INPUT = 512
HIDDEN = 1024
LAYERS = 2


class Model(nn.Module):
    """A stacked GRU over a whole sequence (batch first) from a given initial state. Returns
    the top layer's outputs and the last hidden state of every layer."""

    def __init__(self, input_size: int, hidden: int, layers: int):
        super().__init__()
        self.gru = nn.GRU(input_size, hidden, num_layers=layers, batch_first=True)

    def forward(self, x: torch.Tensor, h0: torch.Tensor):
        out, h = self.gru(x, h0)
        return out * 4.0, h * 4.0


def get_inputs():
    return [torch.randn(BATCH, SEQ, INPUT), torch.randn(LAYERS, BATCH, HIDDEN)]


def get_init_inputs():
    return [INPUT, HIDDEN, LAYERS]
