import torch
import torch.nn as nn
from transformers import CLIPConfig, CLIPModel, CLIPTextConfig, CLIPVisionConfig

# A CLIP-style dual encoder (ViT-B/32 image tower, 12-layer causal text tower with
# quick-GELU): every image scored against every caption.
IMAGES = 16
TEXTS = 16
TEXT_LEN = 77
VOCAB = 49408
IMAGE = 224
PATCH = 32
TEXT_HIDDEN = 512
VISION_HIDDEN = 768
LAYERS = 12
PROJECTION = 512


def clip_config(vocab: int, text_len: int, text_hidden: int, image: int, patch: int, vision_hidden: int,
                layers: int, projection: int) -> CLIPConfig:
    text = CLIPTextConfig(
        vocab_size=vocab,
        hidden_size=text_hidden,
        intermediate_size=4 * text_hidden,
        num_hidden_layers=layers,
        num_attention_heads=text_hidden // 64,
        max_position_embeddings=text_len,
        hidden_act="quick_gelu",
        projection_dim=projection,
        attention_dropout=0.0,
        # End of text is the highest id in each caption (it is the last token of the
        # real vocabulary): the text tower pools there.
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    )
    vision = CLIPVisionConfig(
        image_size=image,
        patch_size=patch,
        hidden_size=vision_hidden,
        intermediate_size=4 * vision_hidden,
        num_hidden_layers=layers,
        num_attention_heads=vision_hidden // 64,
        hidden_act="quick_gelu",
        projection_dim=projection,
        attention_dropout=0.0,
    )
    return CLIPConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), projection_dim=projection,
                      attn_implementation="sdpa")


class Model(nn.Module):
    """A whole CLIP-style model: images and captions in, image-by-caption similarity logits out."""

    def __init__(self, vocab: int, text_len: int, text_hidden: int, image: int, patch: int, vision_hidden: int,
                 layers: int, projection: int):
        super().__init__()
        config = clip_config(vocab, text_len, text_hidden, image, patch, vision_hidden, layers, projection)
        self.clip = CLIPModel(config).eval()

    def forward(self, input_ids: torch.Tensor, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.clip(input_ids=input_ids, pixel_values=pixel_values).logits_per_image


def get_inputs():
    return [torch.randint(0, VOCAB, (TEXTS, TEXT_LEN)), torch.randn(IMAGES, 3, IMAGE, IMAGE)]


def get_init_inputs():
    return [VOCAB, TEXT_LEN, TEXT_HIDDEN, IMAGE, PATCH, VISION_HIDDEN, LAYERS, PROJECTION]
