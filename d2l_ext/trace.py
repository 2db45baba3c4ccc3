"""Read a profiler trace (Chrome trace-event JSON) and draw its timeline with matplotlib.

``torch.profiler.profile(...).export_chrome_trace(path)`` and MXNet's ``mx.profiler.dump()``
both write this format; Perfetto (https://ui.perfetto.dev) and ``chrome://tracing`` open it
too. The host-device-sync chapter draws the host and device timelines of a training step with it::

    from d2l_ext import trace
    events = trace.load_trace("step.json")
    trace.plot_timeline(events)

The figure's own texts ("time (ms)", "no events") are in the reader's language
(:func:`d2l_ext.i18n.label`); pass rows and bar texts made with ``label`` to localise the rest.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from d2l_ext.i18n import display_width, label


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
#: The phases that open and close an async span (nestable ``b``/``e``; legacy ``S``/``F``).
ASYNC_BEGIN, ASYNC_END = ("b", "S"), ("e", "F")


def load_trace(path: str | os.PathLike,
               track: Callable[[dict], str] | None = None) -> list[Event]:
    """The timed events of a Chrome trace file, sorted by start time.

    Three kinds of span are read; times are in microseconds:

    * complete events (``"ph": "X"``, with a duration), as PyTorch writes them;
    * begin/end pairs (``"B"``/``"E"``), matched per thread, innermost first, as MXNet writes
      its operators;
    * async begin/end pairs (``"b"``/``"e"``, and the older ``"S"``/``"F"``), matched by
      process, category and ``id``, innermost first, as MXNet writes its C API calls (the Python
      thread's calls into MXNet, ``MXNDArrayWaitAll`` among them), its profiler tasks and a
      second copy of its operators.

    ``track(event)`` names the row of a raw event (for a pair, the event that opens it), or
    returns None to leave the event out. By default: a device stream for PyTorch's kernels
    and copies (``GPU stream 7``); a named process and its thread for MXNet's devices and
    async events (``cpu/0 thread 1``, ``MXNET_C_API thread 1``); else the host thread
    (``CPU thread 12``).
    """
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        data = _unterminated(text)
        if data is None:
            raise ValueError(f"{path} is not a JSON trace file ({err}); export one with "
                             "torch.profiler's export_chrome_trace or mx.profiler.dump.") from err
    raw = data.get("traceEvents", []) if isinstance(data, dict) else data
    if not isinstance(raw, list):
        raise ValueError(f"{path} has no list of trace events.")
    raw = [e for e in raw if isinstance(e, dict)]
    processes = {e.get("pid"): str(e.get("args", {}).get("name", "")) for e in raw
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads: dict[tuple, int] = {}

    def default(e: dict) -> str:
        if e.get("cat") in DEVICE_CATEGORIES:
            return f"GPU stream {e.get('tid', 0)}"
        process = processes.get(e.get("pid"), "")
        if e.get("ph") in ASYNC_BEGIN:
            process = process or str(e.get("cat", "")) or "async"
        elif "/" not in process:  # MXNet names its devices cpu/0, gpu/0, ...
            return f"CPU thread {e.get('tid', 0)}"
        key = (e.get("pid"), e.get("tid"))
        if key not in threads:
            threads[key] = 1 + sum(1 for pid, _ in threads if pid == key[0])
        return f"{process} thread {threads[key]}"

    track = track or default
    spans: list[tuple[dict, float]] = []  # (the event that opens a span, its duration)
    open_events: dict[tuple, list[dict]] = {}
    for e in raw:
        if "ts" not in e:
            continue
        phase = e.get("ph")
        if phase == "X":
            spans.append((e, float(e.get("dur", 0.0))))
            continue
        if phase in ("B", "E"):
            key: tuple = ("thread", e.get("pid"), e.get("tid"))
        elif phase in ASYNC_BEGIN or phase in ASYNC_END:
            key = ("async", e.get("pid"), e.get("cat"), str(e.get("id", e.get("id2"))))
        else:  # instants, counters, flows, metadata: no span
            continue
        stack = open_events.setdefault(key, [])
        if phase == "B" or phase in ASYNC_BEGIN:
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


def _unterminated(text: str):
    """A trace whose closing brackets are missing, as the trace-event format allows while a
    file is still being written (``mx.profiler.dump(finished=False)`` leaves one); else None."""
    body = text.rstrip().rstrip(",")
    for closing in ("]", "]}"):
        try:
            return json.loads(body + closing)
        except json.JSONDecodeError:
            continue
    return None


def busy_time(events: Iterable[Event], start_us: float | None = None,
              end_us: float | None = None) -> float:
    """The time (microseconds) during which at least one of ``events`` runs, within the window
    from ``start_us`` to ``end_us`` (default: unbounded).

    Overlapping events count once: the busy time of a device whose streams or worker threads
    run several operations at a time, not the sum of their durations.
    """
    spans = sorted((max(e.start_us, start_us if start_us is not None else e.start_us),
                    min(e.end_us, end_us if end_us is not None else e.end_us)) for e in events)
    total, reach = 0.0, float("-inf")
    for begin, end in spans:
        if end <= begin or end <= reach:
            continue
        total += end - max(begin, reach)
        reach = end
    return total


def overlap_time(events: Iterable[Event], others: Iterable[Event],
                 start_us: float | None = None, end_us: float | None = None) -> float:
    """The time (microseconds) during which at least one of ``events`` and at least one of
    ``others`` run at once, within the window (default: unbounded): e.g. the time that
    communication threads spent while the main thread computed the backward pass.

    Each side counts its own overlapping events once (:func:`busy_time`), so the result is
    at most the busy time of either side: busy(a) + busy(b) - busy(a and b together).
    """
    a, b = list(events), list(others)
    both = (busy_time(a, start_us, end_us) + busy_time(b, start_us, end_us)
            - busy_time(a + b, start_us, end_us))
    return max(0.0, both)


def by_track(events: Iterable[Event]) -> dict[str, list[Event]]:
    """The events grouped by their track (a host thread, a device stream), in order of each
    track's first event: one row per thread, so that two threads' events never share one."""
    rows: dict[str, list[Event]] = {}
    for e in sorted(events, key=lambda ev: ev.start_us):
        rows.setdefault(e.track, []).append(e)
    return rows


def row_names(ax) -> list[str]:
    """The names of the rows of a timeline drawn by :func:`plot_timeline` on ``ax``, top
    first."""
    rows = [t for t in ax.texts if t.get_transform() is ax.get_yaxis_transform()]
    return [t.get_text() for t in sorted(rows, key=lambda t: t.get_position()[1])]


def _color(name: str) -> str:
    """The same color for the same name, on every plot."""
    palette = ["#0a7d91", "#c46a12", "#5b8c2a", "#8c4f9f", "#b8403a", "#3d6bb3", "#a08a1c",
               "#2f8f6f", "#7a5c3e", "#d0558f"]
    return palette[zlib.crc32(name.encode()) % len(palette)]


def plot_timeline(events: Iterable[Event], ax=None, tracks: list[str] | None = None,
                  start_us: float | None = None, end_us: float | None = None,
                  min_duration_us: float = 0.0, label_fraction: float = 0.04,
                  min_width_fraction: float = 0.002,
                  text: Callable[[Event], str] | None = None):
    """Draw ``events`` as bars on one row per track, time in milliseconds from ``start_us``.

    ``tracks`` picks and orders the rows (default: every track, host threads first), whose
    names are written left of the axis (:func:`row_names` reads them back); a chosen row
    without events in the window says "no events". ``start_us``/``end_us`` cut a
    window; events shorter than ``min_duration_us`` are left out; an event wider than
    ``label_fraction`` of the window and than its text gets the text written on it (its name,
    or ``text(event)``), and one narrower than ``min_width_fraction`` of it is drawn that
    wide, so that short events stay visible.
    Gaps on a device row are time the device waited for the host.
    """
    import matplotlib.pyplot as plt

    chosen = [e for e in events if e.duration_us >= min_duration_us]
    if start_us is not None:
        chosen = [e for e in chosen if e.end_us > start_us]
    if end_us is not None:
        chosen = [e for e in chosen if e.start_us < end_us]
    if tracks is None:
        tracks = sorted({e.track for e in chosen},
                        key=lambda t: (not t.lower().startswith("cpu"), t))  # host first
    chosen = [e for e in chosen if e.track in tracks]
    if not chosen and (start_us is None or end_us is None):
        raise ValueError("no events to draw: widen the window, lower min_duration_us or "
                         "choose other tracks.")
    origin = min(e.start_us for e in chosen) if start_us is None else start_us
    last = max(e.end_us for e in chosen) if end_us is None else end_us
    width = max(last - origin, 1e-9)
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.6 * len(tracks) + 1))
    ax.set_xlim(0, width / 1000)
    # the width of one character of a label (7 points, about 0.6 em), in microseconds
    char_us = 0.6 * 7 * ax.figure.dpi / 72 / max(ax.get_window_extent().width, 1) * width
    for row, name in enumerate(tracks):
        bars: dict[str, list[tuple[float, float]]] = {}  # color: spans, one call per color
        for e in (e for e in chosen if e.track == name):
            begin = max(e.start_us, origin)
            length = min(e.end_us, last) - begin
            bars.setdefault(_color(e.name), []).append(
                ((begin - origin) / 1000, max(length, min_width_fraction * width) / 1000))
            shown = e.name if text is None else text(e)
            if length >= max(label_fraction * width, (display_width(shown) + 1) * char_us):
                ax.text((begin - origin + length / 2) / 1000, row, shown, ha="center",
                        va="center", fontsize=7, color="white", clip_on=True)
        for color, spans in bars.items():
            ax.broken_barh(spans, (row - 0.4, 0.8), facecolors=color, edgecolors="white",
                           linewidth=0.3)
        if not bars:
            ax.text(0.005 * width / 1000, row, label(en="no events", zh="无事件"),
                    va="center", fontsize=7, color="gray")
    # the rows' names are texts, not tick labels: matplotlib redraws tick labels from their
    # formatter, so a rendering with translated labels (d2l_ext.i18n) could not change them
    ax.set_yticks(range(len(tracks)), [""] * len(tracks))
    for row, name in enumerate(tracks):
        ax.text(-0.01, row, name, transform=ax.get_yaxis_transform(), ha="right",
                va="center", fontsize=plt.rcParams["ytick.labelsize"])
    ax.set_ylim(len(tracks) - 0.5, -0.5)
    ax.set_xlabel(label(en="time (ms)", zh="时间（毫秒）"))
    return ax
