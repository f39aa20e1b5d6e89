import torch
import torch.nn as nn
from transformers import FalconConfig, FalconForCausalLM

# A Falcon-style decoder: multi-query attention (one key-value head), attention and
# MLP in parallel off one LayerNorm, rotary positions, GELU MLP without biases.
BATCH = 2
SEQ_LEN = 1024
VOCAB = 65024
HIDDEN = 2048
LAYERS = 16
HEADS = 32


def falcon_config(vocab: int, hidden: int, layers: int, heads: int) -> FalconConfig:
    return FalconConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        multi_query=True,
        new_decoder_architecture=False,
        parallel_attn=True,
        alibi=False,
        bias=False,
        max_position_embeddings=2048,
        rope_theta=10000.0,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        layer_norm_epsilon=1e-5,
        use_cache=False,
        attn_implementation="sdpa",
    )


class Model(nn.Module):
    """A whole Falcon-style causal language model: token ids in, next-token logits out."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int):
        super().__init__()
        self.lm = FalconForCausalLM(falcon_config(vocab, hidden, layers, heads)).eval()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, SEQ_LEN))]


def get_init_inputs():
    return [VOCAB, HIDDEN, LAYERS, HEADS]
