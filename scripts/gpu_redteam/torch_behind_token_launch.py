# Red team (GPU): PyTorch does the work, reached through a built name, behind one token
# launch of its own kernel; the launch hooks see a kernel, only the ATen record sees relu.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def touch_kernel(p):
    tl.store(p, 1.0)


class ModelNew(nn.Module):
    def forward(self, x):
        scratch = torch.empty(1, device=x.device)
        touch_kernel[(1,)](scratch)
        return getattr(torch, "re" + "lu")(x)
