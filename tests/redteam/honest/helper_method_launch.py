# honest: launches through a method of ModelNew
# problem: level1/relu
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def _grid(self, n: int) -> tuple:
        return (triton.cdiv(n, 1024),)

    def _run(self, x):
        y = torch.empty_like(x)
        relu_kernel[self._grid(x.numel())](x, y, x.numel(), BLOCK=1024)
        return y

    def forward(self, x):
        return self._run(x)
