"""Profile training steps and find their host-device synchronisations (the host-device-sync
chapter and its section page host-device-sync-measuring share these).

The trace rules read the events of :func:`d2l_ext.trace.load_trace` only, so they run on any
machine; the profiling helpers import PyTorch when they are called. The MXNet counterparts
live in :mod:`d2l_ext.sync_profile_mxnet`; the run sizes (:func:`run_sizes`), the cost
helpers (``step_split`` and what follows it) and the drawing helpers (:func:`draw_timeline`,
which draws rows of intervals, and what follows it; matplotlib is imported when they draw)
serve both frameworks::

    from d2l_ext import sync_profile
    syncs = sync_profile.sync_points(events)   # the operators that wait on a CUDA GPU
    costs = sync_profile.step_costs("trace.json")
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence

from d2l_ext import catalogue, trace
from d2l_ext.i18n import Text, label, message
from d2l_ext.utils import Timing

#: Operators whose result's size or value the host needs: each waits on a CUDA or ROCm GPU.
SYNCING_OPS = ("aten::nonzero", "aten::_unique2", "aten::unique_dim",
               "aten::unique_consecutive", "aten::_local_scalar_dense")
#: ``t[indices] = value``
SETITEM = "aten::index_put_"
#: Assignments that may copy a number from the host: also ``t[i] = v`` and ``t[a:b] = v``.
ASSIGNS = (SETITEM, "aten::copy_", "aten::fill_")
#: Operators that make no new data (``detach_`` also shows under its autograd name).
VIEWS = ("aten::slice", "aten::select", "aten::as_strided", "aten::alias", "aten::view",
         "aten::unsqueeze", "aten::expand", "aten::detach", "aten::detach_", "detach",
         "detach_")
#: The host's runtime calls that wait for the device (ROCm's too).
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
              "cudaMemcpy", "hipStreamSynchronize", "hipDeviceSynchronize",
              "hipEventSynchronize", "hipMemcpy", "hipMemcpyWithStream")
#: The runtime calls that wait, with the copies that may wait.
WAITING_CALLS = SYNC_CALLS + ("cudaMemcpyAsync", "hipMemcpyAsync")
#: The trace's categories of runtime calls.
RUNTIME = ("cuda_runtime", "cuda_driver")
#: The trace's categories of the device's work.
DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
#: The phases of a step that :func:`train_step` labels.
PHASES = ("forward", "loss", "backward", "update")
#: The colours that shade a step's span B, and a GPU's idle gap after a synchronisation.
SPAN_B_COLOR, IDLE_COLOR = "#f2c94c", "#eb5757"


@dataclasses.dataclass(frozen=True)
class RunSizes:
    """The sizes of one run of the chapter's pages: ``batch_size`` images of ``size`` ×
    ``size`` pixels, ``num_steps`` timed steps, ``active`` profiled steps per profile, and
    ``rounds`` of timings."""

    batch_size: int
    size: int
    num_steps: int
    active: int
    rounds: int


def run_sizes(on_accelerator: bool, smoke: bool = False) -> RunSizes:
    """The sizes of both pages' runs: on a GPU (any accelerator) a batch of 32 images of
    256×256 and 50 timed steps; on a CPU 2 images of 32×32 and 20 steps, a size at which the
    host's share of a step is not negligible; a tiny run for the tests if ``smoke``."""
    if smoke:
        return RunSizes(batch_size=1, size=8, num_steps=1, active=1, rounds=2)
    if on_accelerator:
        return RunSizes(batch_size=32, size=256, num_steps=50, active=5, rounds=5)
    return RunSizes(batch_size=2, size=32, num_steps=20, active=5, rounds=5)


# --- the trace rules (PyTorch traces) ---------------------------------------------------------

def profiled_steps(events: Iterable[trace.Event]) -> list[trace.Event]:
    """The steps the profiler kept (host side), in order."""
    return [e for e in events
            if e.name.startswith("ProfilerStep#") and e.category == "user_annotation"]


def within(e: trace.Event, outer: trace.Event) -> bool:
    """Whether the event ``e`` ran inside the event ``outer``, on the same thread."""
    return e.track == outer.track and outer.start_us <= e.start_us and e.end_us <= outer.end_us


def assigns_number(e: trace.Event, events: Sequence[trace.Event]) -> bool:
    """Whether the assignment ``e`` (one of :data:`ASSIGNS`) assigns a number held in a fresh
    host tensor: the host operator that ended last before it, views of the target
    (:data:`VIEWS`) passed over, is the ``aten::lift_fresh`` that made that tensor (from a
    Python number, or ``torch.tensor(...)``)."""
    before = sorted((f for f in events if f.category == "cpu_op" and f.track == e.track
                     and f.end_us <= e.start_us), key=lambda f: f.end_us)
    while before and before[-1].name in VIEWS:
        before.pop()
    return bool(before) and before[-1].name == "aten::lift_fresh"


def outermost(e: trace.Event, events: Iterable[trace.Event]) -> bool:
    """Whether no other host operator among ``events`` runs around ``e``."""
    return not any(f is not e and f.category == "cpu_op" and within(e, f) for f in events)


def sync_points(events: Sequence[trace.Event]) -> list[trace.Event]:
    """The operators among ``events`` (sorted by start) that wait for the device on a CUDA or
    ROCm GPU, by their names, outermost only: those of :data:`SYNCING_OPS`, and an assignment
    of a number held in a fresh host tensor, which copies it to the device (an ``index_put_``
    through integer indices, or a ``copy_`` of its own into one element, ``t[i] = v``), unless
    it became a ``masked_fill_`` (one boolean mask) or a ``fill_`` (a slice or a row,
    ``t[a:b] = v``): those read the number on the host, and nothing inside them waits.
    An assignment of a host tensor made earlier, with other operators in between, is not
    recognised, although on a GPU it copies and waits the same way."""
    found: list[trace.Event] = []
    filled: list[trace.Event] = []
    for e in events:
        if any(within(e, f) for f in found + filled):
            continue
        if e.name in SYNCING_OPS:
            found.append(e)
        elif (e.name in ASSIGNS and (e.name != "aten::copy_" or outermost(e, events))
              and assigns_number(e, events)):
            reads = e.name == "aten::fill_" or any(
                f.name == "aten::masked_fill_" and within(f, e) for f in events)
            (filled if reads else found).append(e)
    return found


# --- the costs of a step (both frameworks) ----------------------------------------------------

def step_split(steps: Sequence[trace.Event], syncs: Sequence[trace.Event],
               waits: Sequence[trace.Event], device_work: Sequence[trace.Event],
               end_us: float) -> dict[str, list[float]]:
    """Costs of the host's steps ``steps``, in ms, one value per step: the host's waits (time
    in ``waits``) and its busy time; B's length, from the end of the step's first
    synchronisation in ``syncs`` to the end of its last, and the host's and the device's busy
    time in B. Then two means per step, from the first step's start to ``end_us``: the
    device's busy time and the length of a profiled step."""
    if not steps:
        raise ValueError("no steps to split: the trace holds no profiled step")
    costs = collections.defaultdict(list)
    for s in steps:
        waited = trace.busy_time(waits, s.start_us, s.end_us)
        inside = [e for e in syncs if s.start_us <= e.start_us < s.end_us]
        b0 = inside[0].end_us if inside else s.start_us
        b1 = max((e.end_us for e in inside), default=b0)
        for key, us in (("waits", waited), ("host", s.duration_us - waited), ("B", b1 - b0),
                        ("host_B", b1 - b0 - trace.busy_time(waits, b0, b1)),
                        ("device_B", trace.busy_time(device_work, b0, b1))):
            costs[key].append(us / 1000)
    first_us = steps[0].start_us
    costs["device"] = [trace.busy_time(device_work, first_us, end_us) / len(steps) / 1000]
    costs["profiled"] = [(end_us - first_us) / len(steps) / 1000]
    return dict(costs)


def in_order(names: Iterable[str], code: bool = False) -> Text | str:
    """'a, b ×3': the names in order, repeats run together, in the reader's language; '–'
    for none. ``code=True`` puts each name in code font for running text: '`a`, `b` ×3'."""
    runs = [(f"`{name}`" if code else name, len(list(group)))
            for name, group in itertools.groupby(names)]
    parts = [name if n == 1 else f"{name} ×{n}" for name, n in runs]
    return catalogue.listing(parts) if parts else "–"


def mean(values: Iterable[float]) -> float:
    """The mean of ``values`` (per-step costs)."""
    return statistics.fmean(values)


def median(values: Iterable[float]) -> float:
    """The median of ``values`` (one per profile, or per step)."""
    return statistics.median(values)


def calm_profiles(profiles: Sequence[dict]) -> list[dict]:
    """The profiles of one version that were not disturbed: those whose profiled step took at
    most :attr:`Timing.DISTURBED` (25%) longer than in the version's fastest profile."""
    if not profiles:
        raise ValueError("no profiles to choose from")
    fastest = min(c["profiled"][0] for c in profiles)
    return [c for c in profiles if c["profiled"][0] <= fastest * (1 + Timing.DISTURBED)]


def merged(profiles: Sequence[dict]) -> dict:
    """One version's costs from several profiles of it: each per-step list joined over all
    its profiled steps; ``device`` and ``profiled``, one value per profile, joined the same
    way (read with :func:`median`); a count as its median; the order (``order``, and
    ``order_code`` for running text) as the first profile saw it."""
    return {key: [v for c in profiles for v in c[key]] if isinstance(value, list)
            else value if key.startswith("order")
            else statistics.median(c[key] for c in profiles)
            for key, value in profiles[0].items()}


def turns(names: Sequence[str]) -> list[str]:
    """Each name three times, in turns: in order, in reverse order, in order again."""
    return [*names, *reversed(names), *names]


def in_turns(names: Sequence[str], run: Callable[[str, int], object],
             done: dict[str, list] | None = None) -> dict[str, list]:
    """``run(name, k)`` for the k-th profile of each name, the names taking :func:`turns`;
    ``done`` holds profiles already made (the first turns, in order). The results by name."""
    results = {name: list(found) for name, found in (done or {}).items()}
    skip = sum(len(found) for found in results.values())
    for name in turns(names)[skip:]:
        results.setdefault(name, []).append(run(name, len(results.get(name, []))))
    return results


def calm_costs(profiles: dict[str, list[dict]]) -> tuple[dict[str, list[dict]], dict[str, dict]]:
    """The undisturbed profiles of each version (:func:`calm_profiles`), and each version's
    costs merged over them (:func:`merged`)."""
    calm = {name: calm_profiles(found) for name, found in profiles.items()}
    return calm, {name: merged(calm[name]) for name in profiles}


def kept_value(kept, label: str | Text) -> float | int | str | None:
    """The value of the figure labelled ``label`` (its English: a
    :class:`~d2l_ext.i18n.Text` is read by its ``en``) in the GPU record ``kept``
    (:func:`d2l_ext.gpu_runs.load`); None where there is no record or it keeps no such
    figure."""
    if kept is None:
        return None
    try:
        return kept.value(getattr(label, "en", label))
    except KeyError:
        return None


def kept_run(kept) -> Text:
    """The book's GPU run ``kept`` (:func:`d2l_ext.gpu_runs.load`) named in running text:
    its machine, framework and date, and whether an earlier version of the code measured it."""
    run = kept.run
    gpus, gpu = run.get("gpus"), run.get("gpu")
    machine_en = f"{gpus} × {gpu}" if gpus and gpu else run["machine"]
    machine_zh = f"{gpus} 块 {gpu}" if gpus and gpu else run["machine"]
    older = kept.from_this_code() is False
    earlier_en = ", an earlier version of this code" if older else ""
    earlier_zh = "，所用的是本章代码的较早版本" if older else ""
    return message(
        en=f"the book's GPU run ({machine_en}, {run['framework']}, {run['date']}{earlier_en})",
        zh=f"本书在 GPU 上的运行（{machine_zh}，{run['framework']}，{run['date']}{earlier_zh}）")


# --- drawing timelines (both frameworks) ------------------------------------------------------

def _drawn(name: str) -> str:
    """A row's name as a figure draws it: a :class:`~d2l_ext.i18n.Text` in the reader's
    language where matplotlib can draw it (:func:`d2l_ext.i18n.label`), else as it is."""
    return label(en=name.en, zh=name.zh) if isinstance(name, Text) else str(name)


def draw_timeline(events: Iterable[trace.Event], ax, rows: Mapping[str, str],
                  start_us: float, end_us: float,
                  text: Callable[[trace.Event], str] | None = None,
                  spans: Iterable[tuple[float, float]] = (), color: str = SPAN_B_COLOR,
                  alpha: float = 0.35, title: str | None = None, fontsize: float = 10):
    """Draw ``events`` as bars on one row per key of ``rows`` (each event's ``track`` is the
    key of its row; ``rows`` maps it to the row's name, drawn in the reader's language), from
    ``start_us`` to ``end_us`` (:func:`d2l_ext.trace.plot_timeline`); ``text(event)`` (the
    event with its key as track) writes a bar's text. Each span ``(start_us, end_us)`` of
    ``spans`` is shaded in ``color``; ``title`` goes above. The axes."""
    names = {key: _drawn(name) for key, name in rows.items()}
    events = [e for e in events if e.track in names]
    shown = [dataclasses.replace(e, track=names[e.track]) for e in events]
    keyed = {id(s): e for s, e in zip(shown, events)}
    trace.plot_timeline(shown, ax=ax, tracks=list(names.values()), start_us=start_us,
                        end_us=end_us,
                        text=None if text is None else lambda s: text(keyed.get(id(s), s)))
    for begin, end in spans:
        ax.axvspan((begin - start_us) / 1000, (end - start_us) / 1000, color=color,
                   alpha=alpha, zorder=0)
    if title is not None:
        ax.set_title(title, fontsize=fontsize)
    return ax


def step_row(event: dict) -> str | None:
    """The row of a raw event of a PyTorch trace on a step's timeline: ``"phases"`` (a phase
    that :func:`train_step` labels), ``"waits"`` (a runtime call that waits or copies) or
    ``"device"`` (a kernel or copy); None: left out. (The syncing operators, ``"syncs"``, are
    found by :func:`sync_points`.)"""
    category, name = event.get("cat"), event.get("name", "")
    if category == "user_annotation" and name in PHASES:
        return "phases"
    if category in RUNTIME and name in WAITING_CALLS:
        return "waits"
    if category in DEVICE_WORK:
        return "device"
    return None


def launched_in(path: str, start_us: float, end_us: float) -> set[tuple[str, float]]:
    """The device work launched by host calls from ``start_us`` to ``end_us`` in the trace at
    ``path``, as (name, start) pairs: :mod:`d2l_ext.gputrace` links each kernel and copy to
    the call that launched it."""
    from d2l_ext import gputrace

    links = gputrace.launches(gputrace.read(path), start_us=start_us, end_us=end_us)
    return {(link.work.name, link.work.start_us) for link in links}


def draw_last_step(path: str, ax, rows: Mapping[str, str],
                   text: Callable[[trace.Event], str] | None = None,
                   title: str | None = None) -> list[str]:
    """Draw the last profiled step of the PyTorch trace at ``path`` on ``ax``, with the device
    work it launched (to its end), its span B shaded (from the end of its first
    synchronisation to the end of its last), on the rows ``rows`` (keys ``"phases"``,
    ``"syncs"``, ``"waits"``, ``"device"``: their names), as :func:`draw_timeline` does; the
    keys of the rows left empty."""
    raw = trace.load_trace(path)
    last = profiled_steps(raw)[-1]
    syncs = sync_points([e for e in raw if last.start_us <= e.start_us < last.end_us])
    own = launched_in(path, last.start_us, last.end_us)
    events = [e for e in trace.load_trace(path, track=step_row)
              if e.track != "device" or (e.name, e.start_us) in own]
    events += [trace.Event(e.name, "syncs", e.start_us, e.duration_us, e.category)
               for e in syncs]
    end_us = max([last.end_us] + [e.end_us for e in events if e.track == "device"])
    spans = [(syncs[0].end_us, syncs[-1].end_us)] if len(syncs) > 1 else []
    draw_timeline(events, ax, rows, last.start_us, end_us, text, spans, title=title)
    return [key for key in rows
            if not any(e.track == key and e.end_us > last.start_us and e.start_us < end_us
                       for e in events)]


def gpu_trace_row(e) -> str | None:
    """The row of an event of a shipped GPU trace (:func:`d2l_ext.gputrace.load`):
    ``"waits"`` (a host's runtime call that waits or copies), ``"calls"`` (its other runtime
    calls) or ``"device"`` (the GPU's kernels and copies); None: left out."""
    from d2l_ext import gputrace

    if e.kind == "runtime" and not e.on_device:
        return "waits" if e.name in gputrace.SYNC_CALLS + gputrace.COPY_CALLS else "calls"
    if e.kind in gputrace.WORK_KINDS:
        return "device"
    return None


def innermost_op(call, events: Iterable, width: int = 26) -> str:
    """The name of the innermost host operator (else annotation) of a GPU trace's ``events``
    around the host call ``call``, cut to its last ``width`` characters; "–" for none."""
    around = [e for e in events if e.kind in ("op", "annotation") and not e.on_device
              and e.start_us <= call.start_us and call.end_us <= e.end_us]
    ops = [e for e in around if e.kind == "op"] or around
    if not ops:
        return "–"
    name = min(ops, key=lambda e: e.duration_us).name
    return name if len(name) <= width else "…" + name[-(width - 1):]


def draw_gpu_syncs(events: Sequence, syncs: Sequence, ax, rows: Mapping[str, str],
                   kernel: str = "kernel", title: str | None = None):
    """Draw the synchronisations ``syncs`` (:func:`d2l_ext.gputrace.syncs`) of a GPU trace's
    ``events`` on ``ax``, on the rows ``rows`` (keys of :func:`gpu_trace_row`: their names),
    the GPU's idle gap after each shaded in red; a kernel's bar says ``kernel``, a copy its
    kind, a call its name. The axes."""
    from d2l_ext import gputrace

    if not syncs:
        raise ValueError("no synchronisations to draw")
    t1 = 20 + max(s.call.end_us if s.idle_end_us is None else s.idle_end_us for s in syncs)
    t0 = syncs[0].call.start_us - 0.3 * (t1 - syncs[0].call.start_us)
    on_rows = [trace.Event(e.name, gpu_trace_row(e), e.start_us, e.duration_us, e.category)
               for e in events if gpu_trace_row(e)]
    gaps = [(s.call.end_us, min(s.idle_end_us, t1)) for s in syncs
            if s.idle_end_us is not None and s.idle_end_us > s.call.end_us]

    def bar_text(e: trace.Event) -> str:
        if gputrace.classify(e.category) == "kernel":
            return kernel
        return e.name.split(" (")[0]

    return draw_timeline(on_rows, ax, rows, t0, t1, bar_text, gaps, color=IDLE_COLOR,
                         alpha=0.25, title=title, fontsize=8)


def draw_step_times(timings: Mapping, xlabel: str, ax=None):
    """A bar per timing of ``timings`` (name: :class:`~d2l_ext.utils.Timing` of seconds per
    step), its median in milliseconds, with the range of its timings, the first name on top;
    ``xlabel`` under the axis. The axes (on a new figure if ``ax`` is None)."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 0.4 * len(timings) + 1))
    names = list(timings)[::-1]
    medians = [timings[n].median * 1e3 for n in names]
    ax.barh(names, medians, color="#0a7d91",
            xerr=[[m - timings[n].min * 1e3 for n, m in zip(names, medians)],
                  [timings[n].max * 1e3 - m for n, m in zip(names, medians)]])
    ax.set_xlabel(xlabel)
    return ax


# --- profiling with PyTorch -------------------------------------------------------------------

def train_step(net, optimizer, loss_fn: Callable, X, y):
    """One SGD step of ``net`` on ``(X, y)`` with ``loss_fn``, its phases labelled for the
    profiler (:data:`PHASES`); the loss."""
    from torch.profiler import record_function

    with record_function("forward"):
        pred = net(X)
    with record_function("loss"):
        loss = loss_fn(pred, y)
    with record_function("backward"):
        optimizer.zero_grad()
        loss.backward()
    with record_function("update"):
        optimizer.step()
    return loss


def activities_for(device) -> list:
    """The profiler's activities for ``device``: the host, and the device's own where the
    profiler knows it (CUDA, XPU, ...)."""
    from torch.profiler import ProfilerActivity

    found = [ProfilerActivity.CPU]
    if device.type != "cpu" and hasattr(ProfilerActivity, device.type.upper()):
        found.append(getattr(ProfilerActivity, device.type.upper()))
    return found


def profile_steps(step: Callable[[], object], path: str, activities: list, active: int = 5,
                  device=None):
    """Profile 1 + 1 + ``active`` calls of ``step()`` (wait, warm-up, active); write the trace
    to ``path``; the profiler. The queue is drained at the end of the warm-up step, so that
    none of its work runs in the active steps."""
    from torch.profiler import profile, schedule

    from d2l_ext.torch import synchronize

    if active < 1:
        raise ValueError(f"active={active}: profile at least one step")
    with profile(activities=activities,
                 schedule=schedule(wait=1, warmup=1, active=active, repeat=1)) as prof:
        for i in range(2 + active):
            step()
            if i == 1:
                synchronize(device)
            prof.step()
    prof.export_chrome_trace(path)
    return prof


def step_costs(path: str) -> dict:
    """The syncing operators of the profiled steps of the trace at ``path`` and their costs
    (:func:`step_split`): ``syncs`` per step, their ``order`` in the first step, the host's
    synchronising runtime calls (``sync_calls``) and the device's kernels and copies
    (``launches``) per step."""
    events = trace.load_trace(path)
    steps = profiled_steps(events)
    if not steps:
        raise ValueError(f"{path} holds no profiled step (ProfilerStep#)")
    syncs = sync_points([e for e in events if any(s.start_us <= e.start_us < s.end_us
                                                  for s in steps)])
    waits = [e for e in events if e.category in RUNTIME and e.name in WAITING_CALLS]
    device_work = [e for e in events if e.category in DEVICE_WORK]
    end_us = max([steps[-1].end_us] + [e.end_us for e in device_work])
    first = [e.name.removeprefix("aten::") for e in syncs
             if steps[0].start_us <= e.start_us < steps[0].end_us]
    sync_calls = [e for e in waits if e.name in SYNC_CALLS
                  and any(s.start_us <= e.start_us < s.end_us for s in steps)]
    return {"syncs": len(syncs) / len(steps), "order": in_order(first),
            "order_code": in_order(first, code=True),
            "sync_calls": len(sync_calls) / len(steps),
            "launches": len(device_work) / len(steps),
            **step_split(steps, syncs, waits, device_work, end_us)}


def profile_losses(losses: dict[str, Callable], step: Callable, activities: list,
                   active: int = 5, device=None, prefix: str = "trace",
                   done: dict[str, list] | None = None) -> dict[str, list[str]]:
    """Profile each loss of ``losses`` (name: function) three times, in turns
    (:func:`in_turns`), ``step(loss_fn)`` being one training step; the paths of the traces by
    name, ``f"{prefix}_{name}_{k}.json"``. ``done`` holds traces already made."""
    def run(name: str, k: int) -> str:
        path = f"{prefix}_{name}_{k}.json"
        profile_steps(functools.partial(step, losses[name]), path, activities, active, device)
        return path

    return in_turns(list(losses), run, done)
