"""Analyse real GPU profiler traces: launches, queue depth, idle time, syncs and streams.

The book ships PyTorch profiler traces recorded by others on real GPUs
(``d2l_ext/data/gpu_traces``, see its PROVENANCE.md), so that every page can show what a GPU
does even where the reader has none. Both generations of the PyTorch profiler's trace are
read: kineto's of 2021 (categories ``Runtime``, ``Kernel``, ``Memcpy``, ``Memset``,
``Operator``; streams as tids ``"stream 7"``; launch flows ``async``/``launch``) and later ones
(``cuda_runtime``, ``kernel``, ``gpu_memcpy``, ``gpu_memset``, ``cuda_sync``, ``cpu_op``,
``user_annotation``; numeric stream tids named by ``thread_name`` metadata; flows ``ac2g``)::

    from d2l_ext import gputrace
    events = gputrace.load("resnet50_v100_num_workers_0")
    for step in gputrace.steps(events):
        print(step.number, step.duration_us, step.idle_fraction)

Events are :class:`d2l_ext.trace.Event` objects (so ``trace.plot_timeline`` and
``trace.busy_time`` take them) with more fields: a kind in one vocabulary for both
generations, the device and stream, the correlation id and the raw ``args``. Times are in
microseconds, as in the trace. Results are plain dataclasses, dicts and lists.
"""

from __future__ import annotations

import bisect
import functools
import gzip
import json
import os
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from d2l_ext.trace import Event, busy_time

# ---------------------------------------------------------------------------------------------
# Vocabulary

#: Trace categories of both profiler generations, by kind.
KINDS: dict[str, tuple[str, ...]] = {
    "runtime": ("Runtime", "cuda_runtime", "cuda_driver"),
    "kernel": ("Kernel", "kernel"),
    "memcpy": ("Memcpy", "gpu_memcpy"),
    "memset": ("Memset", "gpu_memset"),
    "sync": ("cuda_sync",),
    "op": ("Operator", "cpu_op"),
    "annotation": ("user_annotation", "gpu_user_annotation"),
}
_KIND_OF = {category.lower(): kind for kind, cats in KINDS.items() for category in cats}
#: Kinds of work that occupy a device: its busy time is the union of these.
WORK_KINDS = ("kernel", "memcpy", "memset")
#: Categories recorded on a device's process (a stream, or the device as a whole).
DEVICE_CATEGORIES = ("kernel", "memcpy", "memset", "gpu_memcpy", "gpu_memset", "cuda_sync",
                     "gpu_user_annotation")
#: Flow categories that link a runtime call on the host to the work it put on a device.
LAUNCH_FLOWS = ("ac2g", "async")
#: Runtime calls after which the host waits for a device.
SYNC_CALLS = ("cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize")
#: Copies that wait for the device when they copy to the host.
COPY_CALLS = ("cudaMemcpyAsync", "cudaMemcpy")
_STEP = re.compile(r"ProfilerStep\s*#\s*(\d+)")
_STREAM = re.compile(r"stream\s*(-?\d+)", re.IGNORECASE)


def classify(category: str) -> str:
    """The kind of an event of trace category ``category``: "runtime", "kernel", "memcpy",
    "memset", "sync", "op", "annotation", or "" for any other."""
    return _KIND_OF.get(str(category).lower(), "")


@dataclass(frozen=True)
class GpuEvent(Event):
    """A :class:`d2l_ext.trace.Event` of a GPU trace, with what links it to others.

    ``kind`` is :func:`classify`'s; ``device`` and ``stream`` are set on a device's events
    (``stream`` -1 for an event of the whole device, such as a device synchronisation);
    ``thread`` is the host thread of a host event; ``correlation`` pairs a runtime call with
    the device event it caused, and so does ``flow`` (the id of the launch flow linking them,
    where the trace has one); ``external_id`` names the host op that launched it.
    """

    kind: str = ""
    device: int | None = None
    stream: int | None = None
    thread: int | str | None = None
    correlation: int | None = None
    external_id: int | None = None
    flow: int | None = None
    args: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False,
                                    repr=False)

    @property
    def on_device(self) -> bool:
        """Whether the event was recorded on a device rather than on the host."""
        return self.device is not None


# ---------------------------------------------------------------------------------------------
# Reading traces

#: The shipped traces: short name -> (file, GPU, repository @ commit, licence). Kept in sync
#: with PROVENANCE.md (tests/test_gputrace.py checks that they agree).
SHIPPED: dict[str, tuple[str, str, str, str]] = {
    "resnet50_v100_num_workers_0": (
        "resnet50_v100_num_workers_0.pt.trace.json.gz", "Tesla V100-DGXS-32GB",
        "pytorch/kineto @ 041e7ce", "BSD-3-Clause"),
    "resnet50_v100_num_workers_4": (
        "resnet50_v100_num_workers_4.pt.trace.json.gz", "Tesla V100-DGXS-32GB",
        "pytorch/kineto @ 041e7ce", "BSD-3-Clause"),
    "alexnet_a100_sync": (
        "alexnet_a100_sync.trace.json.gz", "NVIDIA A100-PG509-200",
        "facebookresearch/HolisticTraceAnalysis @ f4d0062", "MIT"),
    "event_sync_a100": (
        "event_sync_a100.trace.json.gz", "NVIDIA A100-PG509-200",
        "facebookresearch/HolisticTraceAnalysis @ f4d0062", "MIT"),
    "event_sync_multi_stream_a100": (
        "event_sync_multi_stream_a100.trace.json.gz", "NVIDIA A100-PG509-200",
        "facebookresearch/HolisticTraceAnalysis @ f4d0062", "MIT"),
    "nccl_rank0_sampled": (
        "nccl_rank0_sampled.trace.json.gz",
        "GPU not named in the trace (Sm80-family kernels, recorded April 2023: most likely "
        "an A100)",
        "facebookresearch/HolisticTraceAnalysis @ f4d0062", "MIT"),
}
_DATA = ("data", "gpu_traces")


def names() -> list[str]:
    """The short names of the shipped traces."""
    return sorted(SHIPPED)


def _shipped(name: str) -> tuple[str, str, str, str]:
    if name not in SHIPPED:
        raise KeyError(f"no shipped GPU trace named {name!r}; the traces are: "
                       + ", ".join(names()))
    return SHIPPED[name]


def provenance(name: str) -> str:
    """One line saying where the shipped trace ``name`` comes from: GPU, source, licence."""
    _, gpu, source, licence = _shipped(name)
    return f"{name}: {gpu}; from {source}; {licence} licence"


def path(name: str):
    """The shipped trace file ``name`` (an importlib.resources Traversable)."""
    folder = resources.files("d2l_ext")
    for part in _DATA:
        folder = folder / part
    return folder / _shipped(name)[0]


def load(name: str) -> list[GpuEvent]:
    """The timed events of the shipped trace ``name`` (see :func:`names`), by start time."""
    return list(_loaded(name)[0])


@functools.lru_cache(maxsize=8)
def _loaded(name: str) -> tuple[tuple[GpuEvent, ...], dict[str, Any]]:
    """The events of a shipped trace and its other fields, read once."""
    data = _decode(path(name).read_bytes(), name)
    fields = {k: v for k, v in data.items() if k != "traceEvents"} if isinstance(data, dict) else {}
    return tuple(parse(data)), fields


def read(file: str | os.PathLike) -> list[GpuEvent]:
    """The timed events of a Chrome trace file (gzipped or not), by start time."""
    with open(file, "rb") as f:
        return parse(_decode(f.read(), str(file)))


def raw_events(name: str) -> list[dict]:
    """The raw trace events (dicts, as in the JSON) of the shipped trace ``name``."""
    return _raw(_decode(path(name).read_bytes(), name))


def metadata(name: str) -> dict[str, Any]:
    """The shipped trace's own fields besides its events (``deviceProperties``,
    ``distributedInfo``, ``schemaVersion``, ...)."""
    return dict(_loaded(name)[1])


def _decode(data: bytes, where: str) -> Any:
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{where} is not a JSON trace file ({err}).") from err


def _raw(data: Any) -> list[dict]:
    raw = data.get("traceEvents", []) if isinstance(data, dict) else data
    if not isinstance(raw, list):
        raise ValueError("the trace has no list of trace events.")
    return [e for e in raw if isinstance(e, dict)]


def _int(value: Any) -> int | None:
    """An id as an int (numeric strings too), else None."""
    if type(value) is int:
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit() and text.count("-") <= 1 and text.isascii():
            return int(text)
    return None


def _key(value: Any) -> Any:
    """``value`` if it can be hashed (a pid or tid: a number or a string), else its text."""
    return value if isinstance(value, (int, float, str, type(None))) else str(value)


@functools.lru_cache(maxsize=4096, typed=True)
def _thread(value: Any) -> int | str:
    """A pid or tid as an int where it is a number, else as a string."""
    number = _int(value)
    return number if number is not None else str(value)


def parse(data: Any) -> list[GpuEvent]:
    """The complete (``"ph": "X"``) events of a decoded trace (a dict with ``traceEvents`` or
    a list), as :class:`GpuEvent` objects sorted by start time, with launch flows attached."""
    raw = _raw(data)
    thread_names: dict[tuple, str] = {}
    gpu_processes: set = set()
    for e in raw:
        if e.get("ph") != "M":
            continue
        args = e.get("args") or {}
        if e.get("name") == "thread_name":
            thread_names[(_thread(_key(e.get("pid"))), _thread(_key(e.get("tid"))))] = str(
                args.get("name"))
        elif e.get("name") == "process_labels" and str(args.get("labels", "")).startswith("GPU"):
            gpu_processes.add(_thread(_key(e.get("pid"))))

    fields: list[dict[str, Any]] = []  # the keyword arguments of each event, flow added later
    by_place: dict[tuple, list[int]] = {}  # (pid, tid, ts) -> indices of X events there
    for e in raw:
        if e.get("ph") != "X" or "ts" not in e:
            continue
        category = str(e.get("cat", ""))
        kind = classify(category)
        args = e.get("args") or {}
        pid, tid = _thread(_key(e.get("pid"))), _thread(_key(e.get("tid")))
        device = stream = thread = None
        if category.lower() in DEVICE_CATEGORIES or (
                pid in gpu_processes and kind in ("kernel", "memcpy", "memset", "sync")):
            device = _int(args.get("device"))
            device = device if device is not None else _int(pid)
            stream = _int(args.get("stream"))
            if stream is None:
                match = _STREAM.search(str(tid)) or _STREAM.search(
                    thread_names.get((pid, tid), ""))
                stream = int(match.group(1)) if match else _int(tid)
            if stream is not None and (stream < 0 or stream >= 2**31):
                stream = -1  # the whole device (-1, or 2**32 - 1 as an unsigned int)
            track = f"GPU {device} stream {stream}" if stream != -1 else f"GPU {device}"
        elif isinstance(pid, int):
            thread = tid
            track = f"CPU thread {tid}"
        else:
            track = f"{pid} {tid}"
        external = args.get("External id", args.get("external id"))
        by_place.setdefault((pid, tid, float(e["ts"])), []).append(len(fields))
        fields.append(dict(
            name=str(e.get("name", "")), track=track, start_us=float(e["ts"]),
            duration_us=float(e.get("dur", 0.0)), category=category, kind=kind, device=device,
            stream=stream, thread=thread, correlation=_int(args.get("correlation")),
            external_id=_int(external), args=args))

    # launch flows: an "s" bound to the runtime call that starts at its time on its thread, an
    # "f" to the device event that starts there; kept only where both ends are found
    ends: dict[int, dict[str, int]] = {}
    for e in raw:
        phase, category = e.get("ph"), str(e.get("cat", ""))
        if phase not in ("s", "f") or category not in LAUNCH_FLOWS or "ts" not in e:
            continue
        if category == "async" and e.get("name") != "launch":
            continue
        place = (_thread(_key(e.get("pid"))), _thread(_key(e.get("tid"))), float(e["ts"]))
        wanted = ("runtime",) if phase == "s" else ("kernel", "memcpy", "memset", "sync")
        candidates = [i for i in by_place.get(place, []) if fields[i]["kind"] in wanted
                      and (fields[i]["device"] is not None) == (phase == "f")]
        flow_id = _int(e.get("id"))
        if candidates and flow_id is not None:
            ends.setdefault(flow_id, {})[phase] = min(
                candidates, key=lambda i: fields[i]["duration_us"])
    for flow_id, pair in ends.items():
        if "s" in pair and "f" in pair:
            for i in pair.values():
                fields[i]["flow"] = flow_id
    return sorted((GpuEvent(**f) for f in fields), key=lambda ev: ev.start_us)


def work(events: Iterable[GpuEvent], stream: int | None = None,
         device: int | None = None) -> list[GpuEvent]:
    """The device work among ``events``: kernels, copies and memsets (optionally of one stream
    or one device), in the order given."""
    return [e for e in events if e.on_device and e.kind in WORK_KINDS
            and (stream is None or e.stream == stream) and (device is None or e.device == device)]


def host(events: Iterable[GpuEvent]) -> list[GpuEvent]:
    """The host's ops, annotations and runtime calls among ``events``."""
    return [e for e in events if not e.on_device and e.kind in ("op", "annotation", "runtime")]


# ---------------------------------------------------------------------------------------------
# Launches: how far the host runs ahead of the device


@dataclass(frozen=True)
class Launch:
    """A runtime call on the host and the device work it put on a stream.

    ``via`` says how they were linked: "flow" (the trace's launch flow) or "correlation"
    (the ``correlation`` id that both carry).
    """

    call: GpuEvent
    work: GpuEvent
    via: str

    @property
    def lead_us(self) -> float:
        """How far the host ran ahead: the work's start on the device minus the call's start."""
        return self.work.start_us - self.call.start_us

    @property
    def delay_us(self) -> float:
        """The work's start minus the call's end (HolisticTraceAnalysis's launch delay before
        clipping at 0); negative where the work started before the call returned."""
        return self.work.start_us - self.call.end_us


def launches(events: Sequence[GpuEvent], kinds: Iterable[str] = WORK_KINDS,
             start_us: float | None = None, end_us: float | None = None) -> list[Launch]:
    """Each device event of ``kinds`` with the runtime call that caused it, by call start
    (only calls that start from ``start_us`` and before ``end_us``, where given).

    Linked by the trace's launch flows, or, for events without one, by the ``correlation``
    id that a runtime call and a device event share. Device events whose call is not in the
    trace (it ran before the trace began), and calls whose work is not (it ran after the
    trace ended), are left out.
    """
    kinds = tuple(kinds)
    calls_by_flow = {e.flow: e for e in events if e.kind == "runtime" and e.flow is not None}
    calls_by_corr = {e.correlation: e for e in events
                     if e.kind == "runtime" and not e.on_device and e.correlation is not None}
    found = []
    for e in events:
        if not e.on_device or e.kind not in kinds:
            continue
        if e.flow is not None and e.flow in calls_by_flow:
            found.append(Launch(calls_by_flow[e.flow], e, "flow"))
        elif e.correlation is not None and e.correlation in calls_by_corr:
            found.append(Launch(calls_by_corr[e.correlation], e, "correlation"))
    found = [link for link in found if (start_us is None or link.call.start_us >= start_us)
             and (end_us is None or link.call.start_us < end_us)]
    return sorted(found, key=lambda link: (link.call.start_us, link.work.start_us))


def lead_stats(links: Iterable[Launch]) -> dict[str, float]:
    """Count, min, median, mean and max of the leads (microseconds) of ``links``."""
    leads = sorted(link.lead_us for link in links)
    if not leads:
        return {"count": 0, "min": 0.0, "median": 0.0, "mean": 0.0, "max": 0.0}
    return {"count": len(leads), "min": leads[0], "median": statistics.median(leads),
            "mean": statistics.fmean(leads), "max": leads[-1]}


def queue_depth(links: Iterable[Launch], until: str = "end",
                stream: int | None = None) -> list[tuple[float, int]]:
    """The number of launched, unfinished pieces of work over time, as a step function.

    Each piece counts from its call's start on the host until its end on the device
    (``until="end"``), or until its start (``until="start"``: launched but not yet running,
    HolisticTraceAnalysis's queue length). Returns ``(time, depth from then on)`` pairs,
    one per moment at which the depth changes, in time order; before the first it is 0.
    """
    if until not in ("end", "start"):
        raise ValueError(f"until is 'end' or 'start', not {until!r}")
    change: dict[float, int] = {}
    for link in links:
        if stream is not None and link.work.stream != stream:
            continue
        done = link.work.end_us if until == "end" else link.work.start_us
        change[link.call.start_us] = change.get(link.call.start_us, 0) + 1
        change[done] = change.get(done, 0) - 1
    series, depth = [], 0
    for t in sorted(change):
        if change[t]:
            depth += change[t]
            series.append((t, depth))
    return series


def depth_stats(series: Sequence[tuple[float, int]], start_us: float | None = None,
                end_us: float | None = None) -> dict[str, float]:
    """The max, time-weighted mean and the fraction of time at 0 of a :func:`queue_depth`
    series, between ``start_us`` and ``end_us`` (default: its first and last change)."""
    if not series:
        return {"max": 0, "mean": 0.0, "empty_fraction": 1.0}
    start = series[0][0] if start_us is None else start_us
    end = series[-1][0] if end_us is None else end_us
    total = weighted = empty = 0.0
    peak = 0
    times = [t for t, _ in series]
    depth = series[bisect.bisect_right(times, start) - 1][1] if times[0] <= start else 0
    t_prev = start
    for t, new_depth in series:
        if t <= start:
            continue
        if t >= end:
            break
        total, weighted = total + (t - t_prev), weighted + depth * (t - t_prev)
        empty += (t - t_prev) if depth == 0 else 0.0
        peak = max(peak, depth)
        depth, t_prev = new_depth, t
    if end > t_prev:
        total, weighted = total + (end - t_prev), weighted + depth * (end - t_prev)
        empty += (end - t_prev) if depth == 0 else 0.0
        peak = max(peak, depth)
    if total <= 0:
        return {"max": peak, "mean": float(depth), "empty_fraction": float(depth == 0)}
    return {"max": peak, "mean": weighted / total, "empty_fraction": empty / total}


# ---------------------------------------------------------------------------------------------
# Steps and idle time


@dataclass(frozen=True)
class Step:
    """One ``ProfilerStep#N`` of the host, and how busy the device was during it."""

    number: int
    start_us: float
    end_us: float
    busy_us: float

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us

    @property
    def idle_us(self) -> float:
        """The time of the step during which no kernel, copy or memset ran on the device."""
        return self.duration_us - self.busy_us

    @property
    def idle_fraction(self) -> float:
        return self.idle_us / self.duration_us if self.duration_us > 0 else 0.0


def steps(events: Sequence[GpuEvent]) -> list[Step]:
    """The profiler steps (host ``ProfilerStep#N`` spans) in order, with the device's busy
    time within each (``trace.busy_time`` over kernels, copies and memsets)."""
    device_work = work(events)
    found = []
    for e in events:
        match = _STEP.fullmatch(e.name.strip())
        if match and not e.on_device:
            found.append(Step(int(match.group(1)), e.start_us, e.end_us,
                              busy_time(device_work, e.start_us, e.end_us)))
    return sorted(found, key=lambda s: s.start_us)


@dataclass(frozen=True)
class Gap:
    """A span during which the device ran no work, and what the host was doing then.

    ``host`` lists the host events (ops, annotations, runtime calls; not the profiler steps)
    that overlap the gap as ``(name, overlap in µs)``, the largest overlap first (of two
    equal ones, the shorter, inner event first).
    """

    start_us: float
    end_us: float
    host: tuple[tuple[str, float], ...] = ()

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us

    @property
    def doing(self) -> str:
        """The host event that overlaps the gap most ("" if none)."""
        return self.host[0][0] if self.host else ""


def idle_spans(device_work: Iterable[Event], start_us: float | None = None,
               end_us: float | None = None) -> list[tuple[float, float]]:
    """The spans with no event of ``device_work`` running, in time order, within the window
    (default: from the first event's start to the last one's end)."""
    spans = sorted((e.start_us, e.end_us) for e in device_work)
    if not spans:
        return [] if start_us is None or end_us is None else [(start_us, end_us)]
    start = spans[0][0] if start_us is None else start_us
    end = max(b for _, b in spans) if end_us is None else end_us
    idle, reach = [], start
    for begin, finish in spans:
        if begin > reach and reach < end:
            idle.append((reach, min(begin, end)))
        reach = max(reach, finish)
        if reach >= end:
            break
    if reach < end:
        idle.append((reach, end))
    return [(a, b) for a, b in idle if b > a]


@dataclass(frozen=True)
class IdleSplit:
    """A window's device idle time in two parts: with work launched that had not started yet
    (``launched_us``), and with nothing launched and waiting (``empty_us``)."""

    launched_us: float
    empty_us: float

    @property
    def idle_us(self) -> float:
        return self.launched_us + self.empty_us


def idle_split(events: Sequence[GpuEvent], start_us: float | None = None,
               end_us: float | None = None) -> IdleSplit:
    """The device's idle time within the window (no kernel, copy or memset running on any
    stream; the window as in :func:`idle_spans`), split by whether the host had launched work
    that had not started yet (:func:`queue_depth` with ``until="start"`` above 0).

    Idle time with nothing launched is a device waiting for its host. Idle time with work
    launched waited on something else: a dependency on work of another stream or device (an
    event, a collective waiting for other ranks), or on anything the trace does not record.
    Only launches whose call the trace holds count.
    """
    series = queue_depth(launches(events), until="start")
    times = [t for t, _ in series]
    launched = empty = 0.0
    for a, b in idle_spans(work(events), start_us, end_us):
        i = bisect.bisect_right(times, a)
        depth, t = (series[i - 1][1] if i else 0), a
        for when, new_depth in series[i:]:
            if when >= b:
                break
            launched += (when - t) if depth > 0 else 0.0
            depth, t = new_depth, when
        launched += (b - t) if depth > 0 else 0.0
        empty += b - a
    return IdleSplit(launched, empty - launched)


class _Overlaps:
    """Finds the events overlapping a span quickly: short events by a bisect on their starts,
    the few long ones by a scan."""

    def __init__(self, events: Iterable[GpuEvent], long_us: float = 2000.0):
        chosen = sorted(events, key=lambda e: e.start_us)
        self.long = [e for e in chosen if e.duration_us > long_us]
        self.short = [e for e in chosen if e.duration_us <= long_us]
        self.starts = [e.start_us for e in self.short]
        self.long_us = long_us

    def __call__(self, start: float, end: float) -> list[tuple[str, float]]:
        lo = bisect.bisect_left(self.starts, start - self.long_us)
        hi = bisect.bisect_left(self.starts, end)
        found = []
        for e in self.long + self.short[lo:hi]:
            overlap = min(e.end_us, end) - max(e.start_us, start)
            if overlap > 0:
                found.append((overlap, e.duration_us, e.name))
        found.sort(key=lambda x: (-x[0], x[1]))
        return [(name, overlap) for overlap, _, name in found]


def gaps(events: Sequence[GpuEvent], start_us: float | None = None,
         end_us: float | None = None, min_us: float = 0.0,
         top: int | None = None) -> list[Gap]:
    """The device's idle spans within the window, longest first, each with what the host did.

    The window defaults to the device's first work to its last; within a given window, idle
    time at its edges counts, so the gaps add up to the window minus ``trace.busy_time``.
    Gaps shorter than ``min_us`` are left out; ``top`` keeps the longest so many.
    """
    spans = [s for s in idle_spans(work(events), start_us, end_us) if s[1] - s[0] >= min_us]
    spans.sort(key=lambda s: (-(s[1] - s[0]), s[0]))
    if top is not None:
        spans = spans[:top]
    overlaps = _Overlaps(e for e in host(events) if not _STEP.fullmatch(e.name.strip()))
    return [Gap(a, b, tuple(overlaps(a, b))) for a, b in spans]


# ---------------------------------------------------------------------------------------------
# Synchronisations


@dataclass(frozen=True)
class Sync:
    """A host call that waited for the device, and the device's idle span around its return.

    ``device_event`` is the device's record of it where the trace has one (a ``cuda_sync``
    event, or the device-to-host copy); ``idle_start_us`` is when the device's last work
    before the return ended and ``idle_end_us`` when its next work began (equal, at the
    return, if the device was busy then; None where there was no work before or after).
    """

    call: GpuEvent
    device_event: GpuEvent | None
    idle_start_us: float | None
    idle_end_us: float | None

    @property
    def wait_us(self) -> float:
        """How long the host was inside the call."""
        return self.call.duration_us

    @property
    def idle_after_us(self) -> float | None:
        """From the call's return to the device's next work: the idle time that followed."""
        if self.idle_end_us is None:
            return None
        return max(self.idle_end_us - self.call.end_us, 0.0)

    @property
    def gap_us(self) -> float | None:
        """The whole device idle span around the return (its work drained, then refilled)."""
        if self.idle_start_us is None or self.idle_end_us is None:
            return None
        return self.idle_end_us - self.idle_start_us


def syncs(events: Sequence[GpuEvent]) -> list[Sync]:
    """Every stream, event and device synchronisation and every device-to-host copy call, in
    time order, with how long the host waited and the device idle span that followed."""
    linked = {id(link.call): link.work for link in launches(events, kinds=("sync", "memcpy"))}
    device_work = work(events)
    starts = sorted(e.start_us for e in device_work)
    by_end = sorted(device_work, key=lambda e: e.end_us)
    ends = [e.end_us for e in by_end]
    found = []
    for e in events:
        if e.kind != "runtime" or e.on_device:
            continue
        device_event = linked.get(id(e))
        if e.name in COPY_CALLS:
            if device_event is None or "dtoh" not in device_event.name.lower():
                continue
        elif e.name not in SYNC_CALLS:
            continue
        t = e.end_us
        if any(w.start_us < t < w.end_us for w in device_work):
            idle_start = idle_end = t
        else:
            before = bisect.bisect_right(ends, t)
            after = bisect.bisect_left(starts, t)
            idle_start = ends[before - 1] if before else None
            idle_end = starts[after] if after < len(starts) else None
        found.append(Sync(e, device_event, idle_start, idle_end))
    return found


# ---------------------------------------------------------------------------------------------
# Streams


def stream_busy(events: Sequence[GpuEvent], start_us: float | None = None,
                end_us: float | None = None, device: int | None = None) -> dict[int, float]:
    """Each stream's busy time (µs; kernels, copies, memsets) within the window."""
    streams = sorted({e.stream for e in work(events, device=device) if e.stream is not None})
    return {s: busy_time(work(events, s, device), start_us, end_us) for s in streams}


def overlap(events: Sequence[GpuEvent], a: int, b: int, start_us: float | None = None,
            end_us: float | None = None, device: int | None = None) -> float:
    """The time (µs) during which streams ``a`` and ``b`` both run work, within the window:
    busy(a) + busy(b) - busy(a or b)."""
    on_a, on_b = work(events, a, device), work(events, b, device)
    return (busy_time(on_a, start_us, end_us) + busy_time(on_b, start_us, end_us)
            - busy_time(on_a + on_b, start_us, end_us))


@dataclass(frozen=True)
class Join:
    """A stream told to wait for an event recorded on another (``cudaStreamWaitEvent``).

    ``call`` is the host's call, ``marker`` the device's "Stream Wait Event" record (newer
    traces), ``stream`` the stream that waits and ``on_stream`` the one it waits for (known
    from the marker), ``record`` the ``cudaEventRecord`` call of the event waited for.
    """

    call: GpuEvent | None
    marker: GpuEvent | None
    stream: int | None
    on_stream: int | None
    record: GpuEvent | None


def joins(events: Sequence[GpuEvent]) -> list[Join]:
    """Every join of one stream onto another, in time order."""
    markers = {id(link.call): link.work for link in launches(events, kinds=("sync",))
               if link.work.name == "Stream Wait Event"}
    calls_by_corr = {e.correlation: e for e in events
                     if e.kind == "runtime" and not e.on_device and e.correlation is not None}
    linked = {id(marker) for marker in markers.values()}
    found = []
    for e in events:
        if e.kind == "runtime" and e.name == "cudaStreamWaitEvent" and not e.on_device:
            call, marker = e, markers.get(id(e))
        elif e.kind == "sync" and e.name == "Stream Wait Event" and id(e) not in linked:
            call, marker = None, e  # a marker whose call the trace lacks
        else:
            continue
        args = marker.args if marker is not None else {}
        on_stream = _int(args.get("wait_on_stream"))
        record = calls_by_corr.get(_int(args.get("wait_on_cuda_event_record_corr_id")))
        found.append(Join(call, marker, marker.stream if marker is not None else None,
                          on_stream if on_stream is None or on_stream >= 0 else None, record))
    return sorted(found, key=lambda j: (j.call or j.marker).start_us)
