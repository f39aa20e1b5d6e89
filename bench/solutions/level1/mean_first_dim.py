import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def column_mean_kernel(x_ptr, y_ptr, R, C, BLOCK: tl.constexpr):
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < C
    acc = tl.zeros([BLOCK], tl.float32)
    for r in range(0, R):
        acc += tl.load(x_ptr + r * C + cols, mask=mask, other=0.0)
    tl.store(y_ptr + cols, acc / R, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        r, c = x.shape
        y = torch.empty(c, device=x.device, dtype=x.dtype)
        BLOCK = 256
        column_mean_kernel[(triton.cdiv(c, BLOCK),)](x, y, r, c, BLOCK=BLOCK)
        return y
