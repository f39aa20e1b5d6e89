# cheat: the whole transformer layer in PyTorch, its last elementwise step (the output scale of the SwiGLU FFN) done by a Triton kernel so that the kernel's output is the answer
# problem: level3/swiglu_ffn
# runtime: rejected [runtime-share-model] the kernel's scale is a sliver of the work
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, s, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * s, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        h = self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x))
        y = torch.empty_like(h)
        scale_kernel[(triton.cdiv(h.numel(), 1024),)](h, y, h.numel(), 4.0, BLOCK=1024)
        return y
