import torch
import torch.nn as nn
from transformers import T5Config, T5ForConditionalGeneration

# A T5-style encoder-decoder at the small shape: relative position buckets instead of
# positions, RMS-style LayerNorm without bias, ReLU MLP, cross-attention, tied head.
BATCH = 8
SOURCE_LEN = 512
TARGET_LEN = 128
VOCAB = 32128
D_MODEL = 512
LAYERS = 6
HEADS = 8
FFN = 2048


def t5_config(vocab: int, d_model: int, layers: int, heads: int, ffn: int) -> T5Config:
    return T5Config(
        vocab_size=vocab,
        d_model=d_model,
        d_kv=d_model // heads,
        d_ff=ffn,
        num_layers=layers,
        num_decoder_layers=layers,
        num_heads=heads,
        relative_attention_num_buckets=32,
        relative_attention_max_distance=128,
        dropout_rate=0.0,
        feed_forward_proj="relu",
        tie_word_embeddings=True,
        decoder_start_token_id=0,
        use_cache=False,
        attn_implementation="sdpa",
    )


class Model(nn.Module):
    """A whole T5-style encoder-decoder: source and target ids in, target logits out."""

    def __init__(self, vocab: int, d_model: int, layers: int, heads: int, ffn: int):
        super().__init__()
        self.seq2seq = T5ForConditionalGeneration(t5_config(vocab, d_model, layers, heads, ffn)).eval()

    def forward(self, input_ids: torch.Tensor, decoder_input_ids: torch.Tensor) -> torch.Tensor:
        return self.seq2seq(input_ids=input_ids, decoder_input_ids=decoder_input_ids, use_cache=False).logits


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, SOURCE_LEN)), torch.randint(0, VOCAB, (BATCH, TARGET_LEN))]


def get_init_inputs():
    return [VOCAB, D_MODEL, LAYERS, HEADS, FFN]
