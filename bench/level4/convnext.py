import torch
import torch.nn as nn
from transformers import ConvNextConfig, ConvNextForImageClassification

# A ConvNeXt-T-style image classifier: a 4x4 patchify stem, four stages of 7x7
# depthwise convolution, channels-last LayerNorm and a GELU MLP with layer scale.
BATCH = 16
IMAGE = 224
WIDTH = 96
DEPTH = 3
DEEP_STAGE = 9
CLASSES = 1000


def convnext_config(width: int, depth: int, deep_stage: int, classes: int) -> ConvNextConfig:
    return ConvNextConfig(
        num_channels=3,
        patch_size=4,
        num_stages=4,
        hidden_sizes=[width, 2 * width, 4 * width, 8 * width],
        depths=[depth, depth, deep_stage, depth],
        hidden_act="gelu",
        layer_scale_init_value=1.0,
        drop_path_rate=0.0,
        num_labels=classes,
    )


class Model(nn.Module):
    """A whole ConvNeXt-style image classifier: images in, class logits out."""

    def __init__(self, width: int, depth: int, deep_stage: int, classes: int):
        super().__init__()
        self.classifier = ConvNextForImageClassification(convnext_config(width, depth, deep_stage, classes)).eval()

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.classifier(pixel_values=pixel_values).logits


def get_inputs():
    return [torch.randn(BATCH, 3, IMAGE, IMAGE)]


def get_init_inputs():
    return [WIDTH, DEPTH, DEEP_STAGE, CLASSES]
