# honest: level 3 allows PyTorch parts: the three GEMMs (nearly all of the work) are Triton kernels, the final log-softmax stays in PyTorch
# problem: level3/mlp_classifier_logsoftmax
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, scale, SILU: tl.constexpr,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        ks = k0 + rk
        x = tl.load(x_ptr + rm[:, None] * K + ks[None, :], mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + ks[:, None], mask=(rn[None, :] < N) & (ks[:, None] < K), other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    if SILU:
        acc = acc * tl.sigmoid(acc)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc * scale, mask=(rm[:, None] < M) & (rn[None, :] < N))


def linear(x, layer, silu, scale=1.0):
    M, K = x.shape
    N = layer.weight.shape[0]
    y = torch.empty((M, N), device=x.device, dtype=torch.float32)
    linear_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](x, layer.weight, layer.bias, y, M, N, K, scale,
                                                             SILU=silu, BM=32, BN=32, BK=32)
    return y


class ModelNew(nn.Module):
    def __init__(self, in_features, hidden, classes):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        h = linear(linear(x.contiguous(), self.fc1, True), self.fc2, True)
        return torch.log_softmax(linear(h, self.head, False, 16.0), dim=-1)
