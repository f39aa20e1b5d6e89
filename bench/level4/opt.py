import torch
import torch.nn as nn
from transformers import OPTConfig, OPTForCausalLM

# An OPT-style decoder at the 1.3B shape: learned positions offset by two, pre-LayerNorm
# blocks, ReLU MLP, tied embeddings.
BATCH = 2
SEQ_LEN = 1024
VOCAB = 50272
HIDDEN = 2048
LAYERS = 24
HEADS = 32
FFN = 8192


def opt_config(vocab: int, hidden: int, layers: int, heads: int, ffn: int) -> OPTConfig:
    return OPTConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        ffn_dim=ffn,
        word_embed_proj_dim=hidden,
        max_position_embeddings=2048,
        do_layer_norm_before=True,
        activation_function="relu",
        dropout=0.0,
        attention_dropout=0.0,
        layerdrop=0.0,
        enable_bias=True,
        pad_token_id=1,
        use_cache=False,
        attn_implementation="sdpa",
    )


class Model(nn.Module):
    """A whole OPT-style causal language model: token ids in, next-token logits out."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, ffn: int):
        super().__init__()
        self.lm = OPTForCausalLM(opt_config(vocab, hidden, layers, heads, ffn)).eval()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits


def get_inputs():
    # Ids from 2 up: no padding token (1).
    return [torch.randint(2, VOCAB, (BATCH, SEQ_LEN))]


def get_init_inputs():
    return [VOCAB, HIDDEN, LAYERS, HEADS, FFN]
