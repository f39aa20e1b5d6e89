import torch
import torch.nn as nn
from transformers import Qwen3Config, Qwen3ForCausalLM

# A Qwen3-style decoder at the 0.6B shape: grouped-query attention with RMSNorm on
# every query and key head, rotary positions, SwiGLU, tied embeddings, a 151k vocabulary.
BATCH = 2
SEQ_LEN = 512
VOCAB = 151936
HIDDEN = 1024
LAYERS = 28
HEADS = 16
KV_HEADS = 8
HEAD_DIM = 128
FFN = 3072


def qwen3_config(vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int,
                 ffn: int) -> Qwen3Config:
    return Qwen3Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        rope_theta=1000000.0,
        tie_word_embeddings=True,
        use_sliding_window=False,
        use_cache=False,
        attn_implementation="sdpa",
    )


class Model(nn.Module):
    """A whole Qwen3-style causal language model: token ids in, next-token logits out."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int, ffn: int):
        super().__init__()
        self.lm = Qwen3ForCausalLM(qwen3_config(vocab, hidden, layers, heads, kv_heads, head_dim, ffn)).eval()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, SEQ_LEN))]


def get_init_inputs():
    return [VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN]
