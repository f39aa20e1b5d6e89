"""Runtime companions of the static guard: what no pass over the source can see.

The static rules read the candidate's file; a forward can still reach PyTorch by routes
no AST shows (a `getattr` with a built string, `sys.modules`, builtins). So while a
forward runs, the ATen operators it dispatches are recorded and any compute operator
the policy does not allow is named (`AtenRecorder`); reads of tensor data on the host
are named too. Around every call, the functions the evaluator relies on (clocks,
synchronisation, comparisons, this package's own) must be the very objects they were
before the candidate was imported (`Integrity`), no thread the candidate started may
still run, and on a GPU the caching allocator's free blocks are filled with NaN before
the candidate allocates (`poison_free_blocks`), so memory holding a freed right answer
is never handed to it.
"""

from __future__ import annotations

import _thread
import builtins
import sys
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Tuple

# Reads of tensor data into host Python objects. On a GPU these also dispatch a
# device-to-host copy; on the CPU they dispatch nothing, so they are wrapped.
_HOST_READS = ("numpy", "tolist", "__array__", "item")


def thread_count() -> int:
    """Threads started through `_thread` (which `threading` uses) that are still running."""
    return _thread._count()


class Integrity:
    """Identity snapshot of everything the evaluator calls to time, synchronise and compare."""

    def __init__(self, torch: Any) -> None:
        # (label, owner, attribute, object): re-read later and compared by identity.
        self.watched: List[Tuple[str, Any, str, Any]] = []
        self.modules: Dict[str, Any] = {}
        import time

        import numpy

        self._add("time", time, ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "sleep"))
        self._add("builtins", builtins, ("isinstance", "type", "float", "int", "len", "max", "min", "abs", "bool",
                                         "tuple", "list", "zip", "range", "repr", "str", "sorted", "any", "all",
                                         "getattr", "setattr", "id", "__import__"))
        self._add("numpy", numpy, ("median", "percentile", "asarray", "maximum"))
        # Not `manual_seed`: importing torch._dynamo (torch.compile) legitimately rewraps it.
        self._add("torch", torch, ("allclose", "isclose", "equal", "isfinite", "where", "argmax", "zeros_like",
                                   "no_grad", "empty", "device"))
        self._add("torch.Tensor", torch.Tensor, (
            "__eq__", "__ne__", "__sub__", "__gt__", "__or__", "__invert__", "__mul__", "__add__", "__truediv__",
            "__getitem__", "__setitem__", "abs", "double", "sum", "max", "any", "item", "clone", "copy_", "to",
            "flatten", "nonzero", "numel", "is_floating_point", "is_complex", "view", "contiguous", "detach",
            "clamp_min", "data_ptr", "untyped_storage", "__torch_function__", "__torch_dispatch__",
            "numpy", "tolist", "__array__"))
        cuda = getattr(torch, "cuda", None)
        if cuda is not None:
            self._add("torch.cuda", cuda, ("synchronize", "Event", "current_stream", "Stream", "_sleep"))
            event = getattr(cuda, "Event", None)
            if isinstance(event, type):
                self._add("torch.cuda.Event", event, ("record", "elapsed_time", "synchronize", "query", "wait"))
        try:
            import triton.testing

            self._add("triton.testing", triton.testing, ("do_bench",))
        except ImportError:
            pass
        # The worker itself: a patched comparison or verdict helper would lie for the candidate.
        for name, module in list(sys.modules.items()):
            if name.startswith("tritonforge_worker") and module is not None:
                for attr, value in list(vars(module).items()):
                    if attr.startswith("__") or not callable(value):
                        continue
                    self.watched.append((f"{name}.{attr}", module, attr, value))
                    if isinstance(value, type) and value.__module__ == name:
                        self._add(f"{name}.{attr}", value, [m for m in vars(value) if callable(vars(value)[m])])
        for name in ("time", "builtins", "numpy", "torch", "triton", "triton.testing", "torch.cuda"):
            if name in sys.modules:
                self.modules[name] = sys.modules[name]
        self.modules.update({n: m for n, m in sys.modules.items() if n.startswith("tritonforge_worker")})

    def _add(self, label: str, owner: Any, names: Iterable[str]) -> None:
        for n in names:
            if isinstance(owner, type) and n in vars(owner):
                self.watched.append((f"{label}.{n}", owner, n, vars(owner)[n]))
            elif hasattr(owner, n):
                self.watched.append((f"{label}.{n}", owner, n, getattr(owner, n)))

    def changed(self) -> List[str]:
        """Names whose object is no longer the one seen at the snapshot."""
        out = [f"sys.modules[{n!r}]" for n, m in self.modules.items() if sys.modules.get(n) is not m]
        for label, owner, attr, value in self.watched:
            current = vars(owner).get(attr) if isinstance(owner, type) and attr in vars(owner) else \
                getattr(owner, attr, None)
            if current is not value:
                out.append(label)
        return out


class AtenRecorder:
    """Records the ATen operators a forward dispatches outside the candidate's kernel launches."""

    def __init__(self, torch: Any, allow: Iterable[str], in_launch: Callable[[], bool], device_type: str) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        self.torch = torch
        self.allow: FrozenSet[str] = frozenset(allow)
        self.device_type = device_type
        self.denied: Dict[str, int] = {}
        self.host_reads: Dict[str, int] = {}
        recorder = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Tuple[Any, ...] = (), kwargs: Any = None) -> Any:
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                if not in_launch():
                    recorder._note(func, args, out)
                return out

        self._mode_cls = _Mode
        self._mode: Optional[Any] = None
        self.in_launch = in_launch
        _install_host_reads(torch)

    def _note(self, func: Any, args: Tuple[Any, ...], out: Any) -> None:
        ns = getattr(func, "namespace", "")
        name = func.overloadpacket.__name__
        if name in ("_to_copy", "copy_", "_copy_from", "_copy_from_and_resize") and self.device_type != "cpu":
            # A copy out of the device into host memory is a host round-trip of tensor data.
            src = args[1] if name == "copy_" and len(args) > 1 else (args[0] if args else None)
            dst = args[0] if name in ("copy_", "_copy_from_and_resize") else out
            if name == "_copy_from" and len(args) > 1:
                src, dst = args[0], args[1]
            if _dev(src) == self.device_type and _dev(dst) == "cpu":
                self.host_reads[f"aten::{name} to host"] = self.host_reads.get(f"aten::{name} to host", 0) + 1
                return
        if name == "_local_scalar_dense":
            self.host_reads["aten::_local_scalar_dense (.item())"] = self.host_reads.get(
                "aten::_local_scalar_dense (.item())", 0) + 1
            return
        full = name if ns == "aten" else f"{ns}::{name}"
        if full not in self.allow:
            self.denied[f"{ns}::{name}"] = self.denied.get(f"{ns}::{name}", 0) + 1

    def __enter__(self) -> "AtenRecorder":
        global _ACTIVE
        self.denied = {}
        self.host_reads = {}
        self._mode = self._mode_cls()
        self._mode.__enter__()
        _ACTIVE = self
        return self

    def __exit__(self, *exc: Any) -> None:
        global _ACTIVE
        _ACTIVE = None
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        mode = self._mode
        current = _get_current_dispatch_mode()
        if mode is not None:
            mode.__exit__(*exc)
        if current is not mode:
            self.denied["dispatch mode stack changed during forward"] = 1

    def findings(self) -> List[str]:
        """What the last watched forward did that the policy forbids, as short phrases."""
        out: List[str] = []
        if self.denied:
            ops = ", ".join(f"{k} x{v}" if v > 1 else k for k, v in sorted(self.denied.items()))
            out.append(f"ran PyTorch compute operators the policy does not allow ({ops})")
        if self.host_reads:
            reads = ", ".join(f"{k} x{v}" if v > 1 else k for k, v in sorted(self.host_reads.items()))
            out.append(f"read tensor data on the host ({reads})")
        return out


_ACTIVE: Optional[AtenRecorder] = None
_HOST_READS_INSTALLED = False


def _install_host_reads(torch: Any) -> None:
    """Wrap `Tensor.numpy`/`tolist`/`__array__`/`item` once per process; counted while a forward is watched."""
    global _HOST_READS_INSTALLED
    if _HOST_READS_INSTALLED:
        return
    _HOST_READS_INSTALLED = True
    tensor = torch.Tensor
    for name in _HOST_READS:
        orig = getattr(tensor, name, None)
        if orig is None:
            continue

        def wrap(orig: Any = orig, name: str = name) -> Any:
            def host_read(self: Any, *args: Any, **kwargs: Any) -> Any:
                rec = _ACTIVE
                if rec is not None and not rec.in_launch():
                    rec.host_reads[name] = rec.host_reads.get(name, 0) + 1
                return orig(self, *args, **kwargs)

            host_read.__name__ = name
            return host_read

        setattr(tensor, name, wrap())


def _dev(x: Any) -> Optional[str]:
    device = getattr(x, "device", None)
    return getattr(device, "type", None)


def poison_free_blocks(torch: Any, device: Any) -> int:
    """Fill every free block of the CUDA caching allocator with 0xFF bytes (NaN in every float dtype).

    Each free block is claimed by asking for exactly its size (the allocator's best fit
    returns it), filled, and given back. Returns the bytes filled.
    """
    index = device.index if device.index is not None else torch.cuda.current_device()
    sizes: List[int] = []
    for seg in torch.cuda.memory.memory_snapshot():
        if seg.get("device", index) != index:
            continue
        for block in seg.get("blocks", []):
            if block.get("state") == "inactive" and int(block.get("size", 0)) > 0:
                sizes.append(int(block["size"]))
    held = []
    filled = 0
    for n in sorted(sizes, reverse=True):
        try:
            t = torch.empty(n, dtype=torch.uint8, device=device)
        except RuntimeError:  # out of memory under the cap: what is filled stays filled
            break
        t.fill_(0xFF)
        held.append(t)
        filled += n
    del held
    return filled
