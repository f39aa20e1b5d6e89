# honest: passes strides and a 2-D grid; the row vector is broadcast in the kernel
# problem: level1/add_row_broadcast
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_rows(a_ptr, b_ptr, c_ptr, cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < cols
    a = tl.load(a_ptr + row * stride_row + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    tl.store(c_ptr + row * cols + offs, a + b, mask=mask)


class ModelNew(nn.Module):
    def forward(self, a, b):
        rows, cols = a.shape
        c = torch.empty((rows, cols), device=a.device, dtype=a.dtype)
        block = 256
        add_rows[(rows, triton.cdiv(cols, block))](a, b, c, cols, a.stride(0), BLOCK=block)
        return c
