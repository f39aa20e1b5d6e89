import torch
import torch.nn as nn
import triton
import triton.language as tl



@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def prod_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.full([BLOCK], 1.0, tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=1.0)
        acc = acc * x
    tl.store(y_ptr + row, tl.reduce(acc, 0, _mul))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty(rows, device=x.device, dtype=x.dtype)
        BLOCK = min(1024, triton.next_power_of_2(cols))
        prod_kernel[(rows,)](x, y, cols, x.stride(0), BLOCK=BLOCK)
        return y
