import torch
import torch.nn as nn
import triton
import triton.language as tl

KERNEL = 4
STRIDE = 2
PADDING = 1


@triton.jit
def pool1d_kernel(x_ptr, y_ptr, L, L_out, K: tl.constexpr, STRIDE: tl.constexpr, PAD: tl.constexpr, BLOCK: tl.constexpr):
    # One program per (sample*channel row, block of outputs); the window loop is unrolled.
    row = tl.program_id(0)
    j = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    out_mask = j < L_out
    acc = tl.full([BLOCK], float("-inf"), tl.float32)
    for t in tl.static_range(K):
        i = j * STRIDE - PAD + t
        ok = out_mask & (i >= 0) & (i < L)
        x = tl.load(x_ptr + row * L + i, mask=ok, other=float("-inf"))
        acc = tl.maximum(acc, x)
    tl.store(y_ptr + row * L_out + j, acc, mask=out_mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n, c, length = x.shape
        l_out = (length + 2 * PADDING - KERNEL) // STRIDE + 1
        y = torch.empty((n, c, l_out), device=x.device, dtype=x.dtype)
        BLOCK = 256
        pool1d_kernel[(n * c, triton.cdiv(l_out, BLOCK))](
            x, y, length, l_out, K=KERNEL, STRIDE=STRIDE, PAD=PADDING, BLOCK=BLOCK)
        return y
