import torch
import torch.nn as nn
from transformers import Phi3Config, Phi3ForCausalLM

# A Phi-3-style decoder: one fused query-key-value projection, one fused gate-and-up
# projection split for SwiGLU, rotary positions, RMSNorm.
BATCH = 2
SEQ_LEN = 1024
VOCAB = 32064
HIDDEN = 2048
LAYERS = 16
HEADS = 32
KV_HEADS = 32
FFN = 5632


def phi3_config(vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, ffn: int) -> Phi3Config:
    return Phi3Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=4096,
        original_max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attention_dropout=0.0,
        sliding_window=None,
        tie_word_embeddings=False,
        pad_token_id=0,
        bos_token_id=None,
        eos_token_id=None,
        use_cache=False,
        attn_implementation="sdpa",
    )


class Model(nn.Module):
    """A whole Phi-3-style causal language model: token ids in, next-token logits out."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, ffn: int):
        super().__init__()
        self.lm = Phi3ForCausalLM(phi3_config(vocab, hidden, layers, heads, kv_heads, ffn)).eval()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, SEQ_LEN))]


def get_init_inputs():
    return [VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, FFN]
