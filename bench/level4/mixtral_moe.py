import torch
import torch.nn as nn
from transformers import MixtralConfig, MixtralForCausalLM

# A Mixtral-style sparse mixture-of-experts decoder: every feed-forward block routes
# each token to the TOP_K best of EXPERTS SwiGLU experts.
BATCH = 2
SEQ_LEN = 512
VOCAB = 32000
HIDDEN = 1024
LAYERS = 8
HEADS = 16
KV_HEADS = 4
FFN = 2816
EXPERTS = 8
TOP_K = 2


def mixtral_config(vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, ffn: int, experts: int,
                   top_k: int) -> MixtralConfig:
    return MixtralConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        num_local_experts=experts,
        num_experts_per_tok=top_k,
        max_position_embeddings=4096,
        sliding_window=None,
        rms_norm_eps=1e-5,
        rope_theta=1000000.0,
        router_aux_loss_coef=0.0,
        output_router_logits=False,
        tie_word_embeddings=False,
        use_cache=False,
        attn_implementation="sdpa",
    )


class Model(nn.Module):
    """A whole Mixtral-style mixture-of-experts causal language model: logits out."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, ffn: int, experts: int,
                 top_k: int):
        super().__init__()
        config = mixtral_config(vocab, hidden, layers, heads, kv_heads, ffn, experts, top_k)
        self.lm = MixtralForCausalLM(config).eval()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, SEQ_LEN))]


def get_init_inputs():
    return [VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, EXPERTS, TOP_K]
