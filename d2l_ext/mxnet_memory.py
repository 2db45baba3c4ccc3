"""Memory that MXNet's storage holds, read from its profiler's memory counter.

MXNet 1.9 has no call that returns the bytes in use. Its storage layer
(``src/storage/storage.cc``) tells the profiler about every allocation and every free
(``DeviceStorageProfiler::OnAlloc``/``OnFree``) while the profiler runs with
``profile_memory=True``; the profiler keeps one counter per device, "Memory: cpu/0", and
writes each new value as a Chrome-trace counter event. :class:`StorageCounter` runs the
profiler for memory only, dumps its events when asked and reads the counter: the bytes in
use now and the peak since the previous reading.

Four properties of the counter decide how to use it:

* it counts only what was allocated and freed while it ran, and a free of an older array
  cannot take it below zero (it is clamped): start the counter before the first array is made
  and leave it running;
* arrays held only by unreachable Python reference cycles stay allocated until Python's
  garbage collector runs, at a moment of its choosing: :meth:`StorageCounter.read` collects
  first;
* the profiler's work at each allocation and free costs time: :meth:`StorageCounter.paused`
  pauses it around timings (the count goes on);
* MXNet frees an array's memory in its engine, and the free of a deleted array can still be
  queued after ``npx.waitall()`` returns; :meth:`StorageCounter.read` pushes one tiny
  operation and waits again, which lets the engine run the queued frees first.

The memory chapter's network, shared by its pages: :func:`make_net` builds the MLP,
:func:`mlp_parameters` counts its parameters and :func:`train_step` trains it one step.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

import mxnet as mx
from mxnet import autograd, gluon, init, np, npx
from mxnet.gluon import nn

__all__ = ["Reading", "StorageCounter", "array_bytes", "make_net", "mlp_parameters", "settle",
           "train_step"]

_EVENT = re.compile(r'"ts":\s*(\d+),\s*"args":\s*\{\s*"Memory: ([^"]+)":\s*(\d+)\s*\}')


@dataclass(frozen=True)
class Reading:
    """One reading of the counter: bytes in use now, and the most in use since the previous
    reading (the peak includes the value the previous reading left)."""

    current: int
    peak: int


_scratch: list = []


def settle() -> None:
    """Wait for every queued operation, including the frees of deleted arrays."""
    npx.waitall()
    if not _scratch:
        _scratch.append(np.zeros(1))
    _scratch[0] += 0  # a new push, without an allocation, runs the deletions still queued
    npx.waitall()


def array_bytes(arrays) -> int:
    """Bytes of the data of ``arrays`` (an iterable of MXNet arrays): size times item size."""
    return sum(int(a.size) * a.dtype.itemsize for a in arrays)


class StorageCounter:
    """The bytes that MXNet's storage holds on ``device``, from the profiler's memory counter.

    Create it before the first MXNet array of the process exists: it starts the profiler
    (memory only) and keeps it running. ``read()`` returns a :class:`Reading`.
    """

    def __init__(self, device: mx.Context | None = None, path: str | None = None) -> None:
        device = device or mx.cpu()
        self.name = f"{device.device_type}/{device.device_id}"
        if path is None:
            fd, path = tempfile.mkstemp(prefix="mxnet_memory_", suffix=".json")
            os.close(fd)
        self.path = path
        atexit.register(self._remove_trace)  # a counter left running leaves no file behind
        self._offset = 0
        self._current = 0
        settle()  # its scratch array exists before the counter starts, so it is never counted
        mx.profiler.set_config(profile_memory=True, profile_imperative=False,
                               profile_symbolic=False, profile_api=False,
                               aggregate_stats=False, filename=self.path)
        mx.profiler.set_state("run")
        self.read()

    def _events(self) -> list[tuple[int, int]]:
        mx.profiler.dump(finished=False)
        with open(self.path, encoding="utf-8") as f:
            f.seek(self._offset)
            text = f.read()
            self._offset = f.tell()
        found = [(int(ts), int(v)) for ts, name, v in _EVENT.findall(text) if name == self.name]
        return sorted(found, key=lambda e: e[0])

    def read(self) -> Reading:
        """Bytes in use now and the peak since the previous reading, after Python's garbage
        collector has run (arrays held only by unreachable reference cycles are freed) and the
        engine has finished its queued work."""
        gc.collect()
        settle()
        values = [v for _, v in self._events()]
        peak = max([self._current, *values])
        if values:
            self._current = values[-1]
        return Reading(self._current, peak)

    @contextlib.contextmanager
    def paused(self):
        """Pause the profiler for the block, e.g. around timings, so that they do not include
        the profiler's work at every allocation and free. MXNet goes on counting while it is
        paused (the storage profiler updates its counter; only the events are not written),
        so a reading after the block is right; the peak inside the block is not seen. At the
        end, one tiny allocation and free make the counter write its value, and a reading
        takes them in, so the next reading's peak starts from the true value."""
        self.read()
        mx.profiler.pause()
        try:
            yield self
        finally:
            settle()
            mx.profiler.resume()
            flush = np.zeros(1)  # an event with the current count (+4 bytes), and one without
            del flush
            self.read()

    def current(self) -> int:
        """Bytes in use now."""
        return self.read().current

    def stop(self) -> None:
        """Stop the profiler and remove the trace file (the counter reads nothing after)."""
        mx.profiler.set_state("stop")
        mx.profiler.dump(finished=True)
        self._remove_trace()

    def _remove_trace(self) -> None:
        with contextlib.suppress(OSError):
            os.remove(self.path)


# ---- the memory chapter's MLP, shared by its pages

def make_net(hidden: Sequence[int], num_outputs: int = 10,
             block: type[nn.Sequential] | type[nn.HybridSequential] = nn.Sequential) -> nn.Block:
    """The MLP: one Dense layer with ReLU per entry of `hidden`, then `num_outputs` outputs,
    initialised lazily (its shapes are known at the first forward pass)."""
    net = block()
    for width in hidden:
        net.add(nn.Dense(width, activation="relu"))
    net.add(nn.Dense(num_outputs))
    net.initialize(init.Normal(0.01))
    return net


def mlp_parameters(num_inputs: int, hidden: Sequence[int], num_outputs: int = 10) -> int:
    """The parameter count of :func:`make_net` for `num_inputs` inputs: weights and biases."""
    widths = [num_inputs, *hidden, num_outputs]
    return sum(n_in * n_out + n_out for n_in, n_out in zip(widths[:-1], widths[1:]))


def train_step(net: nn.Block, trainer: gluon.Trainer, loss: gluon.loss.Loss, X, y) -> None:
    """One training step with whatever optimizer ``trainer`` holds: forward and `loss`
    recorded, backward, ``trainer.step(batch)``."""
    with autograd.record():
        l = loss(net(X), y)
    l.backward()
    trainer.step(X.shape[0])
