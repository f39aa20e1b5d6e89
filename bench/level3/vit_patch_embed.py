import torch
import torch.nn as nn

BATCH = 64
IMAGE = 224
PATCH = 16
CHANNELS = 3
DIM = 768


class Model(nn.Module):
    """A Vision Transformer's stem: non-overlapping PATCH x PATCH patches embedded by a strided
    conv, a class token prepended, learned position embeddings added, LayerNorm."""

    def __init__(self, image: int, patch: int, channels: int, dim: int):
        super().__init__()
        self.embed = nn.Conv2d(channels, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.5)
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.5)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.embed(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls.expand(t.shape[0], -1, -1), t], dim=1)
        return self.norm(t + self.pos)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, IMAGE, IMAGE)]


def get_init_inputs():
    return [IMAGE, PATCH, CHANNELS, DIM]
