import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def amin_mid_kernel(x_ptr, y_ptr, R, I, BLOCK: tl.constexpr):
    b = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < I
    best = tl.full([BLOCK], float("inf"), tl.float32)
    for r in range(0, R):
        best = tl.minimum(best, tl.load(x_ptr + (b * R + r) * I + cols, mask=mask, other=float("inf")))
    tl.store(y_ptr + b * I + cols, best, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        b, r, i = x.shape
        y = torch.empty((b, i), device=x.device, dtype=x.dtype)
        BLOCK = 256
        amin_mid_kernel[(b, triton.cdiv(i, BLOCK))](x, y, r, i, BLOCK=BLOCK)
        return y
