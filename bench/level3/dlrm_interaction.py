import torch
import torch.nn as nn

BATCH = 4096
DENSE = 256
TABLES = 16
ROWS = 100000
EMBED = 128
TOP_HIDDEN = 1024


class Model(nn.Module):
    """A recommendation model's forward (DLRM style): a bottom MLP over dense features,
    one embedding lookup per sparse table, pairwise dot-product interactions between all
    the vectors, and a top MLP over the interactions and the dense vector."""

    def __init__(self, dense: int, tables: int, rows: int, embed: int, top_hidden: int):
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(dense, 512), nn.ReLU(), nn.Linear(512, embed), nn.ReLU())
        self.tables = nn.ModuleList(nn.Embedding(rows, embed) for _ in range(tables))
        n = tables + 1
        pairs = n * (n - 1) // 2
        self.top = nn.Sequential(nn.Linear(pairs + embed, top_hidden), nn.ReLU(), nn.Linear(top_hidden, 1))
        iu = torch.triu_indices(n, n, offset=1)
        self.register_buffer("iu_row", iu[0].clone(), persistent=False)
        self.register_buffer("iu_col", iu[1].clone(), persistent=False)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        d = self.bottom(dense)
        vecs = [d] + [t(sparse[:, i]) for i, t in enumerate(self.tables)]
        z = torch.stack(vecs, dim=1)
        inter = torch.bmm(z, z.transpose(1, 2))[:, self.iu_row, self.iu_col]
        return self.top(torch.cat([d, inter], dim=1)) * 4.0


def get_inputs():
    return [torch.randn(BATCH, DENSE), torch.randint(0, ROWS, (BATCH, TABLES))]


def get_init_inputs():
    return [DENSE, TABLES, ROWS, EMBED, TOP_HIDDEN]
