import torch
import torch.nn as nn

BATCH = 16
SEQ = 1024
CONTEXT = 256
DIM = 1024
CONTEXT_DIM = 768
HEADS = 16


class Model(nn.Module):
    """Multi-head cross-attention: queries from the sequence, keys and values from a context
    of another length and width (text conditioning, encoder outputs)."""

    def __init__(self, dim: int, context_dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(context_dim, 2 * dim)
        self.out = nn.Linear(dim, dim)
        with torch.no_grad():  # sharper attention, as a trained model's: logits of unit-ish spread
            self.q.weight.mul_(3.0)
            self.kv.weight[:dim].mul_(3.0)

    def forward(self, x: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        m = context.shape[1]
        q = self.q(x).reshape(b, n, self.heads, d // self.heads).transpose(1, 2)
        k, v = self.kv(context).reshape(b, m, 2, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.out(a.transpose(1, 2).reshape(b, n, d))


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM), torch.randn(BATCH, CONTEXT, CONTEXT_DIM)]


def get_init_inputs():
    return [DIM, CONTEXT_DIM, HEADS]
