import torch
import torch.nn as nn
from transformers import Gemma2Config, Gemma2ForCausalLM

# A Gemma-2-style decoder: layers alternate sliding-window and global attention, tanh
# soft-capping of attention scores and of the final logits, GeGLU, RMSNorm before and
# after each sub-block, embeddings scaled by the square root of the width.
BATCH = 2
SEQ_LEN = 1024
WINDOW = 256
VOCAB = 32000
HIDDEN = 1024
LAYERS = 8
HEADS = 8
KV_HEADS = 4
HEAD_DIM = 128
FFN = 4096


def gemma2_config(vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int, ffn: int,
                  window: int) -> Gemma2Config:
    return Gemma2Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        hidden_activation="gelu_pytorch_tanh",
        max_position_embeddings=8192,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        query_pre_attn_scalar=head_dim,
        sliding_window=window,
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
        attention_dropout=0.0,
        pad_token_id=0,
        use_cache=False,
        # Soft-capped attention scores: the reference computes attention in plain PyTorch.
        attn_implementation="eager",
    )


class Model(nn.Module):
    """A whole Gemma-2-style causal language model: token ids in, soft-capped logits out."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int, ffn: int,
                 window: int):
        super().__init__()
        config = gemma2_config(vocab, hidden, layers, heads, kv_heads, head_dim, ffn, window)
        self.lm = Gemma2ForCausalLM(config).eval()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, SEQ_LEN))]


def get_init_inputs():
    return [VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN, WINDOW]
