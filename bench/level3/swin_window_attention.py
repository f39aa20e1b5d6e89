import torch
import torch.nn as nn

BATCH = 32
HEIGHT = 56
WIDTH = 56
DIM = 128
HEADS = 4
WINDOW = 7


class Model(nn.Module):
    """Swin-style window attention: the feature map is cut into WINDOW x WINDOW windows and
    each window runs multi-head self-attention with a learned relative-position bias, then
    the windows are stitched back."""

    def __init__(self, dim: int, heads: int, window: int):
        super().__init__()
        self.heads, self.window = heads, window
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        with torch.no_grad():  # sharper attention, as a trained model's: logits of unit-ish spread
            self.qkv.weight[: 2 * dim].mul_(3.0)
        self.bias_table = nn.Parameter(torch.randn((2 * window - 1) ** 2, heads) * 0.5)
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (window - 1)
        self.register_buffer("rel_index", rel[..., 0] * (2 * window - 1) + rel[..., 1], persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape
        s = self.window
        t = x.reshape(b, h // s, s, w // s, s, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, s * s, c)
        q, k, v = self.qkv(t).reshape(t.shape[0], s * s, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        bias = self.bias_table[self.rel_index].permute(2, 0, 1)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias[None])
        a = self.out(a.transpose(1, 2).reshape(-1, s * s, c))
        return a.reshape(b, h // s, w // s, s, s, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)


def get_inputs():
    return [torch.randn(BATCH, HEIGHT, WIDTH, DIM)]


def get_init_inputs():
    return [DIM, HEADS, WINDOW]
