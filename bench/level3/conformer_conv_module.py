import torch
import torch.nn as nn

BATCH = 16
SEQ = 1024
DIM = 512
KERNEL = 31


class Model(nn.Module):
    """A Conformer convolution module (speech): LayerNorm, pointwise conv to 2x channels
    with a GLU, depthwise conv along time, batch norm (inference mode), SiLU, pointwise
    conv, residual add. Input is (batch, time, channels)."""

    def __init__(self, dim: int, kernel: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.pw1 = nn.Conv1d(dim, 2 * dim, 1)
        self.dw = nn.Conv1d(dim, dim, kernel, padding=kernel // 2, groups=dim)
        self.bn = nn.BatchNorm1d(dim)
        with torch.no_grad():
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)
            self.bn.running_mean.uniform_(-0.2, 0.2)
            self.bn.running_var.uniform_(0.1, 0.5)
        self.pw2 = nn.Conv1d(dim, dim, 1)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x).transpose(1, 2)
        y = torch.nn.functional.glu(self.pw1(y), dim=1)
        y = torch.nn.functional.silu(self.bn(self.dw(y)))
        return x + self.pw2(y).transpose(1, 2)


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM)]


def get_init_inputs():
    return [DIM, KERNEL]
