import torch
import torch.nn as nn

BATCH = 8192
IN_FEATURES = 1024
HIDDEN = 2048
CLASSES = 1000


class Model(nn.Module):
    """A classifier head: two hidden layers with SiLU, then log-probabilities over the classes."""

    def __init__(self, in_features: int, hidden: int, classes: int):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.silu(self.fc1(x))
        h = torch.nn.functional.silu(self.fc2(h))
        return torch.log_softmax(self.head(h) * 16.0, dim=-1)


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, HIDDEN, CLASSES]
