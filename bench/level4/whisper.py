import torch
import torch.nn as nn
from transformers import WhisperConfig, WhisperForConditionalGeneration

# A Whisper-style speech encoder-decoder at the base shape: two 1-D convolutions over a
# log-mel spectrogram (the second halves time), sinusoidal encoder positions,
# pre-LayerNorm blocks, a decoder cross-attending to the audio.
BATCH = 4
MELS = 80
FRAMES = 3000
TARGET_LEN = 64
VOCAB = 51865
D_MODEL = 512
LAYERS = 6
HEADS = 8
FFN = 2048


def whisper_config(vocab: int, mels: int, frames: int, d_model: int, layers: int, heads: int,
                   ffn: int) -> WhisperConfig:
    return WhisperConfig(
        vocab_size=vocab,
        num_mel_bins=mels,
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn,
        decoder_ffn_dim=ffn,
        max_source_positions=frames // 2,
        max_target_positions=448,
        activation_function="gelu",
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        encoder_layerdrop=0.0,
        decoder_layerdrop=0.0,
        apply_spec_augment=False,
        # Special tokens at the top of the vocabulary, as in the real tokenizer.
        pad_token_id=vocab - 1,
        bos_token_id=vocab - 1,
        eos_token_id=vocab - 1,
        decoder_start_token_id=vocab - 1,
        use_cache=False,
        attn_implementation="sdpa",
    )


class Model(nn.Module):
    """A whole Whisper-style model: a log-mel spectrogram and target ids in, target logits out."""

    def __init__(self, vocab: int, mels: int, frames: int, d_model: int, layers: int, heads: int, ffn: int):
        super().__init__()
        config = whisper_config(vocab, mels, frames, d_model, layers, heads, ffn)
        self.seq2seq = WhisperForConditionalGeneration(config).eval()

    def forward(self, input_features: torch.Tensor, decoder_input_ids: torch.Tensor) -> torch.Tensor:
        return self.seq2seq(input_features=input_features, decoder_input_ids=decoder_input_ids,
                            use_cache=False).logits


def get_inputs():
    return [torch.randn(BATCH, MELS, FRAMES), torch.randint(0, VOCAB, (BATCH, TARGET_LEN))]


def get_init_inputs():
    return [VOCAB, MELS, FRAMES, D_MODEL, LAYERS, HEADS, FFN]
