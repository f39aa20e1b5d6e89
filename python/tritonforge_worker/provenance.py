"""Which of the candidate's own Triton kernels ran: launch hooks.

A kernel counts as the candidate's own when its Python function was defined in
the candidate's file. On a GPU every compiled launch passes Triton's
`launch_enter_hook` with the kernel's function handle; the handles of the
candidate's kernels are read from their JIT caches. Under the interpreter
(CPU mode) there are no handles, so `InterpretedFunction.run` is wrapped.
A forward that launched none of them is PyTorch in disguise (or a decoy).

Time inside a launch path (`JITFunction.run`, compiles included, and the
interpreter's `InterpretedFunction.run`) is counted per thread, so that the
runtime layers leave Triton's own work alone (the interpreter copies tensors with
ATen operators; a compile spawns `ptxas` and opens cache files). On a GPU the
enter and exit hooks can also record CUDA events around each launch, from which
the candidate kernels' share of a forward's GPU window is measured.

During a watched call the enter hook also holds back the first launch on any stream
other than the caller's behind a spin of about ten milliseconds (`hold`). Work that the
candidate joined to the caller's stream only waits; work it left running is still
unfinished when the evaluator copies the outputs at return, every time, so the
late-write check no longer depends on how fast the side stream happens to be.
"""

from __future__ import annotations

import threading
from time import perf_counter
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from .protocol import KernelLaunches, Provenance

# GPU clock cycles a watched call's first launch on another stream waits: about 10 ms at
# 2 GHz, far longer than the host needs from that launch to the copy at return, even on a
# loaded machine.
SIDE_STREAM_HOLD_CYCLES = 20_000_000


class Tampered(RuntimeError):
    """The candidate removed or replaced the launch hooks."""


class LaunchRecorder:
    def __init__(self, candidate_path: str, lease: Any) -> None:
        self.path = candidate_path
        self.lease = lease
        self.own: List[Any] = []
        self.own_ids: Set[int] = set()
        self.handle_counts: Dict[Any, int] = {}
        self.handle_streams: Dict[Any, Set[Any]] = {}
        self.interp_counts: Dict[int, int] = {}
        self.own_handles: Dict[Any, str] = {}
        self._resolved_at = -1
        self.calls = 0
        self.calls_without_launch = 0
        # Milliseconds inside Triton's compiles (where a candidate's time goes).
        self.compile_ms = 0.0
        # Depth inside one of Triton's launch paths, per thread.
        self._depth: Dict[int, int] = {}
        self._hook: Optional[Callable[..., None]] = None
        self._exit_hook: Optional[Callable[..., None]] = None
        # While a list: (handle, stream, start event, end event) of every launch (GPU share).
        self.marks: Optional[List[List[Any]]] = None
        # While set (a watched call on a GPU): the caller's raw stream, and the other
        # streams whose first launch in this call was already held back.
        self.hold: Optional[Tuple[Any, Set[Any]]] = None
        self.held = 0
        self._patched: Dict[Any, Any] = {}
        self._originals: Dict[Any, Any] = {}

    def _is_own(self, fn: Any) -> bool:
        code = getattr(fn, "__code__", None)
        return code is not None and code.co_filename == self.path

    def install(self) -> None:
        import triton.runtime.interpreter as interp
        import triton.runtime.jit as jit
        from triton import knobs

        recorder = self

        def register(cls: Any) -> None:
            orig_init = cls.__init__
            self._originals[(cls, "__init__")] = orig_init

            def __init__(self: Any, fn: Any, *args: Any, **kwargs: Any) -> None:
                orig_init(self, fn, *args, **kwargs)
                if recorder._is_own(fn):
                    recorder.own.append(self)
                    recorder.own_ids.add(id(self))

            cls.__init__ = __init__
            self._patched[(cls, "__init__")] = __init__

        register(jit.JITFunction)
        register(interp.InterpretedFunction)

        orig_interp_run = interp.InterpretedFunction.run
        self._originals[(interp.InterpretedFunction, "run")] = orig_interp_run

        depth = self._depth
        ident = threading.get_ident

        def interp_run(self: Any, *args: Any, grid: Any, warmup: Any, **kwargs: Any) -> Any:
            if not warmup and id(self) in recorder.own_ids:
                recorder.interp_counts[id(self)] = recorder.interp_counts.get(id(self), 0) + 1
            t = ident()
            depth[t] = depth.get(t, 0) + 1
            try:
                return orig_interp_run(self, *args, grid=grid, warmup=warmup, **kwargs)
            finally:
                depth[t] -= 1

        interp.InterpretedFunction.run = interp_run
        self._patched[(interp.InterpretedFunction, "run")] = interp_run

        orig_jit_run = jit.JITFunction.run
        self._originals[(jit.JITFunction, "run")] = orig_jit_run

        def jit_run(self: Any, *args: Any, **kwargs: Any) -> Any:
            t = ident()
            depth[t] = depth.get(t, 0) + 1
            try:
                return orig_jit_run(self, *args, **kwargs)
            finally:
                depth[t] -= 1

        jit.JITFunction.run = jit_run
        self._patched[(jit.JITFunction, "run")] = jit_run

        # Compiling is CPU work: let other candidates use the GPU meanwhile.
        orig_compile = jit.JITFunction._do_compile
        self._originals[(jit.JITFunction, "_do_compile")] = orig_compile

        def timed_compile(self: Any, *args: Any, **kwargs: Any) -> Any:
            t = perf_counter()
            try:
                return orig_compile(self, *args, **kwargs)
            finally:
                recorder.compile_ms += (perf_counter() - t) * 1000.0

        def _do_compile(self: Any, *args: Any, **kwargs: Any) -> Any:
            return recorder.lease.released_during(lambda: timed_compile(self, *args, **kwargs))

        jit.JITFunction._do_compile = _do_compile
        self._patched[(jit.JITFunction, "_do_compile")] = _do_compile

        counts = self.handle_counts
        streams = self.handle_streams

        def hook(metadata: Any) -> None:
            data = getattr(metadata, "data", None)
            handle = data.get("function") if isinstance(data, dict) else None
            counts[handle] = counts.get(handle, 0) + 1
            stream = data.get("stream") if isinstance(data, dict) else None
            seen = streams.get(handle)
            if seen is None:
                streams[handle] = {stream}
            elif stream not in seen:
                seen.add(stream)
            hold = recorder.hold
            if hold is not None and stream is not None and stream != hold[0] and stream not in hold[1]:
                hold[1].add(stream)
                if _stall(stream):
                    recorder.held += 1
            if recorder.marks is not None:
                recorder.marks.append([handle, stream, _event(stream), None])

        def exit_hook(metadata: Any) -> None:
            marks = recorder.marks
            if marks and marks[-1][3] is None:
                marks[-1][3] = _event(marks[-1][1])

        self._hook = hook
        self._exit_hook = exit_hook
        knobs.runtime.launch_enter_hook.add(hook)
        knobs.runtime.launch_exit_hook.add(exit_hook)

    def in_launch(self) -> bool:
        """True inside one of Triton's launch paths on the calling thread."""
        return self._depth.get(threading.get_ident(), 0) > 0

    def uninstall(self) -> None:
        """Put back what `install` replaced (after the worker's own warm-up)."""
        from triton import knobs

        for (cls, name), orig in self._originals.items():
            setattr(cls, name, orig)
        if self._hook is not None:
            knobs.runtime.launch_enter_hook.remove(self._hook)
        if self._exit_hook is not None:
            knobs.runtime.launch_exit_hook.remove(self._exit_hook)

    def check_intact(self) -> None:
        """Raise if anything the recorder installed was removed or replaced."""
        from triton import knobs

        for (cls, name), fn in self._patched.items():
            if cls.__dict__.get(name) is not fn:
                raise Tampered(f"{cls.__name__}.{name} was replaced")
        for chain, hook in ((knobs.runtime.launch_enter_hook, self._hook),
                            (knobs.runtime.launch_exit_hook, self._exit_hook)):
            calls = getattr(chain, "calls", None)
            if not isinstance(calls, list) or hook not in calls:
                raise Tampered("Triton's launch hook chains were changed")

    def _resolve(self) -> None:
        """Map compiled-kernel handles back to the candidate's kernels (only when new handles appeared)."""
        if len(self.handle_counts) == self._resolved_at:
            return
        self._resolved_at = len(self.handle_counts)
        for jf in self.own:
            caches = getattr(jf, "device_caches", None)
            if not isinstance(caches, dict):
                continue
            for entry in list(caches.values()):
                kernel_cache = entry[0] if isinstance(entry, tuple) and entry else None
                if not isinstance(kernel_cache, dict):
                    continue
                for kernel in list(kernel_cache.values()):
                    handle = getattr(kernel, "function", None)
                    if handle is not None:
                        self.own_handles[handle] = str(getattr(kernel, "name", jf.__name__))

    def foreign_streams(self, stream: Any) -> bool:
        """True if any of the candidate's kernels was launched on a stream other than `stream`."""
        self._resolve()
        return any(s != stream for h in self.own_handles for s in self.handle_streams.get(h, ()))

    def own_launches(self) -> int:
        self._resolve()
        gpu = sum(self.handle_counts.get(h, 0) for h in self.own_handles)
        return gpu + sum(self.interp_counts.values())

    def observe(self, before: int) -> bool:
        """Count one forward call that started when `own_launches()` was `before`; True if it launched one."""
        self.check_intact()
        self.calls += 1
        if self.own_launches() > before:
            return True
        self.calls_without_launch += 1
        return False

    def own_gpu_ms(self, marks: List[List[Any]]) -> Tuple[float, int]:
        """GPU milliseconds between the events around each launch of the candidate's own
        kernels in `marks` (synchronised before), and how many launches were measured."""
        self._resolve()
        total = 0.0
        n = 0
        for handle, _, start, end in marks:
            if handle in self.own_handles and start is not None and end is not None:
                total += float(start.elapsed_time(end))
                n += 1
        return total, n

    def kernel_names(self) -> Set[str]:
        self._resolve()
        names = set(self.own_handles.values())
        names.update(getattr(jf, "__name__", "?") for jf in self.own)
        return names

    def summary(self, gpu_share: Optional[float] = None) -> Provenance:
        self._resolve()
        per_name: Dict[str, int] = {}
        for handle, name in self.own_handles.items():
            per_name[name] = per_name.get(name, 0) + self.handle_counts.get(handle, 0)
        for jf in self.own:
            n = self.interp_counts.get(id(jf), 0)
            if n:
                name = getattr(jf, "__name__", "?")
                per_name[name] = per_name.get(name, 0) + n
        kernels = [KernelLaunches(name=k, launches=v) for k, v in sorted(per_name.items())]
        return Provenance(kernels=kernels, calls=self.calls, calls_without_launch=self.calls_without_launch,
                          gpu_share=gpu_share)


def _event(stream: Any) -> Any:
    """A timing CUDA event recorded now on the stream with this raw handle."""
    import torch

    ev = torch.cuda.Event(enable_timing=True)
    current = torch.cuda.current_stream()
    ev.record(current if current.cuda_stream == stream else torch.cuda.ExternalStream(stream))
    return ev


def _stall(stream: Any) -> bool:
    """Enqueue a spin of `SIDE_STREAM_HOLD_CYCLES` on the stream with this raw handle
    (before the launch the hook announces); False where that is not safe: a stream being
    captured into a CUDA graph would keep the spin in every replay."""
    import torch

    try:
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            if torch.cuda.is_current_stream_capturing():
                return False
            torch.cuda._sleep(SIDE_STREAM_HOLD_CYCLES)
        return True
    except Exception:  # noqa: BLE001 - a stream the driver refuses: the launch itself will say so
        return False
