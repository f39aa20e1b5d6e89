import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def instance_norm_kernel(x_ptr, y_ptr, HW, eps, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    base = pid * HW
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, HW, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + base + offs, mask=offs < HW, other=0.0)
    mean = tl.sum(acc, axis=0) / HW
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, HW, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + offs, mask=offs < HW, other=0.0)
        d = tl.where(offs < HW, x - mean, 0.0)
        acc += d * d
    inv = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / HW + eps)
    for start in range(0, HW, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < HW
        x = tl.load(x_ptr + base + offs, mask=mask, other=0.0)
        tl.store(y_ptr + base + offs, (x - mean) * inv, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.InstanceNorm2d(channels, eps=1e-5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n, c, h, w = x.shape
        y = torch.empty_like(x)
        BLOCK = 1024
        instance_norm_kernel[(n * c,)](x, y, h * w, self.norm.eps, BLOCK=BLOCK)
        return y
