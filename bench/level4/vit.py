import torch
import torch.nn as nn
from transformers import ViTConfig, ViTForImageClassification

# A ViT-B/16-style image classifier: 16x16 patches embedded by a strided convolution,
# a class token, pre-LayerNorm encoder blocks, a linear head over 1000 classes.
BATCH = 16
IMAGE = 224
PATCH = 16
HIDDEN = 768
LAYERS = 12
HEADS = 12
FFN = 3072
CLASSES = 1000


def vit_config(image: int, patch: int, hidden: int, layers: int, heads: int, ffn: int, classes: int) -> ViTConfig:
    return ViTConfig(
        image_size=image,
        patch_size=patch,
        num_channels=3,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=ffn,
        hidden_act="gelu",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        layer_norm_eps=1e-12,
        qkv_bias=True,
        num_labels=classes,
        attn_implementation="sdpa",
    )


class Model(nn.Module):
    """A whole ViT-style image classifier: images in, class logits out."""

    def __init__(self, image: int, patch: int, hidden: int, layers: int, heads: int, ffn: int, classes: int):
        super().__init__()
        self.classifier = ViTForImageClassification(vit_config(image, patch, hidden, layers, heads, ffn, classes)).eval()

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.classifier(pixel_values=pixel_values).logits


def get_inputs():
    return [torch.randn(BATCH, 3, IMAGE, IMAGE)]


def get_init_inputs():
    return [IMAGE, PATCH, HIDDEN, LAYERS, HEADS, FFN, CLASSES]
