"""Python audit hooks over the candidate's own code.

`sys.addaudithook` sees what no dispatch mode can: processes started, files opened, code
compiled and executed, frames and the heap searched, `ctypes` calls. One hook is added
per process (it cannot be removed); it does nothing unless a `Watch` is active, and
nothing inside one of Triton's launch paths (compiles spawn `ptxas` and open cache files).

What it records, while the candidate's code runs (its import, `ModelNew(...)`, every
watched forward):

- a process started (`os.system`, `subprocess.Popen`, `os.exec*`, `os.posix_spawn`,
  `os.fork`...), by anyone;
- the problem file opened, by anyone (the executor's own reads happen outside a watch);

and only during a watched forward, where the candidate's own code (its file, or code it
compiled or executed) did it:

- `open` of any file (imports and `linecache` excepted: torch may import lazily, and
  warnings read source lines);
- `exec`/`compile` (imports excepted);
- frame and heap access: `sys._getframe` (`inspect.currentframe`), `sys._current_frames`,
  the audited frame, code and traceback attributes, `gc.get_objects`/`get_referrers`/
  `get_referents`;
- any `ctypes` event.

The candidate's frames are found by file name: the innermost frame outside the
standard library must be the candidate's (so `inspect.currentframe()` counts, torch's
own use of `sys._getframe` does not); for `open`, any frame of the candidate's on the
stack counts (so `torch.load(path)` called by it does too).
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

_SPAWN = frozenset({
    "os.system", "subprocess.Popen", "os.exec", "os.posix_spawn", "os.fork", "os.forkpty", "os.spawn",
    "pty.spawn", "os.startfile",
})
_INTROSPECT = frozenset({
    "sys._getframe", "sys._current_frames", "sys._getframemodulename", "object.__getattr__", "gc.get_objects",
    "gc.get_referrers", "gc.get_referents",
})
_STDLIB = tuple(sorted({os.path.join(p, "") for p in (sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib"))
                        if p}))


def is_stdlib(filename: str) -> bool:
    """A frame of the standard library (frozen modules included), not of an installed package."""
    if filename.startswith("<frozen "):
        return True
    return filename.startswith(_STDLIB) and "-packages" + os.sep not in filename


def not_a_file(filename: str) -> bool:
    """Code that was compiled from a string (`exec`, `compile`), not read from a file."""
    return filename.startswith("<") and not filename.startswith("<frozen ")


def site(frame: Any, candidate: str, lines: List[str]) -> str:
    """Where on the stack from `frame` outwards the candidate is: the innermost frame of its
    file (`cand.py:14 (y = torch.relu(x))`), naming code it ran through exec/compile on the
    way (`<string>:2`); without a frame of its file, the innermost such code, if any."""
    exec_site = ""
    name = os.path.basename(candidate)
    f = frame
    while f is not None:
        fn = f.f_code.co_filename
        if fn == candidate:
            n = f.f_lineno or 0
            code = lines[n - 1].strip() if 0 < n <= len(lines) else ""
            where = f"{name}:{n}" + (f" ({code[:80]})" if code else "")
            return where + (f", through code it ran with exec/compile at {exec_site}" if exec_site else "")
        if not exec_site and not_a_file(fn):
            exec_site = f"{fn}:{f.f_lineno}"
        f = f.f_back
    if exec_site:
        return f"{exec_site} (code run through exec/compile; no frame of {name} on the stack)"
    return f"no frame of {name} on the stack"


class Watch:
    """What the audit hook records for one evaluation."""

    def __init__(self, candidate: str, lines: List[str], problem: str, in_launch: Callable[[], bool]) -> None:
        self.candidate = candidate
        self.lines = lines
        self.problem = os.path.realpath(problem)
        self.problem_name = os.path.basename(problem)
        self.in_launch = in_launch
        # Files of code the candidate compiled or executed: its frames too.
        self.derived: Set[str] = set()
        # "load" (import, ModelNew(...)) or "forward" (a watched call); None: not watching.
        self.phase: Optional[str] = None
        self.found: Dict[str, str] = {}

    def watching(self, phase: str) -> "_Phase":
        return _Phase(self, phase)

    def take(self) -> List[str]:
        """What was recorded since the last call, as phrases naming the event and where."""
        out = [f"{what} at {where}" for what, where in self.found.items()]
        self.found = {}
        return out

    def _own(self, filename: str) -> bool:
        return filename == self.candidate or filename in self.derived

    def _origin(self, frame: Any) -> Tuple[Any, bool]:
        """The innermost frame outside the standard library, and whether the import system
        is between it and the event."""
        importing = False
        f = frame
        while f is not None:
            fn = f.f_code.co_filename
            if fn.startswith("<frozen importlib"):
                importing = True
            if not is_stdlib(fn):
                return f, importing
            f = f.f_back
        return None, importing

    def _note(self, what: str, frame: Any) -> None:
        if what not in self.found and len(self.found) < 8:
            self.found[what] = site(frame, self.candidate, self.lines)

    def see(self, event: str, args: Tuple[Any, ...], frame: Any) -> None:
        if self.in_launch():
            return
        if event in _SPAWN or event.startswith("os.exec") or event.startswith("os.spawn"):
            self._note(f"started a process ({event} {_short(args)})", frame)
            return
        if event == "open":
            path = args[0] if args else None
            if isinstance(path, bytes):
                path = os.fsdecode(path)
            if isinstance(path, str):
                if os.path.basename(path) == self.problem_name and os.path.realpath(path) == self.problem:
                    self._note("opened the problem file", frame)
                    return
                if self.phase == "forward" and self._opened_by_candidate(frame):
                    self._note(f"opened a file ({path[-120:]})", frame)
            return
        if event in ("exec", "compile"):
            origin, importing = self._origin(frame)
            if origin is None or importing or not self._own(origin.f_code.co_filename):
                return
            code = args[0] if args else None
            name = getattr(code, "co_filename", None) if event == "exec" else (args[1] if len(args) > 1 else None)
            if isinstance(name, str):
                self.derived.add(name)
            if self.phase == "forward":
                self._note(f"ran {event}() on code it built", frame)
            return
        if self.phase != "forward":
            return
        if event in _INTROSPECT or event.startswith("ctypes."):
            origin, _ = self._origin(frame)
            if origin is not None and self._own(origin.f_code.co_filename):
                detail = f" {args[1]}" if event == "object.__getattr__" and len(args) > 1 else ""
                self._note(f"used {event}{detail}", frame)

    def _opened_by_candidate(self, frame: Any) -> bool:
        own = False
        f = frame
        while f is not None:
            fn = f.f_code.co_filename
            if fn.startswith("<frozen importlib") or fn.endswith(os.sep + "linecache.py"):
                return False
            own = own or self._own(fn)
            f = f.f_back
        return own


class _Phase:
    def __init__(self, watch: Watch, phase: str) -> None:
        self.watch = watch
        self.phase = phase
        self.before: Optional[str] = None

    def __enter__(self) -> Watch:
        global _WATCH
        self.before = self.watch.phase
        self.watch.phase = self.phase
        _WATCH = self.watch
        return self.watch

    def __exit__(self, *exc: Any) -> None:
        self.watch.phase = self.before


_WATCH: Optional[Watch] = None
_BUSY = threading.local()
_INSTALLED = False


def _short(args: Tuple[Any, ...]) -> str:
    text = " ".join(repr(a) for a in args[:2])
    return text[:100]


def _hook(event: str, args: Tuple[Any, ...]) -> None:
    w = _WATCH
    if w is None or w.phase is None:
        return
    if getattr(_BUSY, "on", False):
        return
    _BUSY.on = True
    try:
        # Frame 0 is this hook; 1 the Python code that raised the event.
        w.see(event, args, sys._getframe(1))
    except BaseException:  # noqa: BLE001 - an exception here would fail the audited call itself
        pass
    finally:
        _BUSY.on = False


def candidate_running() -> bool:
    """True while the candidate's code runs under a watch (its import, `ModelNew(...)`, a
    watched forward)."""
    w = _WATCH
    return w is not None and w.phase is not None


def install(watch: Watch) -> None:
    """Make `watch` the one the process's audit hook reports into (adding the hook once)."""
    global _WATCH, _INSTALLED
    _WATCH = watch
    if not _INSTALLED:
        _INSTALLED = True
        sys.addaudithook(_hook)

