# cheat: captures once and replays a CUDA graph
# static-only: it captures and replays its own kernel on every call: honest work, timed slower (on the CPU it fails: no CUDA)
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
    def forward(self, x):
        g = torch.cuda.CUDAGraph()
        y = torch.empty_like(x)
        with torch.cuda.graph(g):
            relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        g.replay()
        return y
