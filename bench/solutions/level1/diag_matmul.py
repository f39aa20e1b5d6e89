import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_scale_kernel(d_ptr, b_ptr, c_ptr, M, stride, BLOCK: tl.constexpr):
    # diag(d) @ B never needs the N x N matrix: row i of B is scaled by d[i].
    row = tl.program_id(0)
    col_block = tl.program_id(1)
    cols = col_block * BLOCK + tl.arange(0, BLOCK)
    mask = cols < M
    scale = tl.load(d_ptr + row)
    b = tl.load(b_ptr + row * stride + cols, mask=mask, other=0.0)
    tl.store(c_ptr + row * stride + cols, b * scale, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, d: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        b = b.contiguous()
        n, m = b.shape
        c = torch.empty_like(b)
        BLOCK = 1024
        row_scale_kernel[(n, triton.cdiv(m, BLOCK))](d, b, c, m, b.stride(0), BLOCK=BLOCK)
        return c
