import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def fused_conv_kernel(
    x_ptr, w_ptr, b_ptr, cs_ptr, sh_ptr, res_ptr, y_ptr,
    N, C, H, W, OC, OH, OW, pad,
    KH: tl.constexpr, KW: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_OC: tl.constexpr, BLOCK_C: tl.constexpr,
):
    # Implicit-GEMM convolution (stride 1) with the chain applied to the output tile.
    pid_p = tl.program_id(0)
    oc = tl.program_id(1) * BLOCK_OC + tl.arange(0, BLOCK_OC)
    oc_mask = oc < OC
    p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    p_mask = p < N * OH * OW
    n = p // (OH * OW)
    rem = p % (OH * OW)
    oh = rem // OW
    ow = rem % OW
    acc = tl.zeros((BLOCK_P, BLOCK_OC), dtype=tl.float32)
    for kh in tl.static_range(KH):
        ih = oh - pad + kh
        for kw in tl.static_range(KW):
            iw = ow - pad + kw
            ok = p_mask & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            for c0 in range(0, C, BLOCK_C):
                cs = c0 + tl.arange(0, BLOCK_C)
                c_ok = cs < C
                xv = tl.load(x_ptr + ((n[:, None] * C + cs[None, :]) * H + ih[:, None]) * W + iw[:, None],
                             mask=ok[:, None] & c_ok[None, :], other=0.0)
                wv = tl.load(w_ptr + ((oc[None, :] * C + cs[:, None]) * KH + kh) * KW + kw,
                             mask=c_ok[:, None] & oc_mask[None, :], other=0.0)
                acc += tl.dot(xv, wv, input_precision="ieee")
    mask = p_mask[:, None] & oc_mask[None, :]
    off = (n[:, None] * OC + oc[None, :]) * (OH * OW) + (oh * OW + ow)[:, None]
    y = acc + tl.load(b_ptr + oc, mask=oc_mask, other=0.0)[None, :]
    y = tl.sigmoid(y)
    y = y + tl.load(res_ptr + off, mask=mask, other=0.0)
    y = 2.0 * tl.sigmoid(2.0 * y) - 1.0
    tl.store(y_ptr + off, y, mask=mask)


@triton.jit
def max_pool2_kernel(y_ptr, out_ptr, H, W, OH, OW, BLOCK: tl.constexpr):
    plane = tl.program_id(0)
    oh = tl.program_id(1)
    ow = tl.program_id(2) * BLOCK + tl.arange(0, BLOCK)
    mask = ow < OW
    best = tl.full([BLOCK], float("-inf"), tl.float32)
    for dh in tl.static_range(2):
        for dw in tl.static_range(2):
            v = tl.load(y_ptr + (plane * H + oh * 2 + dh) * W + ow * 2 + dw, mask=mask, other=float("-inf"))
            best = tl.maximum(best, v)
    tl.store(out_ptr + (plane * OH + oh) * OW + ow, best, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n, c, h, w = x.shape
        weight = self.conv.weight.contiguous()
        oc = weight.shape[0]
        y = torch.empty((n, oc, h, w), device=x.device, dtype=torch.float32)
        BLOCK_P, BLOCK_OC, BLOCK_C = 64, 32, 16
        fused_conv_kernel[(triton.cdiv(n * h * w, BLOCK_P), triton.cdiv(oc, BLOCK_OC))](
            x, weight, self.conv.bias, self.conv.bias, self.conv.bias, residual.contiguous(), y, n, c, h, w, oc, h, w, 1,
            KH=3, KW=3, BLOCK_P=BLOCK_P, BLOCK_OC=BLOCK_OC, BLOCK_C=BLOCK_C)
        out = torch.empty((n, oc, h // 2, w // 2), device=x.device, dtype=torch.float32)
        max_pool2_kernel[(n * oc, h // 2, triton.cdiv(w // 2, 64))](y, out, h, w, h // 2, w // 2, BLOCK=64)
        return out
