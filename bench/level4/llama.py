import torch
import torch.nn as nn
from transformers import LlamaConfig, LlamaForCausalLM

# A 1.1B-parameter Llama-style decoder (grouped-query attention, rotary positions,
# RMSNorm, SwiGLU feed-forward), randomly initialised from a seed: nothing is downloaded.
BATCH = 2
SEQ_LEN = 512
VOCAB = 32000
HIDDEN = 2048
LAYERS = 22
HEADS = 32
KV_HEADS = 4
FFN = 5632


def llama_config(vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, ffn: int) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        use_cache=False,
        attn_implementation="sdpa",
    )


class Model(nn.Module):
    """A whole Llama-style causal language model: token ids in, next-token logits out."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, ffn: int):
        super().__init__()
        self.lm = LlamaForCausalLM(llama_config(vocab, hidden, layers, heads, kv_heads, ffn)).eval()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, SEQ_LEN))]


def get_init_inputs():
    return [VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, FFN]
