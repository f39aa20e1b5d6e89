import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def batch_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, C, HW, eps, BLOCK: tl.constexpr):
    # One program per channel: two passes over the channel's N*HW elements.
    c = tl.program_id(0)
    count = N * HW
    acc = tl.zeros([BLOCK], tl.float32)
    for n in range(0, N):
        base = x_ptr + (n * C + c) * HW
        for start in range(0, HW, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            acc += tl.load(base + offs, mask=offs < HW, other=0.0)
    mean = tl.sum(acc, axis=0) / count
    acc = tl.zeros([BLOCK], tl.float32)
    for n in range(0, N):
        base = x_ptr + (n * C + c) * HW
        for start in range(0, HW, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            x = tl.load(base + offs, mask=offs < HW, other=0.0)
            d = tl.where(offs < HW, x - mean, 0.0)
            acc += d * d
    inv = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / count + eps)
    scale = tl.load(w_ptr + c) * inv
    shift = tl.load(b_ptr + c) - mean * scale
    for n in range(0, N):
        base = (n * C + c) * HW
        for start in range(0, HW, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < HW
            x = tl.load(x_ptr + base + offs, mask=mask, other=0.0)
            tl.store(y_ptr + base + offs, x * scale + shift, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.BatchNorm2d(channels, eps=1e-5)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.2)
            self.norm.bias.normal_(0.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n, c, h, w = x.shape
        y = torch.empty_like(x)
        BLOCK = 1024
        batch_norm_kernel[(c,)](x, self.norm.weight, self.norm.bias, y, n, c, h * w, self.norm.eps, BLOCK=BLOCK)
        return y
