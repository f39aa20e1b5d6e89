import torch
import torch.nn as nn
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

# A Qwen3-MoE-style decoder: many small SwiGLU experts per layer, TOP_K of them per
# token with renormalised router weights, and RMSNorm on query and key heads.
BATCH = 2
SEQ_LEN = 512
VOCAB = 32000
HIDDEN = 1024
LAYERS = 8
HEADS = 16
KV_HEADS = 4
HEAD_DIM = 64
EXPERT_FFN = 512
EXPERTS = 32
TOP_K = 4


def qwen3_moe_config(vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int,
                     expert_ffn: int, experts: int, top_k: int) -> Qwen3MoeConfig:
    return Qwen3MoeConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=4 * expert_ffn,
        moe_intermediate_size=expert_ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        num_experts=experts,
        num_experts_per_tok=top_k,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        rope_theta=1000000.0,
        router_aux_loss_coef=0.0,
        output_router_logits=False,
        tie_word_embeddings=False,
        use_sliding_window=False,
        use_cache=False,
        attn_implementation="sdpa",
    )


class Model(nn.Module):
    """A whole Qwen3-MoE-style causal language model: logits out."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, kv_heads: int, head_dim: int,
                 expert_ffn: int, experts: int, top_k: int):
        super().__init__()
        config = qwen3_moe_config(vocab, hidden, layers, heads, kv_heads, head_dim, expert_ffn, experts, top_k)
        self.lm = Qwen3MoeForCausalLM(config).eval()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, SEQ_LEN))]


def get_init_inputs():
    return [VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, EXPERT_FFN, EXPERTS, TOP_K]
