import torch
import torch.nn as nn

BATCH = 8
SEQ = 1024
DIM = 1024
STATE = 16
DT_RANK = 64


class Model(nn.Module):
    """A selective state-space layer (the core of a Mamba block): input-dependent step sizes
    (through a low-rank projection and softplus), input-dependent B and C, a diagonal state
    matrix A < 0, the discretised recurrence h_t = exp(dt A) h_{t-1} + dt B_t x_t per channel
    and state, y_t = C_t . h_t + D x_t, gated by SiLU of a second branch."""

    def __init__(self, dim: int, state: int, dt_rank: int):
        super().__init__()
        self.in_proj = nn.Linear(dim, 2 * dim, bias=False)
        self.x_proj = nn.Linear(dim, dt_rank + 2 * state, bias=False)
        self.dt_proj = nn.Linear(dt_rank, dim)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, state + 1, dtype=torch.float32)).repeat(dim, 1))
        self.D = nn.Parameter(torch.ones(dim))
        self.out_proj = nn.Linear(dim, dim, bias=False)
        self.dt_rank, self.state = dt_rank, state

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        u, z = self.in_proj(x).chunk(2, dim=-1)
        u = torch.nn.functional.silu(u)
        dt, B, C = self.x_proj(u).split([self.dt_rank, self.state, self.state], dim=-1)
        dt = torch.nn.functional.softplus(self.dt_proj(dt))
        A = -torch.exp(self.A_log)
        h = x.new_zeros(b, d, self.state)
        ys = []
        for t in range(n):
            h = torch.exp(dt[:, t, :, None] * A) * h + (dt[:, t, :, None] * B[:, t, None, :]) * u[:, t, :, None]
            ys.append((h * C[:, t, None, :]).sum(-1))
        y = torch.stack(ys, dim=1) + u * self.D
        return self.out_proj(y * torch.nn.functional.silu(z)) * 8.0


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM)]


def get_init_inputs():
    return [DIM, STATE, DT_RANK]
