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
def conv2d_kernel(
    x_ptr, w_ptr, b_ptr, g_ptr, beta_ptr, mean_ptr, var_ptr, add_ptr, r_ptr, y_ptr,
    N, C, H, W, OC, OCT, OC0, OH, OW, KH, KW, stride, pad_h, pad_w, dil, eps, pre, post,
    HAS_BIAS: tl.constexpr, HAS_BN: tl.constexpr, HAS_ADD: tl.constexpr, HAS_RES: tl.constexpr,
    ACT: tl.constexpr, RELU_OUT: tl.constexpr, BP: tl.constexpr, BOC: tl.constexpr, BC: tl.constexpr,
):
    # Implicit-GEMM convolution over NCHW: a tile of output pixels (rows) by output channels
    # (columns), accumulated over input channels for each kernel tap; padding is masked.
    # Epilogue: bias, inference batch norm, a per-(image, channel) addition, activation,
    # residual, ReLU: y = relu?(act((conv + bias) * bn + add) * pre) * post + residual). The
    # output may be channels OC0.. of a tensor of OCT channels (a concatenation, written in place).
    pid_p = tl.program_id(0)
    pid_c = tl.program_id(1)
    rp = pid_p * BP + tl.arange(0, BP)
    roc = pid_c * BOC + tl.arange(0, BOC)
    P = OH * OW
    n = rp // P
    ohw = rp % P
    oh = ohw // OW
    ow = ohw % OW
    pmask = rp < N * P
    omask = roc < OC
    acc = tl.zeros((BP, BOC), dtype=tl.float32)
    for kh in range(0, KH):
        for kw in range(0, KW):
            ih = oh * stride - pad_h + kh * dil
            iw = ow * stride - pad_w + kw * dil
            inb = pmask & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            xbase = n * C * H * W + ih * W + iw
            for c0 in range(0, C, BC):
                rc = c0 + tl.arange(0, BC)
                x = tl.load(x_ptr + xbase[:, None] + rc[None, :] * H * W, mask=inb[:, None] & (rc[None, :] < C),
                            other=0.0)
                w = tl.load(w_ptr + roc[None, :] * C * KH * KW + rc[:, None] * KH * KW + kh * KW + kw,
                            mask=omask[None, :] & (rc[:, None] < C), other=0.0)
                acc += tl.dot(x, w, input_precision="ieee")
    if HAS_BIAS:
        acc += tl.load(b_ptr + roc, mask=omask, other=0.0)[None, :]
    if HAS_BN:
        scale = tl.load(g_ptr + roc, mask=omask, other=1.0) / tl.sqrt(tl.load(var_ptr + roc, mask=omask, other=1.0) + eps)
        shift = tl.load(beta_ptr + roc, mask=omask, other=0.0) - tl.load(mean_ptr + roc, mask=omask, other=0.0) * scale
        acc = acc * scale[None, :] + shift[None, :]
    mask = pmask[:, None] & omask[None, :]
    if HAS_ADD:
        acc += tl.load(add_ptr + n[:, None] * OC + roc[None, :], mask=mask, other=0.0)
    z = _activate(acc * pre, ACT) * post
    if HAS_RES:
        z += tl.load(r_ptr + n[:, None] * OC * P + roc[None, :] * P + ohw[:, None], mask=mask, other=0.0)
    out = n[:, None] * OCT * P + (OC0 + roc[None, :]) * P + ohw[:, None]
    if RELU_OUT:
        z = tl.maximum(z, 0.0)
    tl.store(y_ptr + out, z, mask=mask)


def conv2d(x, weight, bias=None, bn=None, stride=1, padding=(0, 0), dilation=1, add=None, act=0, pre=1.0,
           post=1.0, residual=None, relu_out=False, out_size=None, out=None, out_channel=0):
    """A dense (groups=1) convolution of NCHW `x` with its epilogue; `bn` an inference
    BatchNorm module; `out_size` overrides the output's (height, width) (causal padding);
    `out`/`out_channel`: write into channels out_channel.. of a larger tensor."""
    x = x.contiguous()
    N, C, H, W = x.shape
    OC, _, KH, KW = weight.shape
    ph, pw = padding
    if out_size is None:
        out_size = ((H + 2 * ph - dilation * (KH - 1) - 1) // stride + 1,
                    (W + 2 * pw - dilation * (KW - 1) - 1) // stride + 1)
    OH, OW = out_size
    y = out if out is not None else torch.empty((N, OC, OH, OW), device=x.device, dtype=torch.float32)
    BP, BOC, BC = 64, 32, 32
    dummy = weight
    grid = (triton.cdiv(N * OH * OW, BP), triton.cdiv(OC, BOC))
    conv2d_kernel[grid](
        x, weight, bias if bias is not None else dummy,
        bn.weight if bn is not None else dummy, bn.bias if bn is not None else dummy,
        bn.running_mean if bn is not None else dummy, bn.running_var if bn is not None else dummy,
        add if add is not None else dummy, residual.contiguous() if residual is not None else dummy, y,
        N, C, H, W, OC, y.shape[1], out_channel, OH, OW, KH, KW, stride, ph, pw, dilation, bn.eps if bn is not None else 0.0, pre, post,
        HAS_BIAS=bias is not None, HAS_BN=bn is not None, HAS_ADD=add is not None, HAS_RES=residual is not None,
        ACT=act, RELU_OUT=relu_out, BP=BP, BOC=BOC, BC=BC,
    )
    return y


def calibrated(bn: nn.Module) -> nn.Module:
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
        bn.running_mean.uniform_(-0.2, 0.2)
        bn.running_var.uniform_(0.1, 0.5)
    return bn


class ModelNew(nn.Module):
    """The strided projection first (its batch norm fused), then the strided 3x3 conv and the
    3x3 conv whose epilogue adds the projection and applies the last ReLU."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=2, padding=1, bias=False)
        self.bn1 = calibrated(nn.BatchNorm2d(out_channels))
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = calibrated(nn.BatchNorm2d(out_channels))
        self.proj = nn.Conv2d(in_channels, out_channels, 1, stride=2, bias=False)
        self.bn_proj = calibrated(nn.BatchNorm2d(out_channels))
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = conv2d(x, self.proj.weight, bn=self.bn_proj, stride=2)
        y = conv2d(x, self.conv1.weight, bn=self.bn1, stride=2, padding=(1, 1), act=1)
        return conv2d(y, self.conv2.weight, bn=self.bn2, padding=(1, 1), residual=shortcut, relu_out=True)
