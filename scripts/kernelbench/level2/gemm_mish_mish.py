"""Our answer to KernelBench's level2/29_Matmul_Mish_Mish.py
(`ModelNew(in_features, out_features)`):
a linear layer, then Mish twice.
One Triton kernel: the tile of x @ W^T is accumulated in IEEE fp32 (a KernelBench file has
no manifest, so it is held to fp32's default tolerance) and the epilogue runs on it in
registers before the one store."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _sigmoid(y):
    return 1.0 / (1.0 + tl.exp(-y))


@triton.jit
def _tanh(y):
    return 2.0 * _sigmoid(2.0 * y) - 1.0


@triton.jit
def _mish(y):
    softplus = tl.where(y > 20.0, y, tl.log(1.0 + tl.exp(tl.minimum(y, 20.0))))
    return y * _tanh(softplus)


@triton.jit
def linear_epilogue_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, s0, s1,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + rk
        x = tl.load(x_ptr + rm[:, None] * K + ks[None, :],
                    mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + ks[:, None],
                    mask=(rn[None, :] < N) & (ks[:, None] < K), other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")
    y = acc + tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    y = _mish(_mish(y))
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], y, mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        m, k = x.shape
        w = self.linear.weight
        n = w.shape[0]
        y = torch.empty((m, n), device=x.device, dtype=torch.float32)
        BM, BN, BK = 64, 64, 32
        linear_epilogue_kernel[(triton.cdiv(m, BM), triton.cdiv(n, BN))](
            x, w, self.linear.bias, y, m, n, k,
            0.0, 0.0,
            BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK)
        return y
