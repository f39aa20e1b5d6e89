import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_bias_kernel(x_ptr, bias_ptr, out_ptr, n_elements, n_cols, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    b = tl.load(bias_ptr + offsets % n_cols, mask=mask)
    tl.store(out_ptr + offsets, x * scale + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, cols: int, scale: float):
        super().__init__()
        self.scale = scale
        # Same shape and creation order as the reference, so the seeded weights agree.
        self.bias = nn.Parameter(torch.randn(cols))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        BLOCK = 1024
        scale_bias_kernel[(triton.cdiv(n, BLOCK),)](x, self.bias, out, n, x.shape[-1], self.scale, BLOCK=BLOCK)
        return out
