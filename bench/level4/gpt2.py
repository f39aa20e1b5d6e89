import torch
import torch.nn as nn
from transformers import GPT2Config, GPT2LMHeadModel

# A GPT-2-style decoder at the 124M shape: learned positions, pre-LayerNorm blocks,
# tanh-GELU MLP, tied input and output embeddings.
BATCH = 4
SEQ_LEN = 1024
VOCAB = 50257
HIDDEN = 768
LAYERS = 12
HEADS = 12


def gpt2_config(vocab: int, hidden: int, layers: int, heads: int, positions: int) -> GPT2Config:
    return GPT2Config(
        vocab_size=vocab,
        n_positions=positions,
        n_embd=hidden,
        n_layer=layers,
        n_head=heads,
        activation_function="gelu_new",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=1e-5,
        bos_token_id=None,
        eos_token_id=None,
        use_cache=False,
        attn_implementation="sdpa",
    )


class Model(nn.Module):
    """A whole GPT-2-style causal language model: token ids in, next-token logits out."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, positions: int):
        super().__init__()
        self.lm = GPT2LMHeadModel(gpt2_config(vocab, hidden, layers, heads, positions)).eval()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, SEQ_LEN))]


def get_init_inputs():
    return [VOCAB, HIDDEN, LAYERS, HEADS, SEQ_LEN]
