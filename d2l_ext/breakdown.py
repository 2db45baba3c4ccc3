"""Where a training step's time goes, by kind of operator.

One classifier reads the operator names of PyTorch (``aten::mkldnn_convolution``,
``aten::native_batch_norm_backward``, ...), of MXNet (``_backward_Convolution``,
``BatchNorm``, ``multi_sgd_update``, ...) and of the ops in a GPU trace, and sorts them into
four kinds, the three of the cost model and the rest:

* ``"matmul"``: convolutions and matrix products, the arithmetic that can be compute-bound;
* ``"elementwise"``: normalisation, activations, additions, pooling: work that moves every
  byte once for a few operations each, and is memory-bound on any device;
* ``"optimizer"``: the update of the weights (element-wise too, but a step of its own);
* ``"other"``: the loss, copies, allocation and whatever else ran inside an operator.

Three readers add up the time of each kind over a few training steps::

    from d2l_ext import breakdown
    result = breakdown.torch_step(lambda: train_step(X, y), device)
    result.share("matmul")

``torch_step`` uses ``torch.profiler`` (the self time of each operator: CPU time on a CPU,
the time of its kernels on a GPU), ``mxnet_step`` MXNet's profiler (aggregate operator
times), and ``trace_step`` a recorded GPU trace read by :mod:`d2l_ext.gputrace` (each kernel
attributed to the operator that launched it).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

#: The kinds, in the order tables list them.
KINDS = ("matmul", "elementwise", "optimizer", "other")

_MATMUL = re.compile(r"conv|gemm|matmul|addmm|(^|[:_])b?mm($|_)|linear|fullyconnected|"
                     r"(^|[:_])dot($|_)", re.IGNORECASE)
_ELEMENTWISE = re.compile(r"batch_?norm|layer_?norm|group_?norm|relu|threshold|clamp|"
                          r"activation|sigmoid|tanh|gelu|(^|[:_])(add|sub|mul|div)|_plus|"
                          r"_minus|elemwise|broadcast|pool|(^|[:_])(mean|sum)($|_)|fill|zero",
                          re.IGNORECASE)
# PyTorch annotates optimizer.step() and zero_grad() as "Optimizer.step#SGD.step";
# MXNet's updates are operators named *_update (sgd_update, multi_sgd_mom_update, ...).
_OPTIMIZER = re.compile(r"^optimizer\.|^[^:]*_update$", re.IGNORECASE)
# The profiler's own mark of a step (its self time is the time between operators).
_STEP_MARK = re.compile(r"ProfilerStep(#\d+|\*)")


def kind_of(name: str) -> str | None:
    """The kind of the operator called ``name``, or None if its name does not say (its
    time then counts for the nearest enclosing operator whose name does). Autograd's
    wrappers (``autograd::engine::evaluate_function: ConvolutionBackward0``) are "other":
    their self time is the engine's work, not the backward function's."""
    name = name.strip()
    if name.startswith("autograd::"):
        return "other"  # autograd's wrapper of a backward function: the engine's own work
    if _OPTIMIZER.search(name):
        return "optimizer"
    if _MATMUL.search(name):
        return "matmul"
    if _ELEMENTWISE.search(name):
        return "elementwise"
    return None


def kind_within(names: Sequence[str]) -> str:
    """The kind of an operator given its name and those enclosing it, innermost first.

    Anything inside the optimizer's step is the optimizer's; otherwise the innermost name
    that says decides (an allocation inside a convolution is the convolution's), and a
    name that none of them explains is "other".
    """
    kinds = [kind_of(name) for name in names]
    if "optimizer" in kinds:
        return "optimizer"
    return next((k for k in kinds if k is not None), "other")


@dataclass(frozen=True)
class Breakdown:
    """Seconds per training step spent in each kind of operator, and the step's wall time.

    ``where`` says whose time it is: "cpu" (operators' self time on the host) or the name
    of a device (its kernels' time). ``by_operator`` keeps the seconds per step of each
    (kind, operator name) for a closer look. ``idle``, where set, is the device's measured
    idle time per step (the time during which none of its work ran).
    """

    seconds: dict[str, float]
    wall: float
    steps: int
    where: str
    by_operator: dict[tuple[str, str], float] = field(default_factory=dict)
    idle: float | None = None

    @property
    def total(self) -> float:
        """The seconds per step inside operators (of every kind)."""
        return sum(self.seconds.values())

    @property
    def outside(self) -> float:
        """Seconds per step outside every operator (never negative): ``idle`` where it was
        measured, else the wall time minus the time inside operators (on a CPU: Python
        between operators and the profiler's own work; on a device: roughly its idle time)."""
        if self.idle is not None:
            return max(self.idle, 0.0)
        return max(self.wall - self.total, 0.0)

    def share(self, kind: str) -> float:
        """The fraction of the time inside operators spent in ``kind``."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        return self.seconds[kind] / self.total if self.total > 0 else 0.0

    def top(self, kind: str, n: int = 3) -> list[tuple[str, float]]:
        """The ``n`` operators of ``kind`` that took the most time, with seconds per step."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        ops = [(name, s) for (k, name), s in self.by_operator.items() if k == kind]
        return sorted(ops, key=lambda item: -item[1])[:n]


def _tally(items: Iterable[tuple[Sequence[str], float]], steps: int, wall: float,
           where: str, idle: float | None = None) -> Breakdown:
    """Sum (names innermost first, seconds) pairs by kind, per step."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, not {steps}")
    seconds = dict.fromkeys(KINDS, 0.0)
    by_operator: dict[tuple[str, str], float] = {}
    for names, s in items:
        if s <= 0:
            continue
        key = (kind_within(names), names[0])
        seconds[key[0]] += s / steps
        by_operator[key] = by_operator.get(key, 0.0) + s / steps
    return Breakdown(seconds, wall / steps, steps, where, by_operator,
                     None if idle is None else idle / steps)


def torch_step(step: Callable[[], object], device, steps: int = 3,
               warmup: int = 1) -> Breakdown:
    """Profile ``steps`` calls of ``step`` on ``device`` with ``torch.profiler`` and sum the
    operators' self time by kind.

    ``warmup`` calls run first without the profiler, then one more under it (the profiler's
    own warm-up: starting CUPTI on a GPU is slow), and then the ``steps`` it records. On a
    CPU each operator's self CPU time counts (its time minus that of the operators it
    called); on a GPU, the time of the kernels it launched, where user annotations such as
    ``Optimizer.step#SGD.step`` count nothing (their kernels are their operators'). The
    queue is drained before the recorded steps and after them, so that the wall time covers
    their work; the clock stops before the last ``prof.step()``, which ends the recording
    (it stops the profiler and, on a GPU, flushes its buffers): a one-off cost that is not
    the steps'.
    """
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, schedule

    from d2l_ext.torch import as_device, synchronize

    device = as_device(device)
    if warmup < 0:
        raise ValueError(f"warmup must be 0 or more, not {warmup}")
    if steps < 1:
        raise ValueError(f"steps must be at least 1, not {steps}")
    for _ in range(warmup):
        step()
    activities = [ProfilerActivity.CPU]
    on_device = device.type != "cpu"
    if on_device:
        activity = getattr(ProfilerActivity, device.type.upper(), None)
        if activity is None:
            raise ValueError(f"torch.profiler cannot record {device.type} kernels")
        activities.append(activity)
    recorded = schedule(wait=0, warmup=1, active=steps, repeat=1)
    with profile(activities=activities, schedule=recorded) as prof:
        step()
        synchronize(device)
        prof.step()
        start = time.perf_counter()
        for i in range(steps):
            step()
            if i == steps - 1:  # the last prof.step() stops the profiler: not the steps' time
                synchronize(device)
                wall = time.perf_counter() - start
            prof.step()

    def names(event) -> list[str]:
        found = []
        while event is not None:
            found.append(event.name)
            event = event.cpu_parent
        return found

    items = []
    for event in prof.events():
        if (event.device_type != DeviceType.CPU or event.is_async
                or _STEP_MARK.fullmatch(event.name)):
            continue
        if on_device:
            us = 0 if event.is_user_annotation else event.self_device_time_total
        else:
            us = event.self_cpu_time_total
        items.append((names(event), us / 1e6))
    return _tally(items, steps, wall, str(device) if on_device else "cpu")


def mxnet_step(step: Callable[[], object], steps: int = 3, warmup: int = 1) -> Breakdown:
    """Profile ``steps`` calls of ``step`` with MXNet's profiler and sum its aggregate
    operator times by kind (the engine's time in each operator, on every device).

    Waits for the engine before and after the profiled steps. The profiler's aggregate table
    is reset before and after, so earlier or later profiling does not mix in.
    """
    import mxnet as mx

    if warmup < 0:
        raise ValueError(f"warmup must be 0 or more, not {warmup}")
    for _ in range(warmup):
        step()
    mx.nd.waitall()
    # Operators only (no memory events), and any file MXNet writes goes to a scratch folder.
    mx.profiler.set_config(profile_symbolic=True, profile_imperative=True, aggregate_stats=True,
                           filename=os.path.join(tempfile.gettempdir(),
                                                 "d2l_mxnet_profile.json"))
    mx.profiler.dumps(reset=True)
    mx.profiler.set_state("run")
    try:
        start = time.perf_counter()
        for _ in range(max(steps, 1)):
            step()
        mx.nd.waitall()
        wall = time.perf_counter() - start
    finally:
        mx.profiler.set_state("stop")
    stats = json.loads(mx.profiler.dumps(reset=True, format="json"))
    unit = {"ms": 1e-3, "us": 1e-6, "s": 1.0}[stats.get("Unit", {}).get("Time", "ms")]
    operators = stats.get("Time", {}).get("operator", {})
    items = [([name], row["Total"] * unit) for name, row in operators.items()]
    return _tally(items, steps, wall, "mxnet")


def trace_step(events, start_us: float, end_us: float) -> Breakdown:
    """The device time of the work launched between ``start_us`` and ``end_us`` of a GPU
    trace (read by :mod:`d2l_ext.gputrace`), by the kind of the operator that launched it.

    A kernel, copy or memset is attributed through its ``external_id`` to the innermost host
    operator with that id, and to the optimizer if its launch call lies within an
    ``Optimizer.`` annotation. ``wall`` is the window's length and ``idle`` the time within
    it during which no work ran on the device (whoever launched it), so that it agrees with
    :func:`d2l_ext.gputrace.steps`; the kinds count the work launched in the window, which
    may run a little past it.
    """
    from d2l_ext import gputrace
    from d2l_ext.trace import busy_time

    ops: dict[int, list] = {}
    for e in events:
        if not e.on_device and e.kind == "op" and e.external_id is not None:
            ops.setdefault(e.external_id, []).append(e)
    optimizer = [(e.start_us, e.end_us) for e in gputrace.host(events)
                 if e.name.startswith("Optimizer.")]
    items = []
    for link in gputrace.launches(events, start_us=start_us, end_us=end_us):
        found = sorted(ops.get(link.work.external_id, []), key=lambda e: e.duration_us)
        names = [e.name for e in found] or [link.work.name]
        t = link.call.start_us
        if any(a <= t < b for a, b in optimizer):
            names.append("Optimizer.step")
        items.append((names, link.work.duration_us / 1e6))
    busy = busy_time(gputrace.work(events), start_us, end_us)
    return _tally(items, 1, (end_us - start_us) / 1e6, "trace",
                  idle=(end_us - start_us - busy) / 1e6)
