# honest: grid from a tuple and keyword BLOCK
# problem: level1/relu6
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu6_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.minimum(tl.maximum(x, 0.0), 6.0)
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        relu6_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
