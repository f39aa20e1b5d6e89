import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_mid_kernel(x_ptr, y_ptr, C, I, BLOCK: tl.constexpr):
    # One program per (batch, block of inner positions); the softmax runs down the middle axis.
    b = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < I
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    for c in range(0, C):
        m = tl.maximum(m, tl.load(x_ptr + (b * C + c) * I + cols, mask=mask, other=0.0))
    s = tl.zeros([BLOCK], tl.float32)
    for c in range(0, C):
        s += tl.exp(tl.load(x_ptr + (b * C + c) * I + cols, mask=mask, other=0.0) - m)
    for c in range(0, C):
        x = tl.load(x_ptr + (b * C + c) * I + cols, mask=mask, other=0.0)
        tl.store(y_ptr + (b * C + c) * I + cols, tl.exp(x - m) / s, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        b, c, i = x.shape
        y = torch.empty_like(x)
        BLOCK = 128
        softmax_mid_kernel[(b, triton.cdiv(i, BLOCK))](x, y, c, i, BLOCK=BLOCK)
        return y
