"""CPU mode's fork server: torch and triton imported and warmed up once, then one
child forked per candidate.

Starting an executor costs about 2.8 CPU-seconds (imports and the warm-up) against
well under one second for a small candidate's whole evaluation under the
interpreter, so on a CPU machine start-up was most of the evaluator's work. A fork
gives each candidate the same fresh, warmed-up state a newly started process has,
in milliseconds. The child then applies its own sandbox, exactly as a started
process does; the server itself never runs candidate code.

Control channel (internal to the pool, not the executor protocol): stdin is a Unix
stream socket. The host sends one JSON line per child, `{"id", "dir", "stderr",
"env"}`, with two file descriptors attached (SCM_RIGHTS): the read end of a pipe that
becomes the child's stdin and the write end of one that becomes its stdout, the
same layout a started process has. Replies go to stdout, one JSON line
each: `{"fork_server": pid}` once ready, `{"id", "pid"}` or `{"id", "error"}` per
request, and `{"exited": pid, "status": raw wait status}` as children end, since
only the server can reap them.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import tempfile
import traceback
from typing import IO, Any, Callable, Dict, List, Tuple

# File descriptors one request carries: the child's stdin and stdout.
_FDS = 2


def _send(out: IO[str], message: Dict[str, Any]) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


def _reap(out: IO[str]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(out, {"exited": pid, "status": status})


def single_threaded() -> bool:
    """Forking is only safe with no other thread (one could hold a lock, or be an
    OpenMP team the child cannot use); otherwise the process serves one candidate."""
    return len(os.listdir("/proc/self/task")) == 1


def _not_dumpable() -> None:
    """Same-user processes, children included, may not trace this one or read its
    memory and file descriptors through /proc, landlock or not (PR_SET_DUMPABLE 0;
    inherited by the children, which is fine: nothing reads their /proc either)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0)")


def serve_forks(ctl_out: IO[str], become_worker: Callable[[], int]) -> int:
    _not_dumpable()
    sock = socket.socket(fileno=0)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda _sig, _frame: None)
    signal.set_wakeup_fd(wake_w)
    _send(ctl_out, {"fork_server": os.getpid()})
    buf = b""
    fds: List[int] = []
    watched: List[socket.socket | int] = [sock, wake_r]
    while True:
        ready, _, _ = select.select(watched, [], [])
        if wake_r in ready:
            while True:
                try:
                    if not os.read(wake_r, 512):
                        break
                except BlockingIOError:
                    break
        _reap(ctl_out)
        if sock not in ready:
            continue
        data, got, flags, _addr = socket.recv_fds(sock, 1 << 16, 4 * _FDS)
        fds.extend(got)
        if not data:
            return 0  # the host is gone
        if flags & socket.MSG_CTRUNC:
            return _give_up(fds, "file descriptors were cut off")
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            try:
                req = json.loads(line)
                rid = req["id"]
            except (ValueError, KeyError, TypeError) as exc:
                # Requests and descriptors would no longer pair up: stop; the host starts
                # processes instead.
                return _give_up(fds, f"bad request: {exc}")
            if len(fds) < _FDS:
                return _give_up(fds, "a request carried no pipes")
            pipes = (fds.pop(0), fds.pop(0))
            sys.stderr.flush()
            ctl_out.flush()
            try:
                pid = os.fork()
            except OSError as exc:
                for fd in pipes:
                    os.close(fd)
                _send(ctl_out, {"id": rid, "error": f"fork: {exc}"})
                continue
            if pid == 0:
                code = 70
                try:
                    _child(req, pipes, sock)
                    code = become_worker()
                except BaseException:  # noqa: BLE001 - a child must never return into the server loop
                    traceback.print_exc()
                finally:
                    try:
                        sys.stderr.flush()
                    finally:
                        os._exit(code)
            for fd in pipes:
                os.close(fd)
            _send(ctl_out, {"id": rid, "pid": pid})


def _give_up(fds: List[int], why: str) -> int:
    for fd in fds:
        os.close(fd)
    sys.stderr.write(f"fork server: {why}\n")
    return 2


def _child(req: Dict[str, Any], pipes: Tuple[int, int], sock: socket.socket) -> None:
    """Turn a fresh fork into a process the host cannot tell from a started one:
    its own session (the host kills it by process group), its own stderr file,
    the host's pipes as stdin and stdout, nothing else of the server's open, its own
    directory and environment."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()
    sock.detach()  # fd 0 is about to be the child's stdin; the object must not close it
    err = os.open(req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(err, 2)
    os.dup2(pipes[0], 0)
    os.dup2(pipes[1], 1)
    # The server's control socket, its wake-up pipe and every other inherited fd:
    # a candidate must not be able to ask the server for anything.
    os.closerange(3, max(os.sysconf("SC_OPEN_MAX"), 1 << 20))
    os.chdir(req["dir"])
    env = req.get("env") or {}
    for key, value in env.items():
        os.environ[str(key)] = str(value)
    os.environ.pop("TRITONFORGE_FORK_SERVER", None)
    tempfile.tempdir = None  # re-read TMPDIR
