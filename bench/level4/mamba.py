import torch
import torch.nn as nn
from transformers import MambaConfig, MambaForCausalLM

# A Mamba-style selective state-space language model at the 130M shape: per layer a
# gated causal 1-D convolution and an input-dependent linear recurrence, no attention.
BATCH = 2
SEQ_LEN = 256
VOCAB = 50280
HIDDEN = 768
LAYERS = 24
STATE = 16


def mamba_config(vocab: int, hidden: int, layers: int, state: int) -> MambaConfig:
    return MambaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        state_size=state,
        num_hidden_layers=layers,
        expand=2,
        conv_kernel=4,
        use_bias=False,
        use_conv_bias=True,
        residual_in_fp32=True,
        tie_word_embeddings=True,
        use_mambapy=False,
        use_cache=False,
    )


class Model(nn.Module):
    """A whole Mamba-style causal language model: token ids in, next-token logits out."""

    def __init__(self, vocab: int, hidden: int, layers: int, state: int):
        super().__init__()
        self.lm = MambaForCausalLM(mamba_config(vocab, hidden, layers, state)).eval()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, SEQ_LEN))]


def get_init_inputs():
    return [VOCAB, HIDDEN, LAYERS, STATE]
