import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_middle_kernel(x_ptr, y_ptr, R, I, BLOCK: tl.constexpr):
    # One program per (batch, block of inner columns); walk the reduced axis.
    b = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < I
    acc = tl.zeros([BLOCK], tl.float32)
    for r in range(0, R):
        acc += tl.load(x_ptr + (b * R + r) * I + cols, mask=mask, other=0.0)
    tl.store(y_ptr + b * I + cols, acc, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        b, r, i = x.shape
        y = torch.empty((b, i), device=x.device, dtype=x.dtype)
        BLOCK = 256
        sum_middle_kernel[(b, triton.cdiv(i, BLOCK))](x, y, r, i, BLOCK=BLOCK)
        return y
