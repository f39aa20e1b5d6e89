import torch
import torch.nn as nn

BATCH = 4096
IN_FEATURES = 2048
HIDDEN = 4096
OUT_FEATURES = 1024


class Model(nn.Module):
    """A three-layer perceptron with ReLU between the layers: the plainest MLP stack."""

    def __init__(self, in_features: int, hidden: int, out_features: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, out_features),
        )
        for layer in self.net:
            if isinstance(layer, nn.Linear):  # He initialisation keeps activations' size through ReLUs
                nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, HIDDEN, OUT_FEATURES]
