import torch
import torch.nn as nn

BATCH = 8
SEQ = 512
MEMORY = 512
DIM = 1024
HEADS = 16
HIDDEN = 4096


class Model(nn.Module):
    """A pre-norm encoder-decoder transformer's decoder layer: causal self-attention,
    cross-attention to the encoder's output, and a ReLU feed-forward network, each
    pre-normed and residual."""

    def __init__(self, dim: int, heads: int, hidden: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.self_qkv = nn.Linear(dim, 3 * dim)
        self.self_out = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.cross_q = nn.Linear(dim, dim)
        self.cross_kv = nn.Linear(dim, 2 * dim)
        self.cross_out = nn.Linear(dim, dim)
        with torch.no_grad():  # sharper attention, as a trained model's: logits of unit-ish spread
            self.self_qkv.weight[: 2 * dim].mul_(3.0)
            self.cross_q.weight.mul_(3.0)
            self.cross_kv.weight[:dim].mul_(3.0)
        self.norm3 = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def split(self, t: torch.Tensor) -> torch.Tensor:
        b, n, d = t.shape
        return t.reshape(b, n, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.self_qkv(self.norm1(x)).chunk(3, dim=-1)
        a = torch.nn.functional.scaled_dot_product_attention(self.split(q), self.split(k), self.split(v),
                                                             is_causal=True)
        x = x + self.self_out(a.transpose(1, 2).reshape(b, n, d))
        k, v = self.cross_kv(memory).chunk(2, dim=-1)
        a = torch.nn.functional.scaled_dot_product_attention(self.split(self.cross_q(self.norm2(x))),
                                                             self.split(k), self.split(v))
        x = x + self.cross_out(a.transpose(1, 2).reshape(b, n, d))
        return x + self.down(torch.relu(self.up(self.norm3(x))))


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM), torch.randn(BATCH, MEMORY, DIM)]


def get_init_inputs():
    return [DIM, HEADS, HIDDEN]
