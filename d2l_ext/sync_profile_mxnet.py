"""The host-device-sync chapter's toy problem and profiling helpers in MXNet, shared by the
chapter's page and its section page host-device-sync-measuring.

MXNet's engine queues operators on a CPU too; its Python thread waits in operators whose
result's shape depends on the data (``np.unique``, boolean indexing, ``np.nonzero``) and in
copies to the host. The three losses compute the same masked cross-entropy (pixels labelled
``IGNORE`` and those of the background class ignored, the loss zeroed when fewer than two
labels remain) and wait 3, 2 and 0 times per step. The trace helpers put each event of
``mx.profiler``'s trace on one of the rows of :data:`ROWS` (by key) and count the waits::

    events = sync_profile_mxnet.load_events("trace_mxnet.json")
    costs = sync_profile_mxnet.step_costs(events, "original")
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Mapping, Sequence

import mxnet as mx
from mxnet import autograd, gluon, init, np, npx

from d2l_ext import sync_profile, trace

IGNORE, NUM_CLASSES = -1, 10
BACKGROUND = NUM_CLASSES - 1
#: Operators with a data-dependent shape: the Python thread waits until they have run.
BLOCKING_OPS = ("_npi_unique", "_contrib_boolean_mask", "_npx_nonzero")
#: C API calls that wait by name.
WAITING_CALLS = ("MXNDArrayWaitAll", "MXNDArrayWaitToRead", "MXNDArraySyncCopyToCPU")
#: The rows of a step's timeline, by key: the Python thread's steps, its calls into MXNet,
#: its waits, the engine's operators, and those with a data-dependent shape.
ROWS = ("steps", "calls", "waits", "ops", "shapes")


# --- the toy problem --------------------------------------------------------------------------

def make_net(device, num_hidden: int = 10, width: int = 10,
             num_classes: int = NUM_CLASSES) -> gluon.nn.HybridSequential:
    """An input convolution, ``num_hidden`` 3×3 convolutions with ReLU, an output convolution,
    initialised on ``device``."""
    npx.set_np()
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Conv2D(width, 3, padding=1, activation="relu"))
    for _ in range(num_hidden):
        net.add(gluon.nn.Conv2D(width, 3, padding=1, activation="relu"))
    net.add(gluon.nn.Conv2D(num_classes, 3, padding=1))
    net.initialize(init.Xavier(), ctx=device)
    return net


def random_batch(batch_size: int, size: int, device) -> tuple:
    """Random images ``(b, 3, size, size)`` and labels from −1 to ``NUM_CLASSES - 1``, drawn
    from MXNet's current seed."""
    npx.set_np()
    X = np.random.normal(size=(batch_size, 3, size, size), ctx=device)
    y = np.random.randint(-1, NUM_CLASSES, size=(batch_size, size, size), ctx=device)
    return X, y


def count_labels(target):
    """The number of distinct values in ``target``, as an array on its device."""
    labels = np.sort(target.reshape(-1))
    return (labels[1:] != labels[:-1]).sum() + 1


def _masked(pred, target):
    """The cross-entropy of the pixels whose label is not IGNORE, picked out with boolean
    masks (two waits)."""
    mask = (target != IGNORE).reshape(-1)
    scores = pred.transpose(0, 2, 3, 1).reshape(-1, NUM_CLASSES)[mask]
    labels = target.reshape(-1)[mask]
    return -npx.pick(npx.log_softmax(scores, axis=-1), labels, axis=-1).mean()


def loss_original(pred, target):
    """The obvious version: ``np.unique`` and two boolean masks, three waits per step."""
    target = np.where(target == BACKGROUND, IGNORE, target)
    num_labels = len(np.unique(target))
    loss = _masked(pred, target)
    return 0.0 * loss if num_labels < 2 else loss


def loss_sort(pred, target):
    """Labels counted with a sort instead of ``np.unique``: two waits per step."""
    target = np.where(target == BACKGROUND, IGNORE, target)
    num_labels = count_labels(target)
    loss = _masked(pred, target)
    return np.where(num_labels < 2, 0.0 * loss, loss)


def loss_no_blocking(pred, target):
    """Weights instead of boolean masks: no wait."""
    target = np.where(target == BACKGROUND, IGNORE, target)
    num_labels = count_labels(target)
    weight = target != IGNORE
    log_p = npx.pick(npx.log_softmax(pred, axis=1), np.maximum(target, 0), axis=1)
    loss = -(log_p * weight).sum() / weight.sum()
    return np.where(num_labels < 2, 0.0 * loss, loss)


#: The versions of the loss, in the order of the fixes.
LOSSES = {"original": loss_original, "sort": loss_sort, "no_blocking": loss_no_blocking}


def train_step(net, trainer, loss_fn: Callable, X, y):
    """One step of ``trainer`` on ``(X, y)`` with ``loss_fn``; the loss."""
    with autograd.record():
        loss = loss_fn(net(X), y)
    loss.backward()
    trainer.step(1)
    return loss


# --- profiling --------------------------------------------------------------------------------

def profile_steps(step: Callable[[], object], name: str, active: int, domain) -> None:
    """Run ``step()`` once, then record ``active`` steps, each marked as a profiler task
    ``f"{name} step {i}"`` of ``domain``; write the trace recorded so far (the file stays
    open for the next recording: configure ``mx.profiler`` once, before the first call)."""
    if active < 1:
        raise ValueError(f"active={active}: record at least one step")
    step()
    npx.waitall()
    mx.profiler.set_state("run")
    for i in range(active):
        task = mx.profiler.Task(domain, f"{name} step {i}")
        task.start()
        step()
        task.stop()
    npx.waitall()
    mx.profiler.set_state("stop")
    mx.profiler.dump(finished=False)


def profile_losses(losses: dict[str, Callable], step: Callable, active: int, domain,
                   done: dict[str, list] | None = None) -> dict[str, list[str]]:
    """Record each loss of ``losses`` (name: function) three times, in turns
    (:func:`d2l_ext.sync_profile.in_turns`), ``step(loss_fn)`` being one training step; the
    labels of the recordings by name (``name``, then ``"name #2"``, ...). ``done`` holds
    recordings already made."""
    def run(name: str, k: int) -> str:
        label = name if k == 0 else f"{name} #{k + 1}"
        profile_steps(functools.partial(step, losses[name]), label, active, domain)
        return label

    return sync_profile.in_turns(list(losses), run, done)


def row(event: dict) -> str | None:
    """The row (a key of :data:`ROWS`) of a raw trace event; None: left out."""
    category, name, phase = event.get("cat"), event.get("name", ""), event.get("ph")
    if category == "steps":
        return "steps"
    if category == "MXNET_C_API":
        return "waits" if name in WAITING_CALLS else "calls"
    if category == "operator" and phase == "B":  # "b": MXNet's second copy of each operator
        return "shapes" if name in BLOCKING_OPS or name == "WaitForVar" else "ops"
    return None


def load_events(path: str | os.PathLike = "trace_mxnet.json") -> list[trace.Event]:
    """The trace's events on the rows of :data:`ROWS`. A call into MXNet that returned only
    after an operator with a data-dependent shape had run inside it waited for that operator:
    it moves to the row of waits, under the operator's name."""
    events = trace.load_trace(path, track=row)
    blocking = [e for e in events if e.track == "shapes" and e.name in BLOCKING_OPS]
    for i, e in enumerate(events):
        if e.track == "calls" and e.name == "MXImperativeInvokeEx":
            op = next((b for b in blocking
                       if e.start_us <= b.start_us and b.end_us <= e.end_us), None)
            if op is not None:
                events[i] = dataclasses.replace(e, name=op.name, track="waits")
    return events


def recorded_steps(events: Sequence[trace.Event], name: str) -> list[trace.Event]:
    """The recorded steps (profiler tasks) of the loss ``name``, in order."""
    return [e for e in events if e.track == "steps" and e.name.rpartition(" step ")[0] == name]


def window(events: Sequence[trace.Event], name: str) -> tuple[float, float]:
    """Start and end of the recording of the loss ``name``: from its first step to the end of
    the last event before the next recording."""
    steps = recorded_steps(events, name)
    if not steps:
        raise ValueError(f"no recorded step of {name!r} in the trace")
    later = min((e.start_us for e in events if e.track == "steps"
                 and e.start_us > steps[-1].start_us and e not in steps), default=float("inf"))
    return steps[0].start_us, max(e.end_us for e in events
                                  if steps[0].start_us <= e.start_us < later)


def waits_in(events: Sequence[trace.Event], steps: Sequence[trace.Event]) -> list[trace.Event]:
    """The waits inside the steps ``steps``, in order."""
    return [e for e in events if e.track == "waits"
            and any(s.start_us <= e.start_us < s.end_us for s in steps)]


def step_costs(events: Sequence[trace.Event], name: str) -> dict:
    """The waits of the recorded steps of the loss ``name`` (``syncs`` per step, their
    ``order`` in the first step), the engine's operators per step (``launches``), and their
    costs (:func:`d2l_ext.sync_profile.step_split`)."""
    begin, end = window(events, name)
    steps = recorded_steps(events, name)
    waits = waits_in(events, steps)
    engine = [e for e in events if e.track in ("ops", "shapes")
              and e.name != "WaitForVar" and begin <= e.start_us < end]
    first = [e.name for e in waits_in(events, steps[:1])]
    return {"syncs": len(waits) / len(steps), "order": sync_profile.in_order(first),
            "order_code": sync_profile.in_order(first, code=True),
            "launches": len(engine) / len(steps),
            **sync_profile.step_split(steps, waits, waits, engine, end)}


def draw_steps(events: Sequence[trace.Event], name: str, ax, rows: Mapping[str, str],
               text: Callable[[trace.Event], str] | None = None,
               title: str | None = None) -> list[str]:
    """Draw the recorded steps of the loss ``name`` (:func:`load_events`) on ``ax``, the span B
    of each step shaded (from the end of its first wait to the end of its last), on the rows
    ``rows`` (the keys of :data:`ROWS`: their names), as
    :func:`d2l_ext.sync_profile.draw_timeline` does; the keys of the rows left empty within
    the steps."""
    begin, end = window(events, name)
    steps = recorded_steps(events, name)
    spans = []
    for step in steps:
        waits = waits_in(events, [step])
        if len(waits) > 1:
            spans.append((waits[0].end_us, waits[-1].end_us))
    sync_profile.draw_timeline(events, ax, rows, begin, end, text, spans, title=title)
    return [key for key in rows
            if not any(e.track == key and any(s.start_us <= e.start_us < s.end_us
                                               for s in steps) for e in events)]
