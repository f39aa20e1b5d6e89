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


@triton.jit
def norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, N, sx, sy, eps,
                HAS_W: tl.constexpr, HAS_B: tl.constexpr, RMS: tl.constexpr, BLOCK: tl.constexpr):
    # LayerNorm (or RMSNorm) of one row per program; the whole row sits in registers.
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * sx + cols, mask=mask, other=0.0)
    if RMS:
        d = x
    else:
        d = tl.where(mask, x - tl.sum(x, axis=0) / N, 0.0)
    y = d / tl.sqrt(tl.sum(d * d, axis=0) / N + eps)
    if HAS_W:
        y = y * tl.load(w_ptr + cols, mask=mask, other=0.0)
    if HAS_B:
        y = y + tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * sy + cols, y, mask=mask)


def norm(x, weight, bias, eps, rms=False):
    N = x.shape[-1]
    x2 = x.reshape(-1, N)
    if x2.stride(1) != 1:
        x2 = x2.contiguous()
    y = torch.empty((x2.shape[0], N), device=x.device, dtype=torch.float32)
    norm_kernel[(x2.shape[0],)](
        x2, weight if weight is not None else x2, bias if bias is not None else x2, y, N, x2.stride(0), y.stride(0),
        eps, HAS_W=weight is not None, HAS_B=bias is not None, RMS=rms, BLOCK=triton.next_power_of_2(N),
    )
    return y.reshape(x.shape)


class ModelNew(nn.Module):
    """Mixed: the 7x7 depthwise conv stays in PyTorch (a few percent of the block's work);
    LayerNorm, the 4x GEMM + GELU and the down GEMM are Triton, the down GEMM's epilogue
    applying the layer scale and adding the residual straight into the channels-first output."""

    def __init__(self, channels: int):
        super().__init__()
        self.dw = nn.Conv2d(channels, channels, 7, padding=3, groups=channels)
        self.norm = nn.LayerNorm(channels, eps=1e-6)
        self.up = nn.Linear(channels, 4 * channels)
        self.down = nn.Linear(4 * channels, channels)
        self.gamma = nn.Parameter(torch.full((channels,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        B, C, H, W = x.shape
        y = self.dw(x).permute(0, 2, 3, 1).contiguous()
        h = norm(y, self.norm.weight, self.norm.bias, self.norm.eps)
        h = linear(h, self.up.weight, self.up.bias, act=2).reshape(B * H * W, 4 * C)
        out = torch.empty_like(x)
        M, K, HW = B * H * W, 4 * C, H * W
        BM, BN, BK = 64, 64, 32
        # Row (b, hw) of the result lands at b*C*HW + hw, channel c at + c*HW.
        linear_kernel[(triton.cdiv(M, BM), triton.cdiv(C, BN))](
            h, self.down.weight, self.down.bias, self.gamma, x, out, M, C, K, 1.0, 1.0,
            M, 0, h.stride(0), 1, self.down.weight.stride(0), 1,
            HW, C * HW, 1, HW, C * HW, 1, HW,
            HAS_BIAS=True, HAS_GAMMA=True, HAS_RES=True, ACT=0, BM=BM, BN=BN, BK=BK,
        )
        return out
