"""The timing gate: a one-thread GPU kernel queued before a timed window that polls a flag
in pinned host memory and ends only once the host has enqueued the whole call and its
end event, and says so. The window's start event follows it, so no window can hold the
host's launch latency, however late the host is (a descheduled launcher thread once made
an honest 12 µs kernel time at 71 µs under a fixed spin: docs/evaluator.md). The spin it
replaces had to last 2.5 times the launch it covered; the gate lasts exactly as long.

A gate that is never released gives up after `MAX_POLLS` polls and records that it did:
a call that fills the device's launch queue, or that waits for the device itself (a
`.item()` in `forward`), would otherwise wait for a gate that waits for it. The executor
tries the gate on each candidate's probe round (`probe`: twice, on fresh gates) and times
with the spin where it gave up both times.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional

from .protocol import SpinBecause

# Polls of the host flag before a gate gives up (each crosses the bus: about a
# microsecond, so some tens of milliseconds in all).
MAX_POLLS = 50_000
# Gates one timed run may queue (its windows: at most 1,000 repetitions of 4 arms, plus
# the probe); slots are reused beyond that, and only counts are read.
SLOTS = 4_608
# Gated probe rounds a candidate gets before it is timed under the spin: one host stall
# past the polls (sixteen processes starting at once did it to 6 of 76 candidates in the
# mixed 100: docs/results/evaluator-load.md) is not a call that cannot be gated.
PROBES = 2

_KERNEL: Any = None
_WORKS: Optional[bool] = None
# Why the check said no (`SpinBecause` in the protocol), for the record.
_WHY_NOT: Optional[SpinBecause] = None


def kernel() -> Any:
    """The gate kernel, defined once per process (Triton compiles it at its first launch)."""
    global _KERNEL
    if _KERNEL is None:
        import triton
        import triton.language as tl

        # The integers change every launch: specialised (== 1, multiple of 16), each new
        # pattern would be a compile inside the exclusive hold (measured: +1 ms a window).
        @triton.jit(do_not_specialize=["slot", "target", "max_polls"])
        def tf_timing_gate(flag_ptr, out_ptr, slot, target, max_polls):  # type: ignore[no-untyped-def]
            seen = tl.load(flag_ptr, volatile=True)
            polls = 0
            while (seen < target) & (polls < max_polls):
                seen = tl.load(flag_ptr, volatile=True)
                polls += 1
            tl.store(out_ptr + slot, (seen >= target).to(tl.int32))

        _KERNEL = tf_timing_gate
    return _KERNEL


class Gate:
    """The gates of one timed run: `hold` before a window's start event, `release` after
    its end event (and always, if the call raises), `given_up` once the device is idle."""

    def __init__(self, torch: Any, device: Any, pinned: bool = True, max_polls: int = MAX_POLLS) -> None:
        self.flag = torch.zeros(1, dtype=torch.int32, pin_memory=pinned)
        self.host = self.flag.numpy()  # a host write the device sees, without a torch op
        self.out = torch.zeros(SLOTS, dtype=torch.int32, device=device)
        self.kernel = kernel()
        self.max_polls = max_polls
        self.queued = 0

    def hold(self) -> None:
        """Queue a gate: the stream waits here until the matching `release`."""
        self.queued += 1
        self.kernel[(1,)](self.flag, self.out, (self.queued - 1) % SLOTS, self.queued, self.max_polls)

    def release(self) -> None:
        """Let every gate queued so far pass (the flag only grows: a late gate never waits
        for a release that came before it)."""
        self.host[0] = self.queued

    def given_up(self) -> int:
        """Gates that ended without their release (read once the device is idle)."""
        n = min(self.queued, SLOTS)
        return n - int(self.out[:n].sum().item())


def works(torch: Any, device: Any, tries: int = PROBES + 1) -> bool:
    """Whether a gate holds this device's stream until released, once per process: queued,
    then released 2 ms later by the host, it must have held the stream that long and
    ended released, in one of `tries` tries (the check runs in every process's warm-up,
    sixteen starting at once; in one batch it failed for 27 of 76 candidates, a host
    stall past the polls suspected). False where Triton cannot read pinned host
    memory, anything raises, or `TRITONFORGE_TIMING_GATE=0` asks for the spin (the
    executor then keeps the spin)."""
    global _WORKS, _WHY_NOT
    if _WORKS is None and os.environ.get("TRITONFORGE_TIMING_GATE", "1") == "0":
        _WORKS, _WHY_NOT = False, "asked"  # asked for the spin
    if _WORKS is None:
        import time

        try:
            gate = Gate(torch, device)
            gate.hold()  # the first launch compiles it
            gate.release()
            torch.cuda.synchronize()
            _WORKS = False
            for _ in range(tries):
                gate = Gate(torch, device)
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                gate.hold()
                b.record()
                time.sleep(0.002)
                gate.release()
                b.synchronize()
                if gate.given_up() > 0:
                    _WHY_NOT = "check_gave_up"
                elif float(a.elapsed_time(b)) < 1.0:
                    _WHY_NOT = "check_held_short"
                else:
                    _WORKS, _WHY_NOT = True, None
                    break
        except Exception:  # noqa: BLE001 - any failure means: time with the spin
            _WORKS, _WHY_NOT = False, "check_raised"
    return _WORKS


def why_not() -> Optional[SpinBecause]:
    """Why `works` said no in this process (None if it said yes or was not asked)."""
    return _WHY_NOT


def probe(make: Callable[[], Gate], play: Callable[[Gate], None], settle: Callable[[], None],
          tries: int = PROBES) -> Optional[Gate]:
    """A gate that held every call of one probe round (`play` queues the round through it,
    `settle` waits for the device), on a fresh gate each try; None when every try had a
    gate give up: the executor then times under the spin. A call that fills the launch
    queue or waits for the device gives up every time, a stalled host once."""
    for _ in range(tries):
        gate = make()
        play(gate)
        settle()
        if gate.given_up() == 0:
            return gate
    return None
