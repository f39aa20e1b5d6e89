import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def triu_matmul_kernel(a_ptr, b_ptr, c_ptr, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # For upper-triangular A and B, C[i, j] only needs k in [i, j]: tiles below the
    # diagonal are all zero and the K loop is clipped to the band.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if pid_n * BLOCK_N + BLOCK_N > pid_m * BLOCK_M:
        k_lo = (pid_m * BLOCK_M) // BLOCK_K * BLOCK_K
        k_hi = tl.minimum(N, pid_n * BLOCK_N + BLOCK_N)
        for k0 in range(k_lo, k_hi, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            a = tl.load(a_ptr + rm[:, None] * N + ks[None, :], mask=(rm[:, None] < N) & (ks[None, :] < N), other=0.0)
            b = tl.load(b_ptr + ks[:, None] * N + rn[None, :], mask=(ks[:, None] < N) & (rn[None, :] < N), other=0.0)
            acc += tl.dot(a, b, input_precision="ieee")
    acc = tl.where(rm[:, None] <= rn[None, :], acc, 0.0)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < N) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a = a.contiguous()
        b = b.contiguous()
        n = a.shape[0]
        c = torch.empty((n, n), device=a.device, dtype=torch.float32)
        BM, BN, BK = 64, 64, 32
        triu_matmul_kernel[(triton.cdiv(n, BM), triton.cdiv(n, BN))](a, b, c, n, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK)
        return c
