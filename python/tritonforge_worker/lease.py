"""The worker's side of GPU leases.

A candidate holds its GPU `shared` while it imports, builds and checks
correctness (others may do the same at once) and `exclusive` while it is timed
(nothing else runs on that GPU). The host grants; the worker blocks until it does.
"""

from __future__ import annotations

import time
from typing import IO, Callable, Dict, Optional

from .protocol import LeaseGrant, LeaseRelease, LeaseRequest, ProtocolError, decode, encode


class LeaseError(RuntimeError):
    """The host did not answer a lease request properly."""


class Lease:
    def __init__(self, out: IO[str], inp: IO[str], job_id: str) -> None:
        self._out = out
        self._in = inp
        self._id = job_id
        self.held: Optional[str] = None
        # Milliseconds spent waiting for each kind of grant (where a candidate's time goes).
        self.waited_ms: Dict[str, float] = {}

    def _send(self, message: object) -> None:
        self._out.write(encode(message) + "\n")
        self._out.flush()

    def hold(self, kind: Optional[str]) -> None:
        """Hold the GPU this way (`None`: not at all); blocks until the host grants."""
        if kind == self.held:
            return
        if kind is None:
            self._send(LeaseRelease(type="lease_release", id=self._id))
            self.held = None
            return
        asked = time.perf_counter()
        self._send(LeaseRequest(type="lease_request", id=self._id, kind=kind))  # type: ignore[arg-type]
        line = self._in.readline()
        self.waited_ms[kind] = self.waited_ms.get(kind, 0.0) + (time.perf_counter() - asked) * 1000.0
        if not line:
            raise LeaseError("the host closed the channel while a lease was pending")
        try:
            grant = decode(line)
        except ProtocolError as exc:
            raise LeaseError(f"bad lease grant: {exc}") from exc
        if not isinstance(grant, LeaseGrant) or grant.id != self._id or grant.kind != kind:
            raise LeaseError(f"expected a {kind} lease grant for {self._id}, got {line.strip()[:200]}")
        self.held = kind

    def released_during(self, fn: Callable[[], object]) -> object:
        """Run `fn` (a compile: CPU work only) without holding the GPU, then take the hold back."""
        before = self.held
        self.hold(None)
        try:
            return fn()
        finally:
            self.hold(before)


class NoLease:
    """For in-process uses with no host (warm-up): every hold is granted at once."""

    def __init__(self) -> None:
        self.held: Optional[str] = None
        self.waited_ms: Dict[str, float] = {}

    def hold(self, kind: Optional[str]) -> None:
        self.held = kind

    def released_during(self, fn: Callable[[], object]) -> object:
        return fn()
