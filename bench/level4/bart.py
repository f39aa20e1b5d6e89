import torch
import torch.nn as nn
from transformers import BartConfig, BartForConditionalGeneration

# A BART-style encoder-decoder at the base shape: learned positions, post-LayerNorm
# blocks, GELU MLP, cross-attention, a final-logits bias on the tied head.
BATCH = 4
SOURCE_LEN = 512
TARGET_LEN = 128
VOCAB = 50265
D_MODEL = 768
LAYERS = 6
HEADS = 12
FFN = 3072


def bart_config(vocab: int, d_model: int, layers: int, heads: int, ffn: int, positions: int) -> BartConfig:
    return BartConfig(
        vocab_size=vocab,
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn,
        decoder_ffn_dim=ffn,
        max_position_embeddings=positions,
        activation_function="gelu",
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        encoder_layerdrop=0.0,
        decoder_layerdrop=0.0,
        scale_embedding=False,
        pad_token_id=1,
        use_cache=False,
        attn_implementation="sdpa",
    )


class Model(nn.Module):
    """A whole BART-style encoder-decoder: source and target ids in, target logits out."""

    def __init__(self, vocab: int, d_model: int, layers: int, heads: int, ffn: int, positions: int):
        super().__init__()
        self.seq2seq = BartForConditionalGeneration(bart_config(vocab, d_model, layers, heads, ffn, positions)).eval()

    def forward(self, input_ids: torch.Tensor, decoder_input_ids: torch.Tensor) -> torch.Tensor:
        return self.seq2seq(input_ids=input_ids, decoder_input_ids=decoder_input_ids, use_cache=False).logits


def get_inputs():
    # Ids from 3 up: no padding (1), no end-of-sequence (2) anywhere.
    return [torch.randint(3, VOCAB, (BATCH, SOURCE_LEN)), torch.randint(3, VOCAB, (BATCH, TARGET_LEN))]


def get_init_inputs():
    return [VOCAB, D_MODEL, LAYERS, HEADS, FFN, SOURCE_LEN]
