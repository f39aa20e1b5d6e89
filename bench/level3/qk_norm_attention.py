import torch
import torch.nn as nn

BATCH = 16
SEQ = 1024
DIM = 1024
HEADS = 8


class Model(nn.Module):
    """Causal self-attention with query-key normalisation: an RMS norm (learned scale) over
    each head's queries and keys before the dot products, which keeps attention logits
    bounded in large models."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.q_norm = nn.RMSNorm(head_dim, eps=1e-6)
        self.k_norm = nn.RMSNorm(head_dim, eps=1e-6)
        with torch.no_grad():  # learned scales above 1 give logits of a few units, as in a trained model
            self.q_norm.weight.uniform_(1.5, 2.5)
            self.k_norm.weight.uniform_(1.5, 2.5)
        self.out = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k = self.q_norm(q), self.k_norm(k)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(a.transpose(1, 2).reshape(b, n, d))


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM)]


def get_init_inputs():
    return [DIM, HEADS]
