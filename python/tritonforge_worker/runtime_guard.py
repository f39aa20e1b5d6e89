"""The evaluator's runtime layers: what no pass over the source can see.

A forward can reach PyTorch by routes no AST shows (a `getattr` with a built string,
`sys.modules`, builtins, a thread). So while a watched forward runs, the ATen operators it
dispatches, on its own thread and on every thread the candidate started, are recorded and
any compute operator the runtime policy does not allow is named with the candidate's
source line that dispatched it (`AtenRecorder`); reads of tensor data on the host are
named too, and so is a dispatch or function mode of the candidate's own. Around every
call, the functions the evaluator relies on (clocks, synchronisation, comparisons, this
package's own, the thread and mode wrappers installed here) must be the very objects they
were before the candidate was imported (`Integrity`), no thread the candidate started may
still run, and on a GPU the caching allocator's free blocks are filled with NaN before the
candidate allocates (`poison_free_blocks`), so memory holding a freed right answer is never
handed to it.
"""

from __future__ import annotations

import _thread
import builtins
import sys
import threading
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Tuple

from .audit import candidate_running, site

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
        # The thread and mode wrappers: putting the originals back would hide work from the recorder.
        self._add("_thread", _thread, ("start_new_thread", "start_joinable_thread"))
        self._add("threading", threading, ("_start_new_thread", "_start_joinable_thread"))
        import torch.overrides as ov
        import torch.utils._python_dispatch as pd

        self._add("torch._C", torch._C, ("_push_on_torch_dispatch_stack", "_push_on_torch_function_stack"))
        self._add("torch.utils._python_dispatch", pd, ("_push_mode", "_push_on_torch_dispatch_stack"))
        self._add("torch.overrides", ov, ("_push_mode", "_push_on_torch_function_stack"))
        self._add("sys", sys, ("addaudithook", "audit", "_getframe"))
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
        # What the reference runs through (levels 3 and 4 let the candidate call PyTorch, so it
        # could slow or change the reference it is timed against): every public function of
        # `torch.nn.functional` and the `forward` of every module class of `torch.nn`.
        functional = torch.nn.functional
        self._add("torch.nn.functional", functional,
                  [n for n, v in vars(functional).items() if not n.startswith("_") and callable(v)])
        for cname, cls in vars(torch.nn).items():
            if isinstance(cls, type) and issubclass(cls, torch.nn.Module) and "forward" in vars(cls):
                self._add(f"torch.nn.{cname}", cls, ("forward",))
        self._add("torch.nn.Module", torch.nn.Module, ("__call__", "_call_impl"))
        self.settings = torch_settings(torch)
        for name in ("time", "builtins", "numpy", "torch", "triton", "triton.testing", "torch.cuda"):
            if name in sys.modules:
                self.modules[name] = sys.modules[name]
        self.modules.update({n: m for n, m in sys.modules.items() if n.startswith("tritonforge_worker")})
        # The check runs around every timed call (907 names: 0.6 ms by `getattr` each time,
        # a fifth of a small kernel's repetition). An object found in its owner's own
        # namespace is re-read from that namespace (a live view no candidate can swap); a
        # module's class is kept too, since a module subclass could answer `getattr` with
        # something else. The rest (inherited, or served by a module's `__getattr__`) is
        # read with `getattr`, as before.
        self._direct: List[Tuple[str, Any, str, Any]] = []
        self._indirect: List[Tuple[str, Any, str, Any]] = []
        kinds: Dict[int, Tuple[str, Any, type]] = {}
        for label, owner, attr, value in self.watched:
            space = vars(owner)
            if attr in space and space[attr] is value:
                self._direct.append((label, space, attr, value))
                if not isinstance(owner, type):
                    kinds.setdefault(id(owner), (label.rsplit(".", 1)[0], owner, type(owner)))
            else:
                self._indirect.append((label, owner, attr, value))
        # (The label is kept from now: a swapped class could answer `__name__` by raising.)
        self._kinds: List[Tuple[str, Any, type]] = list(kinds.values())

    def _add(self, label: str, owner: Any, names: Iterable[str]) -> None:
        for n in names:
            if isinstance(owner, type) and n in vars(owner):
                self.watched.append((f"{label}.{n}", owner, n, vars(owner)[n]))
            elif hasattr(owner, n):
                self.watched.append((f"{label}.{n}", owner, n, getattr(owner, n)))

    def changed(self) -> List[str]:
        """Names whose object is no longer the one seen at the snapshot, and global PyTorch
        settings (precision, backends) that differ from it."""
        out = [f"sys.modules[{n!r}]" for n, m in self.modules.items() if sys.modules.get(n) is not m]
        now = torch_settings(sys.modules["torch"])
        out += [f"the setting {k} ({self.settings[k]!r} -> {now.get(k)!r})" for k in self.settings
                if now.get(k) != self.settings[k]]
        out += [label for label, space, attr, value in self._direct if space.get(attr) is not value]
        out += [label for label, owner, attr, value in self._indirect
                if (vars(owner).get(attr) if isinstance(owner, type) and attr in vars(owner)
                    else getattr(owner, attr, None)) is not value]
        out += [f"the class of {label!r}" for label, owner, kind in self._kinds if type(owner) is not kind]
        return out


def torch_settings(torch: Any) -> Dict[str, Any]:
    """Global PyTorch settings the reference's speed and numerics depend on: a candidate
    turning on TF32 or reduced-precision reductions, or changing a backend, would be timed
    against a reference that is not the problem's."""
    out: Dict[str, Any] = {}

    def put(name: str, read: Callable[[], Any]) -> None:
        try:
            out[name] = read()
        except Exception:  # noqa: BLE001 - a build without that backend
            pass

    put("torch.get_float32_matmul_precision()", torch.get_float32_matmul_precision)
    put("torch.get_default_dtype()", torch.get_default_dtype)
    put("torch.get_num_threads()", torch.get_num_threads)
    put("torch.are_deterministic_algorithms_enabled()", torch.are_deterministic_algorithms_enabled)
    for owner, label, flags in (
        ("cuda.matmul", "torch.backends.cuda.matmul",
         ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction")),
        ("cudnn", "torch.backends.cudnn", ("enabled", "allow_tf32", "benchmark", "deterministic")),
    ):
        obj: Any = torch.backends
        for part in owner.split("."):
            obj = getattr(obj, part, None)
        for flag in flags:
            if obj is not None and hasattr(obj, flag):
                out[f"{label}.{flag}"] = getattr(obj, flag)
    for sdp in ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "math_sdp_enabled", "cudnn_sdp_enabled"):
        fn = getattr(torch.backends.cuda, sdp, None)
        if fn is not None:
            put(f"torch.backends.cuda.{sdp}()", fn)
    return out


class AtenRecorder:
    """Records the ATen operators a watched forward dispatches outside the candidate's
    kernel launches, on its own thread and on threads the candidate started; names each
    one the policy does not allow with the candidate's line that dispatched it."""

    def __init__(self, torch: Any, allow: Iterable[str], allow_compute: bool, candidate: str, lines: List[str],
                 in_launch: Callable[[], bool], device_type: str) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        self.torch = torch
        self.allow: FrozenSet[str] = frozenset(allow)
        self.allow_compute = allow_compute
        self.candidate = candidate
        self.lines = lines
        self.device_type = device_type
        self.denied: Dict[str, int] = {}
        self.host_reads: Dict[str, int] = {}
        # Where PyTorch compute is allowed (levels 3 and 4): the modelled GPU cost of what
        # the last watched forward left to PyTorch (`op_cost`), against the reference's.
        self.torch_cost = 0.0
        # First site of each denied operator or host read, and foreign modes seen.
        self.sites: Dict[str, str] = {}
        self.modes: List[str] = []
        # Foreign modes pushed outside a watched forward (the candidate's import, `__init__`).
        self.pushed_before: List[str] = []
        recorder = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Tuple[Any, ...] = (), kwargs: Any = None) -> Any:
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                recorder._note(func, args, out, in_launch(), kwargs)
                return out

        self._mode_cls = _Mode
        _OURS.add(_Mode)
        global _CURRENT
        _CURRENT = self
        self._mode: Optional[Any] = None
        self.in_launch = in_launch
        _install_host_reads(torch)
        install_thread_and_mode_watch(torch)

    def _note(self, func: Any, args: Tuple[Any, ...], out: Any, launching: bool, kwargs: Any = None) -> None:
        ns = getattr(func, "namespace", "")
        name = func.overloadpacket.__name__
        if launching:
            # Inside a launch path the interpreter moves arguments with these; anything else
            # there is code of the candidate's run by a launch (a kernel body under the
            # interpreter, a pre-run hook, a launch_metadata callback).
            if ns == "aten" and name in _LAUNCH_OPS:
                return
        elif name in ("_to_copy", "copy_", "_copy_from", "_copy_from_and_resize") and self.device_type != "cpu":
            # A copy out of the device into host memory is a host round-trip of tensor data.
            src = args[1] if name == "copy_" and len(args) > 1 else (args[0] if args else None)
            dst = args[0] if name in ("copy_", "_copy_from_and_resize") else out
            if name == "_copy_from" and len(args) > 1:
                src, dst = args[0], args[1]
            if _dev(src) == self.device_type and _dev(dst) == "cpu":
                self.host_read(f"aten::{name} to host")
                return
        if name == "_local_scalar_dense":
            self.host_read("aten::_local_scalar_dense (.item())")
            return
        full = name if ns == "aten" else f"{ns}::{name}"
        if full in self.allow:
            return
        if self.allow_compute:
            self.torch_cost += op_cost(func, args, kwargs or {}, out)
            return
        key = f"{ns}::{name}"
        n = self.denied.get(key, 0)
        self.denied[key] = n + 1
        if n == 0:
            self.sites[key] = site(sys._getframe(2), self.candidate, self.lines)

    def host_read(self, what: str) -> None:
        n = self.host_reads.get(what, 0)
        self.host_reads[what] = n + 1
        if n == 0:
            self.sites[what] = site(sys._getframe(2), self.candidate, self.lines)

    def foreign_mode(self, mode: Any, how: str) -> None:
        found = self.modes if self is _ACTIVE else self.pushed_before
        what = f"{how} {type(mode).__name__} at {site(sys._getframe(2), self.candidate, self.lines)}"
        if len(found) < 4 and what not in found:  # `_push_mode` and the push it calls are both wrapped
            found.append(what)

    def __enter__(self) -> "AtenRecorder":
        global _ACTIVE
        self.denied = {}
        self.host_reads = {}
        self.torch_cost = 0.0
        self.sites = {}
        self.modes = []
        torch = self.torch
        # A mode already on either stack (left by `__init__` or an earlier call) would see
        # every operator before or after ours and could answer for it.
        pushed = f" ({'; '.join(self.pushed_before)})" if self.pushed_before else ""
        if torch._C._len_torch_dispatch_stack() > 0:
            self.modes.append(f"a dispatch mode was already active when forward was called{pushed}")
        if any(not _allowed_mode(m) for m in _function_modes(torch)):
            self.modes.append(f"a torch function mode was already active when forward was called{pushed}")
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
            self.modes.append("the dispatch mode stack changed during forward")
        if any(not _allowed_mode(m) for m in _function_modes(self.torch)):
            self.modes.append("a torch function mode was left active after forward")

    def findings(self) -> List[Tuple[str, str]]:
        """What the last watched forward did that the policy forbids: (tag, phrase) pairs."""
        out: List[Tuple[str, str]] = []
        if self.denied:
            ops = "; ".join(f"{k}{f' x{v}' if v > 1 else ''} at {self.sites.get(k, '?')}"
                            for k, v in sorted(self.denied.items()))
            out.append(("runtime-aten", f"ran PyTorch compute operators the runtime policy does not allow ({ops})"))
        if self.host_reads:
            reads = "; ".join(f"{k}{f' x{v}' if v > 1 else ''} at {self.sites.get(k, '?')}"
                              for k, v in sorted(self.host_reads.items()))
            out.append(("runtime-aten", f"read tensor data on the host ({reads})"))
        if self.modes:
            out.append(("runtime-mode", "used a dispatch or function mode of its own ("
                        + "; ".join(self.modes) + "), which could answer for operators unseen"))
        return out


# -- the modelled share of the work (mixed levels, where no GPU time is measured) --------
#
# On a GPU the candidate's kernels' share of the GPU time is measured (`runtime-share`). On
# the CPU it cannot be, and interpreter time says nothing about GPU time, so the ATen
# operators a forward leaves to PyTorch are priced by a roofline of a data-centre GPU:
# max(FLOPs / FLOP rate, bytes moved / bandwidth), FLOPs from PyTorch's own FLOP formulas
# (matmuls, convolutions, attention) and ours (attention on the CPU, recurrent layers),
# bytes from the operator's tensors. The reference's forward is priced the same way; the
# candidate's kernels are credited with what it did not leave to PyTorch:
# share = 1 - cost(candidate's PyTorch) / cost(reference). Allocation, views and copies
# (the allow-list) cost nothing on either side.
_FLOP_RATE = 5.0e13
_BYTE_RATE = 3.0e12
# Lookups read the rows they gather, not the whole table.
_GATHERS = frozenset({"embedding", "index_select", "index", "gather", "embedding_bag", "_embedding_bag", "take"})
# Recurrent layers: 2 FLOPs per weight per step and batch row.
_RNNS = frozenset({"mkldnn_rnn_layer", "mkldnn_rnn", "_cudnn_rnn", "miopen_rnn", "lstm", "gru", "rnn_tanh",
                   "rnn_relu", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell"})
_FLOP_REGISTRY: Optional[Dict[Any, Any]] = None


def _tensor_leaves(x: Any) -> List[Any]:
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(x) if isinstance(t, torch.Tensor)]


def _nbytes(t: Any) -> float:
    return float(t.numel() * t.element_size())


def op_cost(func: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any], out: Any) -> float:
    """Modelled GPU seconds of one ATen operator (see above); never raises."""
    global _FLOP_REGISTRY
    try:
        name = func.overloadpacket.__name__
        ins = _tensor_leaves(args) + _tensor_leaves(kwargs)
        outs = _tensor_leaves(out)
        if name in _GATHERS:
            moved = 2.0 * sum(_nbytes(t) for t in outs) + sum(
                _nbytes(t) for t in ins if not t.is_floating_point())
        else:
            moved = sum(_nbytes(t) for t in ins) + sum(_nbytes(t) for t in outs)
        if _FLOP_REGISTRY is None:
            from torch.utils.flop_counter import flop_registry

            _FLOP_REGISTRY = dict(flop_registry)
        flops = 0.0
        formula = _FLOP_REGISTRY.get(func.overloadpacket)
        if formula is not None:
            flops = float(formula(*args, **kwargs, out_val=out))
        elif name.startswith("_scaled_dot_product") and len(ins) >= 2:
            q, k = ins[0], ins[1]
            flops = 4.0 * q.numel() * k.shape[-2]
        elif name in _RNNS and ins:
            x = ins[0]
            rows = x.numel() / max(int(x.shape[-1]), 1)
            flops = 2.0 * rows * sum(t.numel() for t in ins[1:] if t.dim() == 2)
        return max(flops / _FLOP_RATE, moved / _BYTE_RATE)
    except Exception:  # noqa: BLE001 - a formula that cannot read these arguments: no price
        return 0.0


class CostMeter:
    """Prices every operator a forward dispatches (the reference's, for `op_cost`'s share)
    outside the allow-list; used as a context manager around the call."""

    def __init__(self, allow: Iterable[str]) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        self.cost = 0.0
        meter = self
        allowed = frozenset(allow)

        class _Meter(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Tuple[Any, ...] = (), kwargs: Any = None) -> Any:
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                ns = getattr(func, "namespace", "")
                name = func.overloadpacket.__name__
                if (name if ns == "aten" else f"{ns}::{name}") not in allowed:
                    meter.cost += op_cost(func, args, kwargs, out)
                return out

        _OURS.add(_Meter)
        self._mode = _Meter()

    def __enter__(self) -> "CostMeter":
        self.cost = 0.0
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._mode.__exit__(*exc)


# What Triton's launch paths dispatch themselves (the interpreter's argument copies).
_LAUNCH_OPS = frozenset({"empty", "new_empty", "empty_like", "empty_strided", "set_", "copy_", "_to_copy", "clone",
                         "detach", "alias", "view", "_unsafe_view", "as_strided", "contiguous",
                         "_local_scalar_dense"})

_ACTIVE: Optional[AtenRecorder] = None
# The recorder of the evaluation in progress (watching or not): foreign modes pushed
# outside a watched forward are noted there, so that the forward that finds one can name it.
_CURRENT: Optional[AtenRecorder] = None
_HOST_READS_INSTALLED = False
_WATCH_INSTALLED = False
# Mode classes of our own (the recorder's, the thread recorder's): never foreign.
_OURS: set = set()


def _on_candidate_stack(frame: Any) -> bool:
    rec = _CURRENT
    if rec is None:
        return False
    f = frame
    while f is not None:
        if f.f_code.co_filename == rec.candidate:
            return True
        f = f.f_back
    return False


def _function_modes(torch: Any) -> List[Any]:
    n = torch._C._len_torch_function_stack()
    return [torch._C._get_function_stack_at(i) for i in range(n)] if n else []


def _allowed_mode(mode: Any) -> bool:
    """Modes torch itself pushes in an honest forward (`with torch.device(...)`), or ours."""
    name = type(mode).__module__ + "." + type(mode).__qualname__
    return type(mode) in _OURS or name == "torch.utils._device.DeviceContext"


def install_thread_and_mode_watch(torch: Any) -> None:
    """Once per process, before any candidate code runs: every thread started through
    `_thread`/`threading` runs its target under a dispatch mode that reports into the
    recorder of the watched forward in progress (`TorchDispatchMode` is per thread, so a
    thread would compute unseen), and every dispatch or function mode pushed during a
    watched forward is checked against ours."""
    global _WATCH_INSTALLED
    if _WATCH_INSTALLED:
        return
    _WATCH_INSTALLED = True
    from torch.utils._python_dispatch import TorchDispatchMode

    class _ThreadMode(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Tuple[Any, ...] = (), kwargs: Any = None) -> Any:
            out = func(*args, **(kwargs or {}))
            rec = _ACTIVE
            if rec is not None:
                rec._note(func, args, out, rec.in_launch(), kwargs)
            return out

    _OURS.add(_ThreadMode)

    mine = threading.local()

    def watched(function: Any) -> Any:
        def run(*args: Any, **kwargs: Any) -> Any:
            mine.on = True
            with _ThreadMode():
                return function(*args, **kwargs)

        return run

    def wrap_start(orig: Any) -> Any:
        # Threads started while the candidate's code runs, from its code (an unwatched timed
        # call included), or by such a thread are its own; the executor's (a compile, the
        # profiler) and torch's are left alone.
        def start(function: Any, *args: Any, **kwargs: Any) -> Any:
            if candidate_running() or getattr(mine, "on", False) or _on_candidate_stack(sys._getframe(1)):
                function = watched(function)
            return orig(function, *args, **kwargs)

        start.__name__ = getattr(orig, "__name__", "start_new_thread")
        return start

    for owner, name in ((_thread, "start_new_thread"), (_thread, "start_joinable_thread"),
                        (threading, "_start_new_thread"), (threading, "_start_joinable_thread")):
        orig = getattr(owner, name, None)
        if orig is not None:
            setattr(owner, name, wrap_start(orig))

    def wrap_push(orig: Any, how: str) -> Any:
        def push(mode: Any, *args: Any, **kwargs: Any) -> Any:
            rec = _ACTIVE or _CURRENT
            if rec is not None and not _allowed_mode(mode) and not rec.in_launch():
                rec.foreign_mode(mode, how)
            return orig(mode, *args, **kwargs)

        push.__name__ = getattr(orig, "__name__", "push")
        return push

    import torch.overrides as ov
    import torch.utils._python_dispatch as pd

    for owner, name, how in ((torch._C, "_push_on_torch_dispatch_stack", "pushed dispatch mode"),
                             (torch._C, "_push_on_torch_function_stack", "pushed function mode"),
                             (pd, "_push_mode", "pushed dispatch mode"),
                             (pd, "_push_on_torch_dispatch_stack", "pushed dispatch mode"),
                             (ov, "_push_mode", "pushed function mode"),
                             (ov, "_push_on_torch_function_stack", "pushed function mode")):
        orig = getattr(owner, name, None)
        if orig is not None:
            setattr(owner, name, wrap_push(orig, how))


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
                    rec.host_read(f"Tensor.{name}")
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
