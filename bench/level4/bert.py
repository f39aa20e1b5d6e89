import torch
import torch.nn as nn
from transformers import BertConfig, BertModel

# A BERT-style encoder at the base shape: word, position and segment embeddings,
# post-LayerNorm blocks with bidirectional attention and an erf-GELU MLP.
BATCH = 8
SEQ_LEN = 512
VOCAB = 30522
HIDDEN = 768
LAYERS = 12
HEADS = 12
FFN = 3072


def bert_config(vocab: int, hidden: int, layers: int, heads: int, ffn: int, positions: int) -> BertConfig:
    return BertConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=ffn,
        hidden_act="gelu",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=positions,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
        add_pooling_layer=False,
        attn_implementation="sdpa",
    )


class Model(nn.Module):
    """A whole BERT-style encoder: token and segment ids in, the last hidden states out."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, ffn: int, positions: int):
        super().__init__()
        self.encoder = BertModel(bert_config(vocab, hidden, layers, heads, ffn, positions),
                                 add_pooling_layer=False).eval()

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        return self.encoder(input_ids=input_ids, token_type_ids=token_type_ids).last_hidden_state


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, SEQ_LEN)), torch.randint(0, 2, (BATCH, SEQ_LEN))]


def get_init_inputs():
    return [VOCAB, HIDDEN, LAYERS, HEADS, FFN, SEQ_LEN]
