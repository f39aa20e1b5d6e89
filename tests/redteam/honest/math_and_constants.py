# honest: uses the math module, module-level constants and a dtype table
# problem: level1/relu
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_SIZE = 1024
DTYPES = {torch.float32: tl.float32}


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        assert x.dtype in DTYPES
        y = torch.empty_like(x)
        blocks = math.ceil(x.numel() / BLOCK_SIZE)
        relu_kernel[(blocks,)](x, y, x.numel(), BLOCK=BLOCK_SIZE)
        return y
