"""The memory that a block of PyTorch code allocates on a device, read the same way anywhere.

::

    with memory.Tracker(device) as tracker:
        net = make_net().to(device)
        tracker.mark("weights")
        loss = net(X).sum()
        tracker.mark("forward")
        ...
    for reading in tracker.readings:
        print(reading.label, reading.allocated, reading.peak, reading.reserved)

Each :class:`Reading` says how many bytes the tensors allocated on ``device`` *since the
block began* hold at a :meth:`Tracker.mark`, the highest that number reached since the
previous mark, and, on an accelerator, what PyTorch's caching allocator holds.

Two sources, one meaning:

* on an accelerator (CUDA, ROCm, XPU, ...), the caching allocator's counters, read at each
  mark: ``torch.accelerator.memory_allocated`` and ``max_memory_allocated``, whose peak is
  reset with ``reset_peak_memory_stats`` after each mark, and ``memory_reserved``
  (``torch.cuda``'s functions of the same names before PyTorch has them in
  ``torch.accelerator``). They are the allocator's books, kept on the host: reading them does
  not wait for the device;
* on a CPU, which has no caching allocator and no such counters, the profiler: the block runs
  under ``torch.profiler.profile(profile_memory=True)``, whose ``[memory]`` events record
  every allocation and free of the CPU allocator with its size; each mark is a
  ``record_function`` range. The readings are computed when the block ends, so on a CPU
  :attr:`Tracker.readings` is available only after the ``with`` block.

Tensors that existed before the block are not counted. On a CPU their frees are not seen
either (PyTorch logs a warning that a block of unknown size was freed): free them before the
block, not inside it. The profiler sees the allocations of the thread that runs the block and
of the threads PyTorch runs for it (intra-op, autograd); a CPU tracker cannot run inside
another ``torch.profiler`` session. Set ``KINETO_LOG_LEVEL=6`` in the environment before the
first profile to keep the profiler from logging its start and stop.
"""

from __future__ import annotations

import gc
import json
import os
import tempfile
from dataclasses import dataclass

import torch

__all__ = ["Reading", "Tracker"]

_MARK = "d2l_ext.memory.mark:"  # the name of the profiler range that stands for a mark


@dataclass(frozen=True)
class Reading:
    """What a :class:`Tracker` read at one mark (bytes)."""

    label: str
    #: bytes held by the live tensors allocated on the device since the block began
    allocated: int
    #: the highest ``allocated`` since the previous mark (or since the block began)
    peak: int
    #: bytes the caching allocator holds, used or not (an accelerator); None on a CPU
    reserved: int | None


class Tracker:
    """Read the memory that the code inside ``with Tracker(device):`` allocates on
    ``device`` at each :meth:`mark` (see the module's docstring)."""

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        #: where the numbers come from: ``"allocator"`` (an accelerator) or ``"profiler"``
        self.source = "profiler" if self.device.type == "cpu" else "allocator"
        self._labels: list[str] = []
        self._readings: list[Reading] = []
        self._profile = None
        self._active = False

    # ------------------------------------------------------------ the block
    def __enter__(self) -> Tracker:
        if self._active:
            raise RuntimeError("this Tracker is already in use; make a new one.")
        self._labels, self._readings, self._active = [], [], True
        if self.source == "allocator":
            self._counters = _Counters(self.device)
            self._counters.reset_peak()
            self._baseline = self._counters.allocated()
        else:
            gc.collect()  # no collection of earlier garbage inside the block, if possible
            from torch.profiler import ProfilerActivity, profile

            self._profile = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
            self._profile.__enter__()
        return self

    def __exit__(self, kind, value, traceback) -> None:
        self._active = False
        if self._profile is None:
            return
        profile, self._profile = self._profile, None
        profile.__exit__(kind, value, traceback)
        if kind is None:
            self._readings = self._from_trace(profile)

    def mark(self, label: str) -> None:
        """Read the memory now, under ``label`` (on a CPU: when the block ends)."""
        if not self._active:
            raise RuntimeError("call Tracker.mark inside the `with Tracker(...)` block.")
        self._labels.append(label)
        if self.source == "allocator":
            c = self._counters
            self._readings.append(Reading(label, c.allocated() - self._baseline,
                                          c.peak() - self._baseline, c.reserved()))
            c.reset_peak()
        else:
            with torch.profiler.record_function(f"{_MARK}{len(self._labels) - 1}"):
                pass

    @property
    def readings(self) -> list[Reading]:
        """One :class:`Reading` per mark, in order (on a CPU: after the block)."""
        if self._active and self.source == "profiler":
            raise RuntimeError("on a CPU the readings come from the profiler: read them after "
                               "the `with Tracker(...)` block.")
        return list(self._readings)

    def peak(self) -> int:
        """The highest ``allocated`` of the whole block up to its last mark (bytes)."""
        return max((r.peak for r in self.readings), default=0)

    # ------------------------------------------------------------ the CPU's profile
    def _from_trace(self, profile) -> list[Reading]:
        """The readings at the marks, from the profile's ``[memory]`` events: the sum of the
        bytes allocated (positive) and freed (negative) on the CPU before each mark."""
        handle, path = tempfile.mkstemp(prefix="d2l_memory_", suffix=".json")
        os.close(handle)
        try:
            profile.export_chrome_trace(path)
            with open(path, encoding="utf-8") as f:
                events = json.load(f)["traceEvents"]
        finally:
            os.remove(path)
        changes = sorted((e["ts"], e["args"]["Bytes"]) for e in events
                         if e.get("name") == "[memory]" and _on_cpu(e["args"]))
        marks = {int(e["name"][len(_MARK):]): e["ts"] for e in events
                 if e.get("ph") == "X" and str(e.get("name", "")).startswith(_MARK)}
        if sorted(marks) != list(range(len(self._labels))):
            raise RuntimeError(f"the profile holds {len(marks)} of the {len(self._labels)} "
                               "marks; was another profiler running?")
        readings, total, i = [], 0, 0
        for index, label in enumerate(self._labels):
            peak = total
            while i < len(changes) and changes[i][0] < marks[index]:
                total += changes[i][1]
                peak = max(peak, total)
                i += 1
            readings.append(Reading(label, total, peak, None))
        return readings


def _on_cpu(args: dict) -> bool:
    """Whether a ``[memory]`` event is the CPU's (device type 0 in the profiler's trace)."""
    return args.get("Device Type", 0) == 0


class _Counters:
    """The caching allocator's counters of one accelerator device."""

    def __init__(self, device: torch.device) -> None:
        accelerator = getattr(torch, "accelerator", None)
        if accelerator is not None and hasattr(accelerator, "memory_allocated"):
            self.api = accelerator  # any accelerator (recent PyTorch)
        elif device.type == "cuda":
            self.api = torch.cuda
        else:
            raise ValueError(f"this PyTorch has no memory counters for {device.type} devices.")
        if device.index is not None:
            self.index = device.index
        elif self.api is torch.cuda:
            self.index = torch.cuda.current_device()
        else:
            self.index = self.api.current_device_index()

    def allocated(self) -> int:
        return self.api.memory_allocated(self.index)

    def peak(self) -> int:
        return self.api.max_memory_allocated(self.index)

    def reserved(self) -> int:
        return self.api.memory_reserved(self.index)

    def reset_peak(self) -> None:
        self.api.reset_peak_memory_stats(self.index)
