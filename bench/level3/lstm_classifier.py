import torch
import torch.nn as nn

BATCH = 256
SEQ = 128
INPUT = 256
HIDDEN = 512
CLASSES = 32


class Model(nn.Module):
    """A bidirectional LSTM sequence classifier: both directions' final hidden states are
    concatenated and fed to a linear layer giving class logits."""

    def __init__(self, input_size: int, hidden: int, classes: int):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, (h, _) = self.lstm(x)
        return self.head(torch.cat([h[0], h[1]], dim=-1)) * 8.0


def get_inputs():
    return [torch.randn(BATCH, SEQ, INPUT)]


def get_init_inputs():
    return [INPUT, HIDDEN, CLASSES]
