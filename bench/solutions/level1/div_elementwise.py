import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def div_kernel(a_ptr, b_ptr, y_ptr, n_elements, n_cols, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    a = tl.load(a_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs, mask=mask, other=1.0)
    tl.store(y_ptr + offs, a / b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a = a.contiguous()
        b = b.contiguous()
        y = torch.empty_like(a)
        n = a.numel()
        BLOCK = 1024
        div_kernel[(triton.cdiv(n, BLOCK),)](a, b, y, n, a.shape[-1], BLOCK=BLOCK)
        return y
