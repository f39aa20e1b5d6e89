import torch
import torch.nn as nn

BATCH = 64
CHANNELS = 512
REDUCTION = 16
HEIGHT = 28
WIDTH = 28


class Model(nn.Module):
    """A squeeze-and-excitation block: global average pooling, a bottleneck MLP (ReLU, then
    sigmoid) giving one gate per channel, and the input rescaled channel by channel."""

    def __init__(self, channels: int, reduction: int):
        super().__init__()
        self.fc1 = nn.Linear(channels, channels // reduction)
        self.fc2 = nn.Linear(channels // reduction, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.mean(dim=(2, 3))
        g = torch.sigmoid(self.fc2(torch.relu(self.fc1(s))) * 4.0)
        return x * g[:, :, None, None]


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS, REDUCTION]
