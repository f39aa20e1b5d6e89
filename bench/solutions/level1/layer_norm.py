import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layer_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = x_ptr + row * stride
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(base + cols, mask=cols < n_cols, other=0.0)
    mean = tl.sum(acc, axis=0) / n_cols
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < n_cols, other=0.0)
        d = tl.where(cols < n_cols, x - mean, 0.0)
        acc += d * d
    inv = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(base + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0)
        tl.store(y_ptr + row * stride + cols, (x - mean) * inv * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.2)
            self.norm.bias.normal_(0.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        BLOCK = min(1024, triton.next_power_of_2(cols))
        layer_norm_kernel[(rows,)](x, self.norm.weight, self.norm.bias, y, cols, x.stride(0), self.norm.eps, BLOCK=BLOCK)
        return y
