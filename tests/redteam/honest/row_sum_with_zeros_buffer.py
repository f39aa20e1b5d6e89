# honest: accumulates into a `torch.zeros` buffer with atomics
# problem: level1/sum_rows
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def partial_sums(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    offs = chunk * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=0.0)
    tl.atomic_add(out_ptr + row, tl.sum(v, axis=0))


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        out = torch.zeros(rows, device=x.device, dtype=x.dtype)
        block = 256
        partial_sums[(rows, triton.cdiv(cols, block))](x, out, cols, BLOCK=block)
        return out
