import torch
import torch.nn as nn

BATCH = 4096
INPUT = 1024
HIDDEN = 1024


class Model(nn.Module):
    """One step of an LSTM cell: input and hidden projections to four gates (input, forget,
    cell, output), the new cell state and the new hidden state. Returns (h, c)."""

    def __init__(self, input_size: int, hidden: int):
        super().__init__()
        self.cell = nn.LSTMCell(input_size, hidden)

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor):
        return self.cell(x, (h, c))


def get_inputs():
    return [torch.randn(BATCH, INPUT), torch.randn(BATCH, HIDDEN), torch.randn(BATCH, HIDDEN)]


def get_init_inputs():
    return [INPUT, HIDDEN]
