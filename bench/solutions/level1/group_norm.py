import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def group_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, C, HW, CPG, eps, BLOCK: tl.constexpr):
    # One program per (sample, group); the group's channels are contiguous in memory.
    pid = tl.program_id(0)
    groups = C // CPG
    n = pid // groups
    g = pid % groups
    base = (n * C + g * CPG) * HW
    size = CPG * HW
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, size, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + base + offs, mask=offs < size, other=0.0)
    mean = tl.sum(acc, axis=0) / size
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, size, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + offs, mask=offs < size, other=0.0)
        d = tl.where(offs < size, x - mean, 0.0)
        acc += d * d
    inv = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / size + eps)
    for start in range(0, size, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < size
        ch = g * CPG + offs // HW
        x = tl.load(x_ptr + base + offs, mask=mask, other=0.0)
        w = tl.load(w_ptr + ch, mask=mask, other=0.0)
        b = tl.load(b_ptr + ch, mask=mask, other=0.0)
        tl.store(y_ptr + base + offs, (x - mean) * inv * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, groups: int, channels: int):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.2)
            self.norm.bias.normal_(0.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n, c, h, w = x.shape
        y = torch.empty_like(x)
        BLOCK = 1024
        group_norm_kernel[(n * self.norm.num_groups,)](x, self.norm.weight, self.norm.bias, y, c, h * w, c // self.norm.num_groups, self.norm.eps, BLOCK=BLOCK)
        return y
