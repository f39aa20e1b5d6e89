# Honest (GPU): runs its kernel on a side stream of its own, ordered after the caller's
# stream and joined back to it before forward returns. The evaluator's hold on other
# streams makes it wait in watched calls; it must still end `correct`.
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
        self.side = None

    def forward(self, x):
        if self.side is None:
            self.side = torch.cuda.Stream()
        y = torch.empty_like(x)
        caller = torch.cuda.current_stream()
        self.side.wait_stream(caller)
        with torch.cuda.stream(self.side):
            relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        caller.wait_stream(self.side)
        return y
