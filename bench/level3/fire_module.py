import torch
import torch.nn as nn

BATCH = 64
IN_CHANNELS = 256
SQUEEZE = 48
EXPAND = 192
HEIGHT = 54
WIDTH = 54


class Model(nn.Module):
    """A SqueezeNet fire module: a 1x1 squeeze conv with ReLU feeding two expand convs (1x1
    and 3x3, each with ReLU) whose outputs are concatenated along channels."""

    def __init__(self, in_channels: int, squeeze: int, expand: int):
        super().__init__()
        self.squeeze = nn.Conv2d(in_channels, squeeze, 1)
        self.expand1 = nn.Conv2d(squeeze, expand, 1)
        self.expand3 = nn.Conv2d(squeeze, expand, 3, padding=1)
        for conv in (self.squeeze, self.expand1, self.expand3):  # He initialisation, as for ReLU nets
            nn.init.kaiming_normal_(conv.weight, nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = torch.relu(self.squeeze(x))
        return torch.cat([torch.relu(self.expand1(s)), torch.relu(self.expand3(s))], dim=1)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, SQUEEZE, EXPAND]
