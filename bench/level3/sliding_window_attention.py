import torch
import torch.nn as nn

BATCH = 8
SEQ = 4096
DIM = 1024
HEADS = 16
WINDOW = 512


class Model(nn.Module):
    """Causal self-attention restricted to a sliding window: position i attends to positions
    i - WINDOW + 1 .. i only (local attention of long-context models)."""

    def __init__(self, dim: int, heads: int, window: int):
        super().__init__()
        self.heads, self.window = heads, window
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        with torch.no_grad():  # sharper attention, as a trained model's: logits of unit-ish spread
            self.qkv.weight[: 2 * dim].mul_(3.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        i = torch.arange(n, device=x.device)
        delta = i[:, None] - i[None, :]
        mask = (delta >= 0) & (delta < self.window)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(a.transpose(1, 2).reshape(b, n, d))


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM)]


def get_init_inputs():
    return [DIM, HEADS, WINDOW]
