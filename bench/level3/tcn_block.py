import torch
import torch.nn as nn

BATCH = 32
CHANNELS = 256
SEQ = 4096
KERNEL = 3
DILATION = 4


class Model(nn.Module):
    """A temporal convolutional network block: two dilated causal 1-D convs (left padding
    only, so no step sees the future), each followed by ReLU, with a residual add."""

    def __init__(self, channels: int, kernel: int, dilation: int):
        super().__init__()
        self.pad = (kernel - 1) * dilation
        self.conv1 = nn.Conv1d(channels, channels, kernel, dilation=dilation)
        self.conv2 = nn.Conv1d(channels, channels, kernel, dilation=dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv1(torch.nn.functional.pad(x, (self.pad, 0))))
        y = torch.relu(self.conv2(torch.nn.functional.pad(y, (self.pad, 0))))
        return torch.relu(x + y)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SEQ)]


def get_init_inputs():
    return [CHANNELS, KERNEL, DILATION]
