import torch
import torch.nn as nn

BATCH = 64
TOKENS = 196
CHANNELS = 768
TOKEN_HIDDEN = 384
CHANNEL_HIDDEN = 3072


class Model(nn.Module):
    """An MLP-Mixer block: a token-mixing MLP across patches (on the transposed input), then a
    channel-mixing MLP, each pre-normed and residual."""

    def __init__(self, tokens: int, channels: int, token_hidden: int, channel_hidden: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(channels)
        self.token_up = nn.Linear(tokens, token_hidden)
        self.token_down = nn.Linear(token_hidden, tokens)
        self.norm2 = nn.LayerNorm(channels)
        self.channel_up = nn.Linear(channels, channel_hidden)
        self.channel_down = nn.Linear(channel_hidden, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm1(x).transpose(1, 2)
        y = self.token_down(torch.nn.functional.gelu(self.token_up(y)))
        x = x + y.transpose(1, 2)
        y = self.channel_down(torch.nn.functional.gelu(self.channel_up(self.norm2(x))))
        return x + y


def get_inputs():
    return [torch.randn(BATCH, TOKENS, CHANNELS)]


def get_init_inputs():
    return [TOKENS, CHANNELS, TOKEN_HIDDEN, CHANNEL_HIDDEN]
