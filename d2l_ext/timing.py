"""Timing work on a device by the book's rules (PyTorch).

1. **Warm up the exact call.** Every function here first runs ``f()`` ``warmup`` times, with
   the shapes it will be timed with: first use loads kernels, plans algorithms and grows the
   allocator's pool, and none of that belongs in the timing.
2. **Never time sub-millisecond device work as one call between two barriers.** A single
   short kernel between barriers measures the launch and the barrier, not the work.
   :func:`time_per_call` times blocks of back-to-back calls that last at least ``min_block``
   seconds between barriers; :func:`device_time` reads CUDA events around at least
   :data:`MIN_CALLS` calls queued behind a *blocker* (a kernel that keeps the GPU busy while
   the host issues them), so that the device runs them back to back and never waits for the
   host.
3. **Show the spread.** Each function returns a :class:`~d2l_ext.utils.Timing` of seconds per
   call, its median and range over ``repeats`` measurements; each Timing says whether it was
   disturbed (:attr:`~d2l_ext.utils.Timing.disturbed`), so one noisy measurement never
   changes how a tight one is read.

:func:`split_time` measures the three numbers that say where a step's time goes: the
device's time per call, the host's time to issue a call while the device is kept busy, and
the wall time per call between barriers; :attr:`SplitTime.bound` names the side that limits.

On a CPU the host does the work inside each call (PyTorch's CPU operators are synchronous),
so the device's time and the host's are one and the same wall time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from d2l_ext import turns
from d2l_ext.turns import MIN_BLOCK  # the shortest block of calls timed between two barriers
from d2l_ext.utils import Timing

#: Back-to-back calls between the CUDA events of :func:`device_time` for sub-millisecond
#: work (CUDA's launch queue holds about a thousand kernels, so keep calls times kernels
#: per call under that).
MIN_CALLS = 100
#: With ``calls=None``, enough calls for an event window of at least this long (seconds),
#: and at most :data:`MIN_CALLS`.
MIN_WINDOW = 0.01
#: The blocker lasts this many times the host's time to issue the calls.
LEAD = 2.0
#: :func:`split_time` first queues the calls behind a blocker at least this long (seconds):
#: a host that cannot issue them before it ends waits for the device in them.
SYNC_PROBE = 0.02


class _Cuda:
    """The CUDA calls the timing functions make (tests replace them with a scripted GPU)."""

    def event(self):
        return torch.cuda.Event(enable_timing=True)

    def synchronize(self, device: torch.device) -> None:
        torch.cuda.synchronize(device)

    def sleep(self, cycles: int) -> None:
        torch.cuda._sleep(cycles)  # a kernel that spins for `cycles` GPU clock cycles


CUDA = _Cuda()
_CYCLES_PER_SECOND: dict[int, float] = {}


def _device(device: torch.device | str | None) -> torch.device:
    if device is None:
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    return torch.device(device)


def _barrier(device: torch.device) -> None:
    if device.type == "cuda":
        CUDA.synchronize(device)
    elif device.type != "cpu" and hasattr(torch, "accelerator"):
        torch.accelerator.synchronize(device)


def _check(repeats: int, warmup: int) -> None:
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}.")
    if warmup < 1:
        raise ValueError(f"warmup must be at least 1 (the exact call is warmed up before it "
                         f"is timed), got {warmup}.")


def _block_seconds(f: Callable[[], object], device: torch.device, calls: int) -> float:
    return turns.block_seconds(f, lambda: _barrier(device), calls)


def calls_per_block(f: Callable[[], object], device: torch.device | str | None = None,
                    min_block: float = MIN_BLOCK, max_calls: int = 1_000_000) -> int:
    """How many back-to-back calls of ``f()`` last at least ``min_block`` seconds between two
    barriers on ``device`` (:func:`d2l_ext.turns.calls_per_block`; ``f`` should be warmed
    up)."""
    device = _device(device)
    return turns.calls_per_block(f, lambda: _barrier(device), min_block, max_calls)


def time_per_call(f: Callable[[], object], device: torch.device | str | None = None, *,
                  min_block: float = MIN_BLOCK, repeats: int = 5, warmup: int = 3) -> Timing:
    """Seconds per call of ``f()``, from ``repeats`` blocks of back-to-back calls, each block
    between two barriers and lasting at least ``min_block`` seconds.

    It includes whatever limits the calls, the host's issuing or the device's work (use
    :func:`split_time` to tell which). ``Timing.repetitions`` is the number of calls per block.
    """
    _check(repeats, warmup)
    device = _device(device)
    for _ in range(warmup):
        f()
    calls = calls_per_block(f, device, min_block)
    times = tuple(_block_seconds(f, device, calls) / calls for _ in range(repeats))
    return Timing(times, repetitions=calls)


def cycles_per_second(device: torch.device) -> float:
    """The clock rate at which the blocker kernel counts its cycles (measured once)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _CYCLES_PER_SECOND:
        cycles = 10_000_000
        CUDA.sleep(cycles)  # warm-up: loads the kernel
        start, end = CUDA.event(), CUDA.event()
        start.record()
        CUDA.sleep(cycles)
        end.record()
        CUDA.synchronize(device)
        _CYCLES_PER_SECOND[index] = cycles / (start.elapsed_time(end) / 1e3)
    return _CYCLES_PER_SECOND[index]


def block_device(device: torch.device | str, seconds: float) -> None:
    """Queue a kernel that keeps ``device`` busy for about ``seconds``; return at once.

    Calls issued after it wait in the stream's queue and then run back to back, so what
    they cost the device is measured without the host's pace in it. A CPU has no queue:
    nothing to do there.
    """
    device = _device(device)
    if device.type != "cuda" or seconds <= 0:
        return
    CUDA.sleep(max(1, int(seconds * cycles_per_second(device))))


def _issue_seconds(f: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        f()
    return time.perf_counter() - start


def _behind_blocker(f: Callable[[], object], device: torch.device, calls: int,
                    lead: float) -> tuple[float, float]:
    """(host seconds to issue ``calls`` calls, device seconds they ran): the calls queued
    behind a blocker that lasts ``lead`` seconds, between CUDA events."""
    _barrier(device)
    block_device(device, lead)
    start, end = CUDA.event(), CUDA.event()
    start.record()
    issued = _issue_seconds(f, calls)
    end.record()
    CUDA.synchronize(device)
    return issued, start.elapsed_time(end) / 1e3


@dataclass(frozen=True)
class SplitTime:
    """Where the time of a call goes (seconds per call, each a :class:`Timing`).

    ``device``: the device's time, the calls running back to back; ``host``: the host's time
    to issue one call while the device is kept busy; ``wall``: the time per call between
    barriers, as a loop of such calls takes it. On a CPU, ``device`` and ``host`` are the
    wall time: the host does the work inside the call.
    """

    device: Timing
    host: Timing
    wall: Timing
    on_cpu: bool
    #: the host waits for the device in the calls (a synchronisation in them, or CUDA's
    #: launch queue filled by them): it could not issue them while a blocker kept the device
    #: busy, so host and device take turns, and ``host`` includes the waiting
    syncs: bool = False

    @property
    def bound(self) -> str:
        """``"host"`` where issuing a call takes longer than the device's work for it,
        ``"device"`` otherwise; ``"one"`` on a CPU, where the two are one; ``"sync"`` where
        the call waits for the device, so that host and device take turns."""
        if self.on_cpu:
            return "one"
        if self.syncs:
            return "sync"
        return "host" if self.host.median > self.device.median else "device"


def device_time(f: Callable[[], object], device: torch.device | str | None = None, *,
                calls: int | None = MIN_CALLS, repeats: int = 5, warmup: int = 3) -> Timing:
    """The device's seconds per call of ``f()``: CUDA events around ``calls`` back-to-back
    calls queued behind a blocker, so that the device runs them without waiting for the host.

    Keep ``calls`` times the kernels per call under about a thousand: CUDA's launch queue
    holds about that many, and a full queue makes the host wait. ``calls=None`` chooses
    enough calls for a window of :data:`MIN_WINDOW`, at most :data:`MIN_CALLS` (for a call
    that launches hundreds of kernels, such as a training step, pass a few). On a CPU (no
    queue, no events) this is :func:`time_per_call`.
    """
    return split_time(f, device, calls=calls, repeats=repeats, warmup=warmup).device


def split_time(f: Callable[[], object], device: torch.device | str | None = None, *,
               calls: int | None = MIN_CALLS, repeats: int = 5, warmup: int = 3) -> SplitTime:
    """Device, host and wall seconds per call of ``f()`` (:class:`SplitTime`).

    On CUDA each repeat queues a blocker that lasts :data:`LEAD` times the host's issue time
    of the previous repeat, then ``calls`` calls between two events: the events give the
    device's time, ``perf_counter`` around the loop the host's. A call that waits for the
    device (a synchronisation inside it) cannot be issued behind a blocker: the host's time
    then keeps outgrowing the blocker, and the result says so (``syncs``; its host time
    includes the waiting). The wall time comes from :func:`time_per_call`. Repeats of the
    three are taken in turns. ``calls=None``: see :func:`device_time`.
    """
    _check(repeats, warmup)
    if calls is not None and calls < 1:
        raise ValueError(f"calls must be at least 1, got {calls}.")
    device = _device(device)
    if device.type != "cuda":
        wall = time_per_call(f, device, repeats=repeats, warmup=warmup)
        return SplitTime(wall, wall, wall, on_cpu=device.type == "cpu")
    for _ in range(warmup):
        f()
    _barrier(device)
    per_block = calls_per_block(f, device)
    if calls is None:
        one = _block_seconds(f, device, per_block) / per_block
        calls = max(1, min(MIN_CALLS, math.ceil(MIN_WINDOW / max(one, 1e-9))))
    lead = max(_issue_seconds(f, calls), 1e-3) * LEAD
    probe = max(lead, SYNC_PROBE)
    for _ in range(2):  # twice: a host merely slower than estimated gets past a longer one
        issued, _ = _behind_blocker(f, device, calls, probe)
        syncs = issued >= probe  # the host could not get past the blocker: it waited for it
        if not syncs:
            lead = max(lead, issued * LEAD)
            break
        probe = issued * LEAD
    host, dev, wall = [], [], []
    for _ in range(repeats):
        if syncs:  # no blocker: the events span the calls with the device's waits in them
            issued, ran = _behind_blocker(f, device, calls, 0.0)
        for _ in range(0 if syncs else 3):  # the blocker must outlast the issuing
            issued, ran = _behind_blocker(f, device, calls, lead)
            if issued < lead:
                break
            lead = issued * LEAD
        host.append(issued / calls)
        dev.append(ran / calls)
        lead = max(issued, 1e-3) * LEAD
        wall.append(_block_seconds(f, device, per_block) / per_block)
    return SplitTime(Timing(tuple(dev), repetitions=calls),
                     Timing(tuple(host), repetitions=calls),
                     Timing(tuple(wall), repetitions=per_block), on_cpu=False, syncs=syncs)
