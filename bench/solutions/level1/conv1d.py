import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def conv2d_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr,
    N, C, H, W, OC, OH, OW, C_PG, OC_PG, stride, pad, dil,
    KH: tl.constexpr, KW: tl.constexpr, HAS_BIAS: tl.constexpr,
    BLOCK_P: tl.constexpr, BLOCK_OC: tl.constexpr, BLOCK_C: tl.constexpr,
):
    # Implicit GEMM: a tile of output positions x output channels accumulates, for each
    # kernel tap, (positions x input channels) @ (input channels x output channels).
    pid_p = tl.program_id(0)
    pid_oc = tl.program_id(1)
    blocks_per_group = tl.cdiv(OC_PG, BLOCK_OC)
    g = pid_oc // blocks_per_group
    oc_local = (pid_oc % blocks_per_group) * BLOCK_OC + tl.arange(0, BLOCK_OC)
    oc_mask = oc_local < OC_PG
    oc = g * OC_PG + oc_local
    p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    p_mask = p < N * OH * OW
    n = p // (OH * OW)
    rem = p % (OH * OW)
    oh = rem // OW
    ow = rem % OW
    acc = tl.zeros((BLOCK_P, BLOCK_OC), dtype=tl.float32)
    for kh in tl.static_range(KH):
        ih = oh * stride - pad + kh * dil
        for kw in tl.static_range(KW):
            iw = ow * stride - pad + kw * dil
            pos_ok = p_mask & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            for c0 in range(0, C_PG, BLOCK_C):
                cs = c0 + tl.arange(0, BLOCK_C)
                c_ok = cs < C_PG
                ic = g * C_PG + cs
                xv = tl.load(x_ptr + ((n[:, None] * C + ic[None, :]) * H + ih[:, None]) * W + iw[:, None],
                             mask=pos_ok[:, None] & c_ok[None, :], other=0.0)
                wv = tl.load(w_ptr + ((oc[None, :] * C_PG + cs[:, None]) * KH + kh) * KW + kw,
                             mask=c_ok[:, None] & oc_mask[None, :], other=0.0)
                acc += tl.dot(xv, wv, input_precision="ieee")
    if HAS_BIAS:
        acc += tl.load(b_ptr + oc, mask=oc_mask, other=0.0)[None, :]
    y_off = (n[:, None] * OC + oc[None, :]) * (OH * OW) + (oh * OW + ow)[:, None]
    tl.store(y_ptr + y_off, acc, mask=p_mask[:, None] & oc_mask[None, :])


def conv2d(x, weight, bias, stride, padding, dilation, groups):
    x = x.contiguous()
    weight = weight.contiguous()
    n, c, h, w = x.shape
    oc, c_pg, kh, kw = weight.shape
    oh = (h + 2 * padding - dilation * (kh - 1) - 1) // stride + 1
    ow = (w + 2 * padding - dilation * (kw - 1) - 1) // stride + 1
    y = torch.empty((n, oc, oh, ow), device=x.device, dtype=torch.float32)
    oc_pg = oc // groups
    BLOCK_P, BLOCK_OC, BLOCK_C = 64, 32, 16
    grid = (triton.cdiv(n * oh * ow, BLOCK_P), groups * triton.cdiv(oc_pg, BLOCK_OC))
    conv2d_kernel[grid](
        x, weight, bias if bias is not None else weight, y,
        n, c, h, w, oc, oh, ow, c_pg, oc_pg, stride, padding, dilation,
        KH=kh, KW=kw, HAS_BIAS=bias is not None, BLOCK_P=BLOCK_P, BLOCK_OC=BLOCK_OC, BLOCK_C=BLOCK_C,
    )
    return y


def conv1d_padded(x, c):
    # A 1-D convolution is a 2-D one over a height-1 image; padding applies to width only,
    # so pad the sequence explicitly (zeros) and run the 2-D kernel without padding.
    p = c.padding[0]
    xp = torch.zeros((x.shape[0], x.shape[1], 1, x.shape[2] + 2 * p), device=x.device, dtype=x.dtype)
    xp[:, :, 0, p:p + x.shape[2]] = x
    return conv2d(xp, c.weight.unsqueeze(2), c.bias, c.stride[0], 0, c.dilation[0], c.groups)[:, :, 0, :]


class ModelNew(nn.Module):
    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.conv = nn.Conv1d(in_ch, out_ch, kernel_size=7, padding=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.conv
        return conv2d(x.unsqueeze(2), c.weight.unsqueeze(2), c.bias, c.stride[0], 0, c.dilation[0], c.groups)[:, :, 0, :] if c.padding[0] == 0 else conv1d_padded(x, c)
