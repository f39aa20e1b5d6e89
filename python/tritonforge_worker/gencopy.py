"""The colocated policy's generation copy: a plain model of the trained one's architecture
that the engine decodes with, refreshed in place from the trainer's weights after each
optimizer step.

Why a copy rather than generating through the trained model: the trained model carries
LoRA layers (an extra pair of matmuls per projection at every decoding step), perhaps
fp32 weights, a training attention kernel (varlen) and compiled layers built for training
shapes. None of that serves decoding. The copy holds the effective weights (LoRA merged)
in the generation dtype with the engine's decode attention (`engine.register_decode_attention`),
so the engine's CUDA graphs apply. The
refresh writes into the same tensors (`copy_`), so captured graphs stay valid; no disk
is involved. It costs one more copy of the weights in the generation dtype.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Tuple

from .engine import decode_attention


class CopyError(RuntimeError):
    """The trained model's weights cannot be mapped onto a plain model."""


def _lora_modules(base: Any) -> Dict[str, Any]:
    """The PEFT LoRA layers of `base` by module name (none for a plain model)."""
    return {name: mod for name, mod in base.named_modules()
            if hasattr(mod, "base_layer") and hasattr(mod, "get_delta_weight") and hasattr(mod, "lora_A")}


def effective_weights(net: Any) -> Dict[str, Any]:
    """Every weight of `net` as a plain model of its architecture names it, LoRA deltas of
    the active (unmerged, enabled) adapters added: what the model computes with."""
    import torch

    base = net.get_base_model() if hasattr(net, "get_base_model") else net
    lora = _lora_modules(base)
    out: Dict[str, Any] = {}
    for name, p in base.named_parameters(remove_duplicate=False):
        if ".lora_" in name:
            continue
        out[name.replace(".base_layer.", ".")] = p.detach()
    with torch.no_grad():
        for name, mod in lora.items():
            if mod.merged or mod.disable_adapters:
                continue
            w = mod.get_base_layer().weight.detach().float()
            for adapter in mod.active_adapters:
                if adapter not in mod.lora_A:
                    continue
                if adapter in getattr(mod, "lora_variant", {}):
                    raise CopyError(f"{name}: adapter {adapter!r} is a LoRA variant (e.g. DoRA); "
                                    "its weights cannot be merged into a generation copy")
                w = w + mod.get_delta_weight(adapter).float()
            out[f"{name}.weight"] = w
    return out


class GenerationCopy:
    """A plain model for the engine, its weights those of the trained `net` (`refresh`)."""

    def __init__(self, net: Any, device: str, dtype: Any, attention: str = "") -> None:
        import torch
        from transformers import AutoModelForCausalLM

        base = net.get_base_model() if hasattr(net, "get_base_model") else net
        cfg = copy.deepcopy(base.config)
        cfg.use_cache = True
        # Initialised on the device (weights are overwritten at once); the random state of
        # the training run is left as it was.
        devices = [torch.device(device).index or 0] if device.startswith("cuda") else []
        with torch.random.fork_rng(devices=devices), torch.device(device):
            self.net = AutoModelForCausalLM.from_config(cfg, dtype=dtype,
                                                        attn_implementation=attention or decode_attention())
        self.net.eval()
        for p in self.net.parameters():
            p.requires_grad_(False)
        self.refreshes = 0
        self.refresh(net)

    def refresh(self, net: Any) -> None:
        """Write the effective weights of `net` into the copy, in place."""
        import torch

        src = effective_weights(net)
        pairs: List[Tuple[str, Any]] = list(self.net.named_parameters())
        missing = [name for name, _ in pairs if name not in src]
        if missing:
            raise CopyError(f"the trained model has no weight for {', '.join(missing[:3])}"
                            f"{' ...' if len(missing) > 3 else ''}: it is not a plain model of its architecture")
        with torch.no_grad():
            for name, p in pairs:
                w = src[name]
                if tuple(w.shape) != tuple(p.shape):
                    raise CopyError(f"{name}: trained weight {tuple(w.shape)}, copy {tuple(p.shape)} "
                                    "(a sharded model cannot be copied)")
                p.copy_(w)
        self.refreshes += 1
