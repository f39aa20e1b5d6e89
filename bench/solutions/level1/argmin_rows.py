import torch
import torch.nn as nn
import triton
import triton.language as tl



@triton.jit
def argmin_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    # Track the best value and its first index per lane, then reduce across lanes.
    row = tl.program_id(0)
    best = tl.full([BLOCK], float("inf"), tl.float32)
    best_idx = tl.zeros([BLOCK], tl.int64)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=float("inf"))
        take = x < best
        best = tl.where(take, x, best)
        best_idx = tl.where(take, cols.to(tl.int64), best_idx)
    top = tl.min(best, axis=0)
    candidates = tl.where(best == top, best_idx, n_cols)
    tl.store(y_ptr + row, tl.min(candidates, axis=0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty(rows, device=x.device, dtype=torch.int64)
        BLOCK = min(1024, triton.next_power_of_2(cols))
        argmin_kernel[(rows,)](x, y, cols, x.stride(0), BLOCK=BLOCK)
        return y
