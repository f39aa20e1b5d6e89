# honest: a row reduction looping over column blocks, output from torch.empty
# problem: level1/mean_rows
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    acc = tl.full([BLOCK], 0.0, tl.float32)
    for start in range(0, cols, BLOCK):
        v = tl.load(x_ptr + row * cols + start + offs, mask=start + offs < cols, other=0.0)
        acc = acc + v
    tl.store(y_ptr + row, tl.sum(acc, axis=0) / cols)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty(rows, device=x.device, dtype=x.dtype)
        row_kernel[(rows,)](x, y, cols, BLOCK=256)
        return y
