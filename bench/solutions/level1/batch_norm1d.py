import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def batch_norm1d_kernel(x_ptr, w_ptr, b_ptr, y_ptr, B, F, eps, BLOCK: tl.constexpr):
    # One program per block of features; two passes down the batch.
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < F
    acc = tl.zeros([BLOCK], tl.float32)
    for r in range(0, B):
        acc += tl.load(x_ptr + r * F + cols, mask=mask, other=0.0)
    mean = acc / B
    acc = tl.zeros([BLOCK], tl.float32)
    for r in range(0, B):
        d = tl.load(x_ptr + r * F + cols, mask=mask, other=0.0) - mean
        acc += d * d
    inv = 1.0 / tl.sqrt(acc / B + eps)
    scale = tl.load(w_ptr + cols, mask=mask, other=0.0) * inv
    shift = tl.load(b_ptr + cols, mask=mask, other=0.0) - mean * scale
    for r in range(0, B):
        x = tl.load(x_ptr + r * F + cols, mask=mask, other=0.0)
        tl.store(y_ptr + r * F + cols, x * scale + shift, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.norm = nn.BatchNorm1d(features, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.2)
            self.norm.bias.normal_(0.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        b, f = x.shape
        y = torch.empty_like(x)
        BLOCK = 128
        batch_norm1d_kernel[(triton.cdiv(f, BLOCK),)](x, self.norm.weight, self.norm.bias, y, b, f, self.norm.eps, BLOCK=BLOCK)
        return y
