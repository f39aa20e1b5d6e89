# honest: flattens, makes contiguous and reshapes around the kernel
# problem: level1/relu
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        flat = x.contiguous().view(-1)
        out = torch.empty_like(flat)
        n = flat.numel()
        relu_kernel[(triton.cdiv(n, 512),)](flat, out, n, BLOCK=512)
        return out.reshape(x.shape)
