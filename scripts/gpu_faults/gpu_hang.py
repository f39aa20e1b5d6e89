# GPU fault: the kernel spins forever on a flag nobody sets.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, flag_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    spins = 0
    while tl.load(flag_ptr, volatile=True) == 0:
        spins += 1
    tl.store(y_ptr + offs, tl.maximum(x, 0.0) + spins * 0, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        flag = torch.zeros(1, dtype=torch.int32, device=x.device)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, flag, x.numel(), BLOCK=1024)
        return y
