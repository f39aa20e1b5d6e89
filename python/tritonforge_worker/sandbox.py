"""Confine a worker before it sees a candidate: rlimits, a GPU memory cap, and
landlock (write only under the scratch directory and /dev, no TCP, no signals
or abstract sockets outside the process) where the kernel supports it.

Applied after the warm-up and before hello, so it costs nothing on the critical
path; everything a candidate does afterwards (including Triton's compiler
subprocesses, which inherit the domain) runs under it.
"""

from __future__ import annotations

import ctypes
import os
import resource
from typing import List, Optional

from .protocol import Sandbox

_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# Filesystem rights that modify something; reading stays open (torch, triton, the
# CUDA libraries and the compiler read all over the file system).
_WRITE_FILE = 1 << 1
_REMOVE_DIR = 1 << 4
_REMOVE_FILE = 1 << 5
_MAKE_ALL = sum(1 << b for b in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
_REFER = 1 << 13  # ABI 2
_TRUNCATE = 1 << 14  # ABI 3
_NET_BIND_TCP = 1 << 0  # ABI 4
_NET_CONNECT_TCP = 1 << 1
_SCOPE_ABSTRACT_UNIX = 1 << 0  # ABI 6
_SCOPE_SIGNAL = 1 << 1


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> Optional[int]:
    """The kernel's landlock ABI version, or None where landlock is unavailable."""
    try:
        libc = _libc()
        libc.syscall.restype = ctypes.c_long
        v = libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return None
    return int(v) if v > 0 else None


def _landlock(writable: List[str], abi: int) -> List[str]:
    """Restrict this process (and its future children); returns what is enforced."""
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    handled_fs = _WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE_ALL
    if abi >= 2:
        handled_fs |= _REFER
    if abi >= 3:
        handled_fs |= _TRUNCATE
    handled_net = (_NET_BIND_TCP | _NET_CONNECT_TCP) if abi >= 4 else 0
    scoped = (_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL) if abi >= 6 else 0
    attr = (ctypes.c_uint64 * 3)(handled_fs, handled_net, scoped)
    size = 8 if abi < 4 else (16 if abi < 6 else 24)
    fd = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:

        class PathBeneath(ctypes.Structure):
            _pack_ = 1
            _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

        for path in writable:
            pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = PathBeneath(handled_fs, pfd)
                added = libc.syscall(_SYS_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(_RULE_PATH_BENEATH),
                                     ctypes.byref(rule), ctypes.c_uint32(0))
                if added != 0:
                    raise OSError(ctypes.get_errno(), f"landlock_add_rule failed for {path}")
            finally:
                os.close(pfd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(fd)
    enforced = ["filesystem"]
    if handled_net:
        enforced.append("network")
    if scoped:
        enforced.append("signals")
    return enforced


def _cap(limit: int, value: int) -> None:
    soft, hard = resource.getrlimit(limit)
    new = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(limit, (new, new))


def apply(scratch: str, mode: str) -> Sandbox:
    notes: List[str] = []
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _cap(resource.RLIMIT_FSIZE, 4 << 30)
    _cap(resource.RLIMIT_NOFILE, int(os.environ.get("TRITONFORGE_MAX_FILES", "4096")))
    _cap(resource.RLIMIT_NPROC, int(os.environ.get("TRITONFORGE_MAX_PROCS", "4096")))
    if os.geteuid() == 0:
        notes.append("running as root: RLIMIT_NPROC is not enforced for root")

    fraction: Optional[float] = None
    if mode == "cuda":
        raw = os.environ.get("TRITONFORGE_GPU_MEM_FRACTION")
        if raw:
            import torch

            fraction = float(raw)
            torch.cuda.set_per_process_memory_fraction(fraction)

    enforced: List[str] = []
    abi = landlock_abi()
    if os.environ.get("TRITONFORGE_SANDBOX", "1") == "0":
        notes.append("landlock disabled by configuration")
    elif abi is None:
        notes.append("landlock unavailable in this kernel: file-system and network rules are not enforced")
    else:
        try:
            enforced = _landlock([scratch, "/dev"], abi)
        except OSError as exc:
            notes.append(f"landlock could not be applied: {exc}")
        if abi < 4:
            notes.append(f"landlock ABI {abi} < 4: network access is not restricted")
        if abi < 6:
            notes.append(f"landlock ABI {abi} < 6: signals to other processes are not restricted")
    return Sandbox(
        landlock_abi=abi,
        filesystem="filesystem" in enforced,
        network="network" in enforced,
        signals="signals" in enforced,
        gpu_memory_fraction=fraction,
        notes=notes,
    )
