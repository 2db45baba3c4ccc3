"""Read a profiler trace (Chrome trace-event JSON) and draw its timeline with matplotlib.

``torch.profiler.profile(...).export_chrome_trace(path)`` and MXNet's ``mx.profiler.dump()``
both write this format; Perfetto (https://ui.perfetto.dev) and ``chrome://tracing`` open it
too. Chapter 4 draws the host and device timelines of a training step with it::

    from d2l_ext import trace
    events = trace.load_trace("step.json")
    trace.plot_timeline(events)
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    """One timed event: what ran, on which track (a host thread or a device stream), when."""

    name: str
    track: str
    start_us: float
    duration_us: float
    category: str = ""

    @property
    def end_us(self) -> float:
        return self.start_us + self.duration_us


#: PyTorch's trace categories of work that runs on a device stream.
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")


def load_trace(path: str | os.PathLike,
               track: Callable[[dict], str] | None = None) -> list[Event]:
    """The timed events of a Chrome trace file, sorted by start time.

    Complete events (``"ph": "X"``, with a duration) are taken as they are; begin/end pairs
    (``"B"``/``"E"``, as MXNet writes them) are matched per thread, innermost first. Times
    are in microseconds. ``track(event)`` names the row of a raw event, or returns None to
    leave the event out; by default a device
    stream for PyTorch's kernels and copies (``GPU stream 7``), MXNet's device and engine
    thread for its operators (``cpu/0 thread 1``), else the host thread (``CPU thread 12``).
    """
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} is not a JSON trace file ({err}); export one with "
                             "torch.profiler's export_chrome_trace or mx.profiler.dump.") from err
    raw = data.get("traceEvents", []) if isinstance(data, dict) else data
    if not isinstance(raw, list):
        raise ValueError(f"{path} has no list of trace events.")
    raw = [e for e in raw if isinstance(e, dict)]
    devices = {e.get("pid"): str(e.get("args", {}).get("name", "")) for e in raw
               if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads: dict[tuple, int] = {}

    def default(e: dict) -> str:
        if e.get("cat") in DEVICE_CATEGORIES:
            return f"GPU stream {e.get('tid', 0)}"
        device = devices.get(e.get("pid"), "")
        if "/" in device:  # MXNet names its devices cpu/0, gpu/0, ...
            key = (e.get("pid"), e.get("tid"))
            if key not in threads:
                threads[key] = 1 + sum(1 for pid, _ in threads if pid == key[0])
            return f"{device} thread {threads[key]}"
        return f"CPU thread {e.get('tid', 0)}"

    track = track or default
    spans: list[tuple[dict, float]] = []  # (the event that opens a span, its duration)
    open_events: dict[tuple, list[dict]] = {}
    for e in raw:
        if "ts" not in e:
            continue
        phase = e.get("ph")
        if phase == "X":
            spans.append((e, float(e.get("dur", 0.0))))
        elif phase in ("B", "E"):
            stack = open_events.setdefault((e.get("pid"), e.get("tid")), [])
            if phase == "B":
                stack.append(e)
            elif stack:
                begin = stack.pop()
                spans.append((begin, float(e["ts"]) - float(begin["ts"])))
    events = []
    for e, duration in spans:
        row = track(e)
        if row is not None:
            events.append(Event(str(e.get("name", "")), row, float(e["ts"]), duration,
                                str(e.get("cat", ""))))
    return sorted(events, key=lambda ev: ev.start_us)


def _color(name: str) -> str:
    """The same color for the same name, on every plot."""
    palette = ["#0a7d91", "#c46a12", "#5b8c2a", "#8c4f9f", "#b8403a", "#3d6bb3", "#a08a1c",
               "#2f8f6f", "#7a5c3e", "#d0558f"]
    return palette[zlib.crc32(name.encode()) % len(palette)]


def plot_timeline(events: Iterable[Event], ax=None, tracks: list[str] | None = None,
                  start_us: float | None = None, end_us: float | None = None,
                  min_duration_us: float = 0.0, label_fraction: float = 0.04):
    """Draw ``events`` as bars on one row per track, time in milliseconds from ``start_us``.

    ``tracks`` picks and orders the rows (default: every track, host threads first);
    ``start_us``/``end_us`` cut a window; events shorter than ``min_duration_us`` are left
    out; an event wider than ``label_fraction`` of the window gets its name written on it.
    Gaps on a device row are time the device waited for the host.
    """
    import matplotlib.pyplot as plt

    chosen = [e for e in events if e.duration_us >= min_duration_us]
    if start_us is not None:
        chosen = [e for e in chosen if e.end_us > start_us]
    if end_us is not None:
        chosen = [e for e in chosen if e.start_us < end_us]
    if not chosen:
        raise ValueError("no events to draw: widen the window or lower min_duration_us.")
    if tracks is None:
        tracks = sorted({e.track for e in chosen},
                        key=lambda t: (not t.lower().startswith("cpu"), t))  # host first
    chosen = [e for e in chosen if e.track in tracks]
    origin = min(e.start_us for e in chosen) if start_us is None else start_us
    last = max(e.end_us for e in chosen) if end_us is None else end_us
    width = max(last - origin, 1e-9)
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.6 * len(tracks) + 1))
    for row, name in enumerate(tracks):
        for e in (e for e in chosen if e.track == name):
            begin = max(e.start_us, origin)
            length = min(e.end_us, last) - begin
            ax.broken_barh([((begin - origin) / 1000, length / 1000)], (row - 0.4, 0.8),
                           facecolors=_color(e.name), edgecolors="white", linewidth=0.3)
            if length >= label_fraction * width:
                ax.text((begin - origin + length / 2) / 1000, row, e.name, ha="center",
                        va="center", fontsize=7, color="white", clip_on=True)
    ax.set_yticks(range(len(tracks)), tracks)
    ax.set_ylim(len(tracks) - 0.5, -0.5)
    ax.set_xlim(0, width / 1000)
    ax.set_xlabel("time (ms)")
    return ax
