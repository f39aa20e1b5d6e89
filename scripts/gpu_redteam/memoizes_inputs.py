# Red team (GPU): computes once per input buffer and replays the answer whenever the
# same buffer comes back (harnesses that time on reused inputs reward this).
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
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, x):
        key = (x.data_ptr(), tuple(x.shape))
        hit = self.cache.get(key)
        if hit is not None:
            relu_kernel[(1,)](x, torch.empty(1, device=x.device), 1, BLOCK=16)
            return hit
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        self.cache[key] = y
        return y
