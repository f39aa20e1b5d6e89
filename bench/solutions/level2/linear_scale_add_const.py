import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def fused_linear_kernel(
    x_ptr, w_ptr, b_ptr, cs_ptr, sh_ptr, res_ptr, y_ptr, M, N, K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    # y = epilogue(x @ W^T + b): the whole chain is applied to the tile in registers.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + rk
        x = tl.load(x_ptr + rm[:, None] * K + ks[None, :], mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + ks[:, None], mask=(rn[None, :] < N) & (ks[:, None] < K), other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    y = acc + tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    y = y * 1.7
    y = y + 0.25
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], y, mask=mask)



class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        m, k = x.shape
        n = self.linear.weight.shape[0]
        y = torch.empty((m, n), device=x.device, dtype=torch.float32)
        BM, BN, BK = 64, 64, 32
        fused_linear_kernel[(triton.cdiv(m, BM), triton.cdiv(n, BN))](
            x, self.linear.weight, self.linear.bias, self.linear.bias, self.linear.bias, x, y, m, n, k,
            BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK)
        return y
