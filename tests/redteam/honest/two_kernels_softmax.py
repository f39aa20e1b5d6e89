# honest: two kernels (row max and sum, then normalise) and a scratch buffer
# problem: level1/softmax
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_stats(x_ptr, max_ptr, sum_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    for start in range(0, cols, BLOCK):
        v = tl.load(x_ptr + row * cols + start + offs, mask=start + offs < cols, other=float("-inf"))
        m = tl.maximum(m, v)
    row_max = tl.max(m, axis=0)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, cols, BLOCK):
        v = tl.load(x_ptr + row * cols + start + offs, mask=start + offs < cols, other=float("-inf"))
        s += tl.exp(v - row_max)
    tl.store(max_ptr + row, row_max)
    tl.store(sum_ptr + row, tl.sum(s, axis=0))


@triton.jit
def normalise(x_ptr, y_ptr, max_ptr, sum_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = tl.load(max_ptr + row)
    s = tl.load(sum_ptr + row)
    for start in range(0, cols, BLOCK):
        mask = start + offs < cols
        v = tl.load(x_ptr + row * cols + start + offs, mask=mask, other=0.0)
        tl.store(y_ptr + row * cols + start + offs, tl.exp(v - m) / s, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        stats = torch.empty((2, rows), device=x.device, dtype=torch.float32)
        y = torch.empty_like(x)
        block = min(1024, triton.next_power_of_2(cols))
        row_stats[(rows,)](x, stats[0], stats[1], cols, BLOCK=block)
        normalise[(rows,)](x, y, stats[0], stats[1], cols, BLOCK=block)
        return y
