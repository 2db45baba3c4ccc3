"""The memory chapter's plots, drawn from its own measurements (the memory chapter, PyTorch tab).

* :func:`step_by_category`: the marks of one :class:`d2l_ext.memory.Tracker` block of
  training steps as stacked bars, split into parameters, optimizer state, gradients,
  activations and the temporaries between two marks;
* :func:`timelines`: allocated bytes over time for several runs (activation checkpointing
  with 0, 2, 4 segments), from :meth:`~d2l_ext.memory.Tracker.timeline` on a CPU or
  :func:`recorded_timeline` on an accelerator;
* :func:`counted_vs_measured`: a grouped bar chart of a table of counted and measured bytes
  (the sharding experiment), one panel per moment of the step.

Every text in the figures goes through :func:`d2l_ext.i18n.label`, so that the Chinese
edition shows Chinese labels.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .i18n import label

MiB = 2**20

#: the categories of :func:`step_by_category`, bottom to top, with their colours and names
CATEGORIES = {
    "parameters": ("#0a7d91", "parameters", "参数"),
    "optimizer state": ("#5b8c2a", "optimizer state", "优化器状态"),
    "gradients": ("#e59a4c", "gradients", "梯度"),
    "activations": ("#8c4f9f", "activations", "激活"),
    "temporaries": ("#dddddd", "temporaries (peak between the marks above both)",
                    "临时张量（两个标记之间高出两者的峰值）"),
}

#: the words of the chapter's mark labels ("forward 1", "step 2", ...) in Chinese
MARK_WORDS = {"parameters": "参数", "forward": "前向", "backward": "反向", "step": "更新",
              "zero_grad": "zero_grad"}


def mark_label(text: str) -> str:
    """A mark's label such as ``"backward 2"`` for a figure, in the reader's language."""
    word, _, rest = text.partition(" ")
    zh = MARK_WORDS.get(word, word) + (f" {rest}" if rest else "")
    return label(en=text, zh=zh)


def categorise(readings: Sequence[Any], parameters: int, gradients: int,
               state: int) -> list[dict[str, int]]:
    """Split each reading of a block of training steps into :data:`CATEGORIES` (bytes).

    ``readings`` are :class:`~d2l_ext.memory.Reading` objects (``label``, ``allocated``,
    ``peak``) of marks named as in the chapter: ``parameters``, then ``forward i``,
    ``backward i``, ``step i``, ``zero_grad i`` for each step ``i``. ``parameters``,
    ``gradients`` and ``state`` are the measured bytes of each (the chapter's first table).
    The parameters are there from their mark on, the optimizer's state from the first
    ``step`` mark on, the gradients from a ``backward`` mark until the next ``zero_grad``
    (which sets them to ``None``); what the reading holds beyond those is counted as
    activations (at a ``forward`` mark the kept activations; elsewhere a few scalars such as
    the loss), and the temporaries are how far the peak since the previous mark rose above
    both that mark's reading and this one: memory allocated and freed again in between (the
    forward pass's intermediates, the update's scratch tensors)."""
    out, has_state, has_grads, previous = [], False, False, 0
    for r in readings:
        word = r.label.split()[0]
        if word == "step":
            has_state = True
        if word == "backward":
            has_grads = True
        if word == "zero_grad":
            has_grads = False
        parts = {"parameters": parameters, "optimizer state": state if has_state else 0,
                 "gradients": gradients if has_grads else 0}
        left = r.allocated
        for key, size in parts.items():  # never more than the reading holds
            parts[key] = min(size, max(0, left))
            left -= parts[key]
        parts["activations"] = max(0, left)
        parts["temporaries"] = max(0, r.peak - max(r.allocated, previous))
        previous = r.allocated
        out.append(parts)
    return out


def step_by_category(readings: Sequence[Any], parameters: int, gradients: int, state: int,
                     title: str | None = None, ax=None):
    """Stacked bars, one per mark, of :func:`categorise`'s split in MiB; returns the axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.4))
    parts = categorise(readings, parameters, gradients, state)
    xs = range(len(parts))
    bottom = [0.0] * len(parts)
    for key, (colour, en, zh) in CATEGORIES.items():
        heights = [p[key] / MiB for p in parts]
        ax.bar(xs, heights, bottom=bottom, color=colour, width=0.7, label=label(en=en, zh=zh),
               hatch="//" if key == "temporaries" else None, edgecolor="white", lw=0.5)
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.set_xticks(list(xs), [mark_label(r.label) for r in readings], rotation=60, ha="right",
                  fontsize=8)
    ax.set_ylabel(label(en="MiB at the mark", zh="各标记处的内存（MiB）"))
    if title:
        ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", ncols=2)
    ax.figure.tight_layout()
    return ax


def timelines(series: dict[str, tuple[Sequence[float], Sequence[int]]], title: str | None = None,
              ax=None):
    """Allocated MiB against time (ms) for each run of ``series`` (its legend text: times,
    bytes after each change); returns the axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.2))
    for name, (times, sizes) in series.items():
        ax.step(list(times), [s / MiB for s in sizes], where="post", lw=1.2, label=name)
    ax.set_xlabel(label(en="time since the step began (ms)", zh="自这一步开始以来的时间（毫秒）"))
    ax.set_ylabel(label(en="allocated (MiB)", zh="已分配（MiB）"))
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    ax.figure.tight_layout()
    return ax


def snapshot_timeline(snapshot: dict, device: int = 0) -> tuple[list[float], list[int]]:
    """Times (ms since the first event) and allocated bytes after each change, from a
    snapshot of PyTorch's allocator history (``torch.cuda.memory._snapshot()`` taken while
    ``_record_memory_history`` was on): its ``device_traces`` list, for each device, the
    events ``alloc`` (+size) and ``free_completed`` (-size) with ``time_us``."""
    events = [e for e in snapshot.get("device_traces", [[]])[device]
              if e.get("action") in ("alloc", "free_completed")]
    if not events:
        return [], []
    start, total, times, sizes = events[0].get("time_us", 0), 0, [], []
    for e in events:
        total += e["size"] if e["action"] == "alloc" else -e["size"]
        times.append((e.get("time_us", 0) - start) / 1e3)
        sizes.append(total)
    return times, sizes


def recorded_timeline(fn: Callable[[], object], device) -> tuple[list[float], list[int]]:
    """Run ``fn`` once and return its allocation timeline (ms, bytes): on a CPU from a
    :class:`~d2l_ext.memory.Tracker`, on an accelerator from the allocator's recorded history
    (``torch.<device>.memory._record_memory_history``, a documented but private API)."""
    import torch

    from .memory import Tracker

    device = torch.device(device)
    if device.type == "cpu":
        with Tracker(device) as t:
            fn()
            t.mark("end")
        return t.timeline()[:2]
    backend = getattr(torch, device.type).memory
    torch.accelerator.synchronize()
    backend._record_memory_history(max_entries=100_000)
    try:
        fn()
        torch.accelerator.synchronize()
        snapshot = backend._snapshot()
    finally:
        backend._record_memory_history(enabled=None)
    index = device.index if device.index is not None else torch.accelerator.current_device_index()
    return snapshot_timeline(snapshot, index)


def counted_vs_measured(groups: Sequence[str], moments: Sequence[str],
                        counted: Sequence[Sequence[float]], measured: Sequence[Sequence[float]],
                        unit: str = "MiB"):
    """One panel per moment, each with a pair of bars (counted, measured) per group:
    ``counted[g][m]`` and ``measured[g][m]`` are group ``g``'s values at moment ``m`` (in
    ``unit``). ``groups`` and ``moments`` are texts already in the reader's language (made
    with :func:`label`). Returns the figure."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(moments), figsize=(9, 4.6), sharey=True, squeeze=False)
    xs = list(range(len(groups)))
    for m, (ax, moment) in enumerate(zip(axes[0], moments)):
        ax.bar([x - 0.2 for x in xs], [c[m] for c in counted], width=0.4, color="#9fd3dc",
               label=label(en="counted", zh="计数"))
        ax.bar([x + 0.2 for x in xs], [v[m] for v in measured], width=0.4, color="#0a7d91",
               label=label(en="measured", zh="实测"))
        ax.set_xticks(xs, list(groups), rotation=60, ha="right", fontsize=7)
        ax.set_title(moment, fontsize=9)
    axes[0][0].set_ylabel(label(en=f"held by the process ({unit})", zh=f"进程持有（{unit}）"))
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    return fig
