import torch
import torch.nn as nn
from transformers import RobertaConfig, RobertaForMaskedLM

# A RoBERTa-style encoder at the base shape with its masked-language-model head:
# positions offset past the padding index, post-LayerNorm blocks, a tied decoder.
BATCH = 4
SEQ_LEN = 512
VOCAB = 50265
HIDDEN = 768
LAYERS = 12
HEADS = 12
FFN = 3072


def roberta_config(vocab: int, hidden: int, layers: int, heads: int, ffn: int, positions: int) -> RobertaConfig:
    return RobertaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=ffn,
        hidden_act="gelu",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=positions + 2,
        type_vocab_size=1,
        pad_token_id=1,
        layer_norm_eps=1e-5,
        attn_implementation="sdpa",
    )


class Model(nn.Module):
    """A whole RoBERTa-style masked language model: token ids in, vocabulary logits out."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, ffn: int, positions: int):
        super().__init__()
        self.mlm = RobertaForMaskedLM(roberta_config(vocab, hidden, layers, heads, ffn, positions)).eval()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.mlm(input_ids=input_ids).logits


def get_inputs():
    # Ids from 2 up: no padding token (1), so every position attends and is attended to.
    return [torch.randint(2, VOCAB, (BATCH, SEQ_LEN))]


def get_init_inputs():
    return [VOCAB, HIDDEN, LAYERS, HEADS, FFN, SEQ_LEN]
