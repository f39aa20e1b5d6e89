import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sample_norm_kernel(x_ptr, y_ptr, size, eps, BLOCK: tl.constexpr):
    s = tl.program_id(0)
    base = s * size
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, size, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + base + offs, mask=offs < size, other=0.0)
    mean = tl.sum(acc, axis=0) / size
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, size, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        d = tl.where(offs < size, tl.load(x_ptr + base + offs, mask=offs < size, other=0.0) - mean, 0.0)
        acc += d * d
    inv = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / size + eps)
    for start in range(0, size, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < size
        tl.store(y_ptr + base + offs, (tl.load(x_ptr + base + offs, mask=mask, other=0.0) - mean) * inv, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        size = x[0].numel()
        sample_norm_kernel[(x.shape[0],)](x, y, size, 1e-5, BLOCK=1024)
        return y
