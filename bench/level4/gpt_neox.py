import torch
import torch.nn as nn
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

# A GPT-NeoX-style decoder at the 410M shape: fused query-key-value projection, rotary
# positions on a quarter of each head, attention and MLP in parallel off one residual.
BATCH = 2
SEQ_LEN = 512
VOCAB = 50304
HIDDEN = 1024
LAYERS = 24
HEADS = 16
FFN = 4096


def neox_config(vocab: int, hidden: int, layers: int, heads: int, ffn: int) -> GPTNeoXConfig:
    return GPTNeoXConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=ffn,
        hidden_act="gelu",
        rotary_pct=0.25,
        rotary_emb_base=10000,
        max_position_embeddings=2048,
        use_parallel_residual=True,
        attention_dropout=0.0,
        hidden_dropout=0.0,
        layer_norm_eps=1e-5,
        tie_word_embeddings=False,
        use_cache=False,
        attn_implementation="sdpa",
    )


class Model(nn.Module):
    """A whole GPT-NeoX-style causal language model: token ids in, next-token logits out."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, ffn: int):
        super().__init__()
        self.lm = GPTNeoXForCausalLM(neox_config(vocab, hidden, layers, heads, ffn)).eval()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, SEQ_LEN))]


def get_init_inputs():
    return [VOCAB, HIDDEN, LAYERS, HEADS, FFN]
