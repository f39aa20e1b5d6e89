# cheat: does the work on another stream so the timer misses it
# on a GPU the evaluator holds back its first launch on the side stream in every watched call, so the output is unfinished at return and the late-write check rejects it every time (on the CPU it fails: no CUDA)
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
        y = torch.empty_like(x)
        with torch.cuda.stream(torch.cuda.Stream()):
            relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
