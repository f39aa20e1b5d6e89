import torch
import torch.nn as nn

TOKENS = 8192
DIM = 1024
HIDDEN = 2048
EXPERTS = 8
TOP_K = 2


class Model(nn.Module):
    """A mixture-of-experts feed-forward layer: a linear router picks the TOP_K best of
    EXPERTS SwiGLU experts per token, their outputs are mixed with the renormalised softmax
    weights of the chosen experts. Experts' weights are stacked in single tensors."""

    def __init__(self, dim: int, hidden: int, experts: int, top_k: int):
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(dim, experts, bias=False)
        self.w_gate = nn.Parameter(torch.randn(experts, dim, hidden) / dim ** 0.5)
        self.w_up = nn.Parameter(torch.randn(experts, dim, hidden) / dim ** 0.5)
        self.w_down = nn.Parameter(torch.randn(experts, hidden, dim) / hidden ** 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(self.router(x), dim=-1)
        weight, chosen = probs.topk(self.top_k, dim=-1)
        weight = weight / weight.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(x)
        for e in range(self.w_gate.shape[0]):
            token, slot = (chosen == e).nonzero(as_tuple=True)
            h = x[token]
            y = (torch.nn.functional.silu(h @ self.w_gate[e]) * (h @ self.w_up[e])) @ self.w_down[e]
            out.index_add_(0, token, y * weight[token, slot, None])
        return out


def get_inputs():
    return [torch.randn(TOKENS, DIM)]


def get_init_inputs():
    return [DIM, HIDDEN, EXPERTS, TOP_K]
