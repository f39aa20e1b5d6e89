import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _activate(z, ACT: tl.constexpr):
    # 0 identity, 1 ReLU, 2 GELU (erf), 3 GELU (tanh form), 4 SiLU, 5 sigmoid, 6 ReLU6,
    # 7 softplus (linear above 20, as PyTorch's)
    if ACT == 1:
        z = tl.maximum(z, 0.0)
    elif ACT == 2:
        z = 0.5 * z * (1.0 + tl.erf(z * 0.7071067811865476))
    elif ACT == 3:
        inner = 0.7978845608028654 * (z + 0.044715 * z * z * z)
        z = 0.5 * z * (1.0 + (2.0 * tl.sigmoid(2.0 * inner) - 1.0))
    elif ACT == 4:
        z = z * tl.sigmoid(z)
    elif ACT == 5:
        z = tl.sigmoid(z)
    elif ACT == 6:
        z = tl.minimum(tl.maximum(z, 0.0), 6.0)
    elif ACT == 7:
        z = tl.where(z > 20.0, z, tl.log(1.0 + tl.exp(tl.minimum(z, 20.0))))
    return z


@triton.jit
def linear_kernel(
    x_ptr, w_ptr, b_ptr, g_ptr, r_ptr, y_ptr, M, N, K, pre, post,
    XI, sx0, sx1, sxk, swn, swk, YI, sy0, sy1, syn, sr0, sr1, srn,
    HAS_BIAS: tl.constexpr, HAS_GAMMA: tl.constexpr, HAS_RES: tl.constexpr, ACT: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
):
    # y = act((x @ W^T + b) * pre) * post * gamma + residual, one output tile per program.
    # Row m of x sits at (m // XI) * sx0 + (m % XI) * sx1, row m of y (and of the residual)
    # at (m // YI) * sy0 + (m % YI) * sy1: transposed and channels-first layouts are read
    # and written in place.
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    x_row = (rm // XI) * sx0 + (rm % XI) * sx1
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        ks = k0 + rk
        x = tl.load(x_ptr + x_row[:, None] + ks[None, :] * sxk,
                    mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * swn + ks[:, None] * swk,
                    mask=(rn[None, :] < N) & (ks[:, None] < K), other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")
    if HAS_BIAS:
        acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    z = _activate(acc * pre, ACT) * post
    if HAS_GAMMA:
        z = z * tl.load(g_ptr + rn, mask=rn < N, other=0.0)[None, :]
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    if HAS_RES:
        r_row = (rm // YI) * sr0 + (rm % YI) * sr1
        z += tl.load(r_ptr + r_row[:, None] + rn[None, :] * srn, mask=mask, other=0.0)
    y_row = (rm // YI) * sy0 + (rm % YI) * sy1
    tl.store(y_ptr + y_row[:, None] + rn[None, :] * syn, z, mask=mask)


def linear(x, weight, bias=None, act=0, pre=1.0, post=1.0, gamma=None, residual=None, out=None):
    """act((x @ weight^T + bias) * pre) * post * gamma + residual over the last dim of x."""
    K = x.shape[-1]
    x2 = x.reshape(-1, K)
    M, N = x2.shape[0], weight.shape[0]
    if out is None:
        out = torch.empty((*x.shape[:-1], N), device=x.device, dtype=torch.float32)
    y2 = out.reshape(M, N)
    r2 = residual.reshape(M, N) if residual is not None else y2
    BM, BN, BK = 64, 64, 32
    grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))
    linear_kernel[grid](
        x2, weight, bias if bias is not None else weight, gamma if gamma is not None else weight, r2, y2,
        M, N, K, pre, post,
        M, 0, x2.stride(0), x2.stride(1), weight.stride(0), weight.stride(1),
        M, 0, y2.stride(0), y2.stride(1), 0, r2.stride(0), r2.stride(1),
        HAS_BIAS=bias is not None, HAS_GAMMA=gamma is not None, HAS_RES=residual is not None, ACT=act,
        BM=BM, BN=BN, BK=BK,
    )
    return out


class ModelNew(nn.Module):
    """Each layer is one GEMM whose epilogue adds the bias, scales by 2.5 and applies GELU."""

    def __init__(self, dim: int, depth: int):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(dim, dim) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = linear(x, layer.weight, layer.bias, act=2, pre=2.5)
        return x
