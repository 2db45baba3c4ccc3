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

:meth:`Tracker.timeline` gives, on a CPU, every change between the marks (for a figure).

The memory chapter's network, shared by its pages: :func:`mlp` builds it, :func:`mlp_numbers`
and :func:`mlp_activations` count its parameters and the bytes its forward pass keeps,
:func:`warm_up` allocates what libraries allocate once per process, and :func:`step_memory`
measures two Adam steps of it.

Counting, to set beside the measurements: :func:`tensor_bytes` (each storage once),
:func:`parameter_bytes`, :func:`gradient_bytes`, :func:`optimizer_state_bytes`, and
:class:`SavedTensors`, which records what autograd keeps for the backward pass.
:func:`load_timeline` reads a memory timeline that PyTorch's profiler exported
(``profile.export_memory_timeline`` to a ``.raw.json.gz`` path), by category.

A third source, for a CPU, on request (``Tracker(device, source="malloc")``): the C
library's own books (glibc's ``mallinfo2``: bytes in use, all threads). The profiler sees
only the allocations and frees of the threads it profiles, so in processes whose
communication library frees tensors on its own threads (gloo's, with DDP or FSDP) its total
drifts upwards; the C library sees every thread, but also everything else the process
allocates (Python objects, the communication library's buffers), and has no peak between
marks (``peak`` is the reading itself). Linux with glibc only.

Tensors that existed before the block are not counted. On a CPU their frees are not counted
either (only a free of an address allocated inside the block counts, with the size allocated
there; PyTorch may log a warning that a block of unknown size was freed); on an accelerator
the counters cannot tell them apart, and their frees lower ``allocated``, below zero if need
be: free them before the block, not inside it. The profiler sees the allocations of the
thread that runs the block and of the threads PyTorch runs for it (intra-op, autograd).
The profiler (Kineto) runs one session at a time in a process, whichever thread starts it: a
CPU tracker refuses to start while another CPU tracker or a ``torch.profiler`` session runs,
in this thread or in another (a second session would stop the first, or crash the process),
and a tracker of an accelerator refuses to start inside another of the same device. Run such
blocks one after another (end the other thread's first), or use ``source="malloc"``, which
runs no profiler. A user's ``torch.profiler.profile`` that another thread starts *after* a
CPU tracker has started, or one that is still in its scheduled warm-up, cannot be seen: do
not profile in other threads while a CPU tracker runs. Set ``KINETO_LOG_LEVEL=6`` in the
environment before the first profile to keep the profiler from logging its start and stop.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import gzip
import json
import os
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

__all__ = ["CATEGORIES", "Reading", "SavedTensors", "Tracker", "gradient_bytes",
           "load_timeline", "malloc_in_use", "mlp", "mlp_activations", "mlp_numbers",
           "optimizer_state_bytes", "parameter_bytes", "step_memory", "tensor_bytes",
           "warm_up"]

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
    ``device`` at each :meth:`mark` (see the module's docstring). Trackers do not nest: a
    CPU tracker refuses to start while any profiler session runs in the process, in any
    thread (its own profiler would stop the running one), and a tracker of an accelerator
    inside another of the same device (it would reset the outer one's peak)."""

    #: the accelerators that a Tracker is reading now
    _allocator_devices: set[str] = set()
    #: the thread whose CPU tracker runs the profiler now (one per process), or None
    _profiler_thread: int | None = None
    #: guards the check and the start of a CPU tracker's profiler across threads
    _profiler_lock = threading.Lock()

    def __init__(self, device: torch.device | str, source: str | None = None) -> None:
        self.device = torch.device(device)
        default = "profiler" if self.device.type == "cpu" else "allocator"
        #: where the numbers come from: ``"allocator"`` (an accelerator), ``"profiler"`` (a
        #: CPU, the default) or ``"malloc"`` (a CPU, on request)
        self.source = source or default
        allowed = ("profiler", "malloc") if self.device.type == "cpu" else ("allocator",)
        if self.source not in allowed:
            raise ValueError(f"source {self.source!r} does not read {self.device.type} memory; "
                             f"use one of {allowed}.")
        if self.source == "malloc" and malloc_in_use() is None:
            raise ValueError('source="malloc" needs glibc (Linux); use source="profiler".')
        self._labels: list[str] = []
        self._readings: list[Reading] = []
        self._profile = None
        self._active = False
        self._changes: list[tuple[float, int]] = []
        self._mark_times: list[float] = []

    # ------------------------------------------------------------ the block
    def __enter__(self) -> Tracker:
        if self._active:
            raise RuntimeError("this Tracker is already in use; make a new one.")
        if self.source == "allocator":
            key = str(self.device if self.device.index is not None
                      else torch.device(self.device.type, _Counters(self.device).index))
            if key in Tracker._allocator_devices:
                # the inner block's reset of the peak would erase the outer block's peak
                raise RuntimeError(f"a Tracker is already reading {key}; trackers of one "
                                   "accelerator cannot be nested.")
        self._labels, self._readings, self._active = [], [], True
        if self.source == "allocator":
            self._counters = _Counters(self.device)
            self._counters.reset_peak()
            self._baseline = self._counters.allocated()
            Tracker._allocator_devices.add(key)
            self._device_key = key
        elif self.source == "malloc":
            gc.collect()
            self._baseline = malloc_in_use()
        else:
            gc.collect()  # no collection of earlier garbage inside the block, if possible
            try:
                self._start_profiler()
            except BaseException:
                self._active = False
                raise
        return self

    def _start_profiler(self) -> None:
        """Start the CPU's profiler, unless a profiler session runs in this process."""
        from torch.profiler import ProfilerActivity, profile

        with Tracker._profiler_lock:
            _refuse_a_second_profiler()
            profile_ = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
            Tracker._profiler_thread = threading.get_ident()
            try:
                profile_.__enter__()
            except BaseException:
                Tracker._profiler_thread = None
                raise
        self._profile = profile_

    def __exit__(self, kind, value, traceback) -> None:
        self._active = False
        if self.source == "allocator":
            Tracker._allocator_devices.discard(self._device_key)
        if self._profile is None:
            return
        profile, self._profile = self._profile, None
        try:
            profile.__exit__(kind, value, traceback)
        finally:
            with Tracker._profiler_lock:
                Tracker._profiler_thread = None
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
        elif self.source == "malloc":
            now = malloc_in_use() - self._baseline
            self._readings.append(Reading(label, now, now, None))
        else:
            with torch.profiler.record_function(f"{_MARK}{len(self._labels) - 1}"):
                pass

    @property
    def readings(self) -> list[Reading]:
        """One :class:`Reading` per mark, in order (from the profiler: after the block)."""
        if self._active and self.source == "profiler":
            raise RuntimeError("on a CPU the readings come from the profiler: read them after "
                               "the `with Tracker(...)` block.")
        return list(self._readings)

    def peak(self) -> int:
        """The highest ``allocated`` of the whole block up to its last mark (bytes)."""
        return max((r.peak for r in self.readings), default=0)

    def timeline(self) -> tuple[list[float], list[int], list[float]]:
        """On a CPU, after the block: the times (ms since the block began) at which the
        allocated bytes changed, the bytes after each change, and the times of the marks."""
        if self.source != "profiler":
            raise RuntimeError("a timeline comes from the CPU's profiler (source='profiler'); "
                               "on an accelerator use torch.cuda.memory._record_memory_history.")
        self.readings  # noqa: B018 - raises inside the block
        start = self._changes[0][0] if self._changes else 0.0
        if self._mark_times:
            start = min(start, self._mark_times[0])
        times, sizes, total = [], [], 0
        for ts, delta in self._changes:
            total += delta
            times.append((ts - start) / 1e3)
            sizes.append(total)
        return times, sizes, [(ts - start) / 1e3 for ts in self._mark_times]

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
        changes = _changes(events)
        marks = {int(e["name"][len(_MARK):]): e["ts"] for e in events
                 if e.get("ph") == "X" and str(e.get("name", "")).startswith(_MARK)}
        if sorted(marks) != list(range(len(self._labels))):
            raise RuntimeError(f"the profile holds {len(marks)} of the {len(self._labels)} "
                               "marks; was another profiler running?")
        self._changes = [c for c in changes if c[0] <= max(marks.values(), default=0)]
        self._mark_times = [marks[i] for i in range(len(self._labels))]
        readings, total, i = [], 0, 0
        for index, label in enumerate(self._labels):
            peak = total
            while i < len(changes) and changes[i][0] < marks[index]:
                total += changes[i][1]
                peak = max(peak, total)
                i += 1
            readings.append(Reading(label, total, peak, None))
        return readings


def _refuse_a_second_profiler() -> None:
    """Raise if a profiler session runs in this process: Kineto, the profiler's back end,
    holds one session per process, and a second one, from any thread, stops the first or
    crashes the process. Seen: a CPU tracker in any thread (:attr:`Tracker._profiler_thread`),
    any profiler of this thread (the C++ state is the thread's own), and a
    ``torch.profiler.profile`` of another thread while it records
    (``torch.autograd.profiler._is_profiler_enabled``, a process-wide flag that its start and
    stop set)."""
    import torch.autograd.profiler as autograd_profiler

    owner = Tracker._profiler_thread
    if owner == threading.get_ident() or torch._C._autograd._profiler_enabled():
        raise RuntimeError("a CPU Tracker runs the profiler and cannot run inside another "
                           "profiler session (a torch.profiler.profile, or another CPU "
                           "Tracker); end that first, or use source='malloc'.")
    if owner is not None or getattr(autograd_profiler, "_is_profiler_enabled", False):
        who = "a CPU Tracker" if owner is not None else "a torch.profiler session"
        raise RuntimeError(f"{who} runs in another thread, and the profiler runs one session "
                           "per process: a second one would stop it or crash the process. "
                           "Run the blocks one after another (join that thread first), or "
                           "use source='malloc'.")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _mallinfo2():
    name = ctypes.util.find_library("c")
    try:
        function = ctypes.CDLL(name).mallinfo2
    except (OSError, AttributeError, TypeError):
        return None
    function.restype = _MallInfo2
    return function


_MALLINFO2 = _mallinfo2()


def malloc_in_use() -> int | None:
    """Bytes the C library's ``malloc`` has handed out and not taken back, in all threads of
    this process (glibc's ``mallinfo2``: in-use heap chunks plus mapped blocks); None where
    the C library has no ``mallinfo2``."""
    if _MALLINFO2 is None:
        return None
    info = _MALLINFO2()
    return info.uordblks + info.hblkhd


def _changes(events: list[dict]) -> list[tuple[float, int]]:
    """The CPU's allocations and frees among a trace's ``[memory]`` events, in order, as
    ``(time, bytes)``: a free counts only if its address was allocated inside the trace, and
    with the size of that allocation. (A free of an older tensor is not the block's; and the
    profiler looks up a freed block's size in a table that can hold a stale entry from an
    earlier session, for an address that has since been freed and reused unseen.)"""
    memory = sorted((e for e in events if e.get("name") == "[memory]" and _on_cpu(e["args"])),
                    key=lambda e: (e["ts"], e["args"].get("Ev Idx", 0)))
    live: dict[int, int] = {}  # address -> bytes allocated there inside the trace
    changes = []
    for e in memory:
        nbytes, address = e["args"]["Bytes"], e["args"].get("Addr")
        if nbytes > 0:
            live[address] = live.get(address, 0) + nbytes
            changes.append((e["ts"], nbytes))
        elif nbytes < 0 and address in live:
            changes.append((e["ts"], -live.pop(address)))
    return changes


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


# ---------------------------------------------------------------------- counting
_SPARSE_PARTS = {
    torch.sparse_coo: ("_indices", "_values"),
    torch.sparse_csr: ("crow_indices", "col_indices", "values"),
    torch.sparse_bsr: ("crow_indices", "col_indices", "values"),
    torch.sparse_csc: ("ccol_indices", "row_indices", "values"),
    torch.sparse_bsc: ("ccol_indices", "row_indices", "values"),
}


def _dense_parts(t: torch.Tensor) -> list[torch.Tensor]:
    """The plain tensors that hold ``t``'s data: ``t`` itself; a sparse tensor's indices and
    values; a tensor subclass's inner tensors (``__tensor_flatten__``: a DTensor's local
    shard, a jagged nested tensor's values and offsets), recursively."""
    if is_traceable_wrapper_subclass(t):
        names, _ = t.__tensor_flatten__()
        inner = (getattr(t, name) for name in names)  # a DTensor's also names its mesh
        return [p for x in inner if isinstance(x, torch.Tensor) for p in _dense_parts(x)]
    parts = _SPARSE_PARTS.get(t.layout)
    if parts is not None:
        return [p for name in parts for p in _dense_parts(getattr(t, name)())]
    return [t]


def _storages(t: torch.Tensor) -> list[tuple[tuple, int]]:
    """``(key, bytes)`` of each storage behind ``t`` (see :func:`_dense_parts`). The key is
    the same for views of one storage: its address on the device, or, where there is no
    address (the meta device, where every storage's address is 0, or an empty storage), the
    storage object itself."""
    return [_storage(part) for part in _dense_parts(t)]


def _storage(t: torch.Tensor) -> tuple[tuple, int]:
    """``(key, bytes)`` of the storage behind a plain tensor, or of the tensor itself where
    it has no storage (e.g. oneDNN's layout)."""
    try:
        storage = t.untyped_storage()
        # A fake tensor's storage lives on the meta device, like a meta tensor's: it has no
        # address (and asking a fake storage for one is deprecated), so it is keyed by the
        # storage object itself, which its views share.
        address = 0 if storage.device.type == "meta" else storage.data_ptr()
    except (NotImplementedError, RuntimeError):
        return (str(t.device), "tensor", id(t)), t.numel() * t.element_size()
    key = (str(t.device), address) if address else (str(t.device), "storage", storage._cdata)
    return key, storage.nbytes()


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """The bytes of the storages behind ``tensors``, each storage counted once (views and
    a tensor listed twice share one; a view holds its whole storage). Sparse tensors count
    their indices and values, each with its whole storage (a CSR tensor's column indices may
    be a view of a 2 x nnz index storage, as after ``to_sparse_csr()`` of a dense tensor);
    a DTensor (FSDP2's parameters) counts its local shard as this process holds it (FSDP2
    pads each shard to the size of the first, so every rank holds ceil(rows / k) rows); a
    jagged nested tensor counts its values and offsets; tensors on the ``meta`` device count
    the bytes they would allocate, so a model too large to allocate can be sized there."""
    seen: dict[tuple, int] = {}
    for t in tensors:
        seen.update(_storages(t))
    return sum(seen.values())


def parameter_bytes(module: torch.nn.Module, buffers: bool = False) -> int:
    """The bytes of ``module``'s parameters (and of its buffers, e.g. BatchNorm's running
    statistics, with ``buffers=True``)."""
    tensors = list(module.parameters())
    if buffers:
        tensors += list(module.buffers())
    return tensor_bytes(tensors)


def gradient_bytes(module: torch.nn.Module) -> int:
    """The bytes of the ``.grad`` tensors of ``module``'s parameters that exist now."""
    return tensor_bytes(p.grad for p in module.parameters() if p.grad is not None)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """The bytes of the tensors an optimizer keeps between steps (momentum buffers, Adam's
    two moments, step counters); an optimizer's state appears at its first ``step``."""
    return tensor_bytes(v for state in optimizer.state.values() for v in state.values()
                        if isinstance(v, torch.Tensor))


class SavedTensors:
    """Record the tensors autograd saves for the backward pass while the block runs
    (``torch.autograd.graph.saved_tensors_hooks``): their storages' bytes, each storage
    once, leaving out the storages of ``exclude``: tensors, and modules, which stand for their
    parameters and buffers (they exist anyway; BatchNorm saves its running statistics for
    the backward pass, and they are not activations). Saved tensors count as in
    :func:`tensor_bytes` (a sparse one its indices and values, a DTensor its local shard).
    A module stands for the parameters it holds when a tensor is saved: under FSDP2
    (``fully_shard``) those are the unsharded ones that the forward pass gathered, so the
    weights a matrix product saves are left out as they are without sharding.

    ::

        with SavedTensors(exclude=[net, X]) as saved:
            loss = loss_fn(net(X), y)
        saved.nbytes  # the activations this forward pass keeps alive until backward
    """

    def __init__(self, exclude: Iterable[torch.Tensor | torch.nn.Module] = ()) -> None:
        exclude = list(exclude)
        self._modules = [x for x in exclude if isinstance(x, torch.nn.Module)]
        tensors = [x for x in exclude if not isinstance(x, torch.nn.Module)]
        held = self._module_tensors()
        self._held_ids = [id(t) for t in held]
        self._exclude = {key for t in tensors + held for key, _ in _storages(t)}
        self._storages: dict[tuple, int] = {}
        self._hooks = None

    def _module_tensors(self) -> list[torch.Tensor]:
        return [t for m in self._modules for t in (*m.parameters(), *m.buffers())]

    def _excluded(self) -> set[tuple]:
        """The keys to leave out now: those of ``exclude`` as it was given, and, where a
        module holds other tensors than then (FSDP2's unsharded parameters, gathered for
        the forward pass), those of the tensors it holds now."""
        held = self._module_tensors()
        if [id(t) for t in held] == self._held_ids:
            return self._exclude
        return self._exclude | {key for t in held for key, _ in _storages(t)}

    def __enter__(self) -> SavedTensors:
        def pack(t: torch.Tensor) -> torch.Tensor:
            excluded = self._excluded()
            for key, nbytes in _storages(t):
                if key not in excluded and nbytes > 0:
                    self._storages[key] = nbytes
            return t

        self._hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        hooks, self._hooks = self._hooks, None
        hooks.__exit__(*exc)

    @property
    def nbytes(self) -> int:
        """The bytes of the distinct storages saved so far."""
        return sum(self._storages.values())

    @property
    def count(self) -> int:
        """How many distinct storages were saved."""
        return len(self._storages)


#: the categories of PyTorch's memory profiler, in the order of its raw timeline's indices
CATEGORIES = ("parameter", "optimizer state", "input", "temporary", "activation", "gradient",
              "autograd detail", "unknown")


def load_timeline(path: str) -> tuple[list[float], list[list[int]]]:
    """Read a raw memory timeline that ``torch.profiler.profile.export_memory_timeline``
    wrote to a path ending in ``.raw.json.gz`` (from a profile run with
    ``profile_memory=True, record_shapes=True, with_stack=True``), gzipped JSON or plain:
    events ``[time_ns, action, bytes, category index]``.
    Return the times in ms from the first timed event, and for each time the bytes held in
    each of :data:`CATEGORIES`. Tensors that existed before the profile (time -1) count
    from the start."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        events = json.load(f)
    if not isinstance(events, list) or any(len(e) != 4 for e in events):
        raise ValueError(f"{path} is not a raw memory timeline: expected a JSON list of "
                         "[time, action, bytes, category] events.")
    start = min((e[0] for e in events if e[0] >= 0), default=0)
    times: list[float] = []
    sizes: list[list[int]] = []
    current = [0] * len(CATEGORIES)
    for t, _action, nbytes, category in sorted(events, key=lambda e: max(e[0], start)):
        if not 0 <= category < len(CATEGORIES):
            raise ValueError(f"{path}: category index {category} is not one of "
                             f"0..{len(CATEGORIES) - 1}.")
        current[category] += nbytes
        t_ms = (max(t, start) - start) / 1e6
        if times and times[-1] == t_ms:
            sizes[-1] = list(current)
        else:
            times.append(t_ms)
            sizes.append(list(current))
    return times, sizes


# ---- the memory chapter's MLP, shared by its pages

def mlp(width: int, depth: int, inputs: int = 784, classes: int = 10) -> nn.Sequential:
    """`depth` hidden layers of `width` units with ReLU, for 28 x 28 images (depth >= 1)."""
    if depth < 1:
        raise ValueError(f"depth = {depth}: at least one hidden layer.")
    layers: list[nn.Module] = [nn.Flatten(), nn.Linear(inputs, width), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, classes))
    return nn.Sequential(*layers)


def mlp_numbers(width: int, depth: int, inputs: int = 784, classes: int = 10) -> int:
    """The parameter count of :func:`mlp`: weights and biases of each linear layer."""
    return (inputs * width + width + (depth - 1) * (width * width + width)
            + width * classes + classes)


def mlp_activations(batch: int, width: int, depth: int, classes: int = 10,
                    nbytes: int = 4) -> int:
    """Bytes the forward pass of :func:`mlp` keeps for backward: one batch x width output per
    ReLU (the next linear layer saves the same tensor) and the log-softmax of the loss; the
    input is the caller's. ``nbytes``: bytes per saved number; the log-softmax is counted at
    the same width, as in a pure low-precision model (autocast keeps it in float32)."""
    return (depth * batch * width + batch * classes) * nbytes


def warm_up(make_net: Callable[[], nn.Module], X: torch.Tensor, y: torch.Tensor) -> None:
    """Train a throwaway ``make_net()`` one step in float32 and one under autocast, untracked:
    what libraries allocate once per process (on a GPU, cuBLAS's workspace at the first matrix
    product, kept by the caching allocator) is then allocated before any measurement."""
    model = make_net().to(X.device)
    opt = torch.optim.Adam(model.parameters())
    for low_precision in (False, True):
        with torch.autocast(X.device.type, dtype=torch.bfloat16, enabled=low_precision):
            loss = F.cross_entropy(model(X), y)
        loss.backward()
        opt.step()
        opt.zero_grad()


def step_memory(make_net: Callable[[], nn.Module], X: torch.Tensor, y: torch.Tensor) -> dict:
    """Train ``make_net()`` two steps with Adam on ``X``'s device; return the state kept
    between steps (parameters and Adam's moments), the activations the second forward pass
    allocated, the second step's peak and the part of the step where it happened ("forward",
    "backward" or "step"), all measured, in bytes. The model is built on the CPU with the
    CPU's random generator seeded to 0 inside :func:`torch.random.fork_rng`, so the caller's
    streams (the CPU's, and an accelerator's, which this never seeds) are left as they were."""
    with torch.random.fork_rng(devices=[]), Tracker(X.device) as t:
        torch.default_generator.manual_seed(0)  # torch.manual_seed would reseed CUDA too
        model = make_net().to(X.device)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        for _ in range(2):
            t.mark("start")
            loss = F.cross_entropy(model(X), y)
            t.mark("forward")
            loss.backward()
            t.mark("backward")
            opt.step()
            opt.zero_grad()
            del loss
            t.mark("step")
    second_start = max(i for i, r in enumerate(t.readings) if r.label == "start")
    start, *second = t.readings[second_start:]
    top = max(second, key=lambda r: r.peak)
    return {"state": start.allocated, "activations": second[0].allocated - start.allocated,
            "peak": top.peak, "where": top.label}
