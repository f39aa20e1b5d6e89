import torch
import torch.nn as nn
from transformers import MistralConfig, MistralForCausalLM

# A Mistral-style decoder whose attention sees only the last WINDOW tokens: the
# sequence is four windows long, so the band mask, not plain causality, decides.
BATCH = 2
SEQ_LEN = 1024
WINDOW = 256
VOCAB = 32000
HIDDEN = 2048
LAYERS = 16
HEADS = 32
KV_HEADS = 8
FFN = 5632


def mistral_config(vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, ffn: int,
                   window: int) -> MistralConfig:
    return MistralConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=8192,
        sliding_window=window,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        use_cache=False,
        attn_implementation="sdpa",
    )


class Model(nn.Module):
    """A whole Mistral-style causal language model with sliding-window attention: logits out."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, ffn: int, window: int):
        super().__init__()
        config = mistral_config(vocab, hidden, layers, heads, kv_heads, ffn, window)
        self.lm = MistralForCausalLM(config).eval()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, SEQ_LEN))]


def get_init_inputs():
    return [VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, WINDOW]
