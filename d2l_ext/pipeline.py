"""Pipeline schedules, simulated: which stage runs which micro-batch when, and the bubble.

A model cut into ``p`` *stages*, one per device, trains a batch as ``m`` *micro-batches*. A
stage runs, for each micro-batch, a forward pass ``F`` (after the stage before it) and a
backward pass ``B`` (after the stage after it); zero-bubble schedules split the backward into
``B`` (the gradient of the input, which the stage before waits for) and ``W`` (the gradient of
the weights, which nobody waits for). A *schedule* is, for every stage, the order of its
operations; :func:`simulate` runs those orders as a discrete-event simulation (each operation
starts when its stage is free and its inputs have arrived) and returns the timeline, from
which :func:`bubble` and :func:`in_flight` read the idle share and the activations held.

The schedules: :func:`gpipe` (every forward, then every backward), :func:`one_f_one_b`
(1F1B: a few forwards, then one forward and one backward in turn), :func:`interleaved`
(1F1B over ``v`` model chunks per stage), :func:`zb_h1` (1F1B's order with each ``W``
deferred by the stage's index, Qi et al.'s ZB-H1) and :func:`zero_bubble` (a greedy search
that defers ``W``s into the idle time, optionally without a limit on the memory). The
module imports no framework.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: The kinds of operation: forward, backward (input gradient, or the whole backward when it
#: is not split), weight gradient.
KINDS = ("F", "B", "W")


@dataclass(frozen=True)
class Op:
    """One operation of one stage: its kind, micro-batch and model chunk (0 unless
    interleaved)."""
    kind: str
    micro: int
    chunk: int = 0


@dataclass(frozen=True)
class Interval:
    """An operation as it ran: on which stage, from ``start`` to ``end``."""
    stage: int
    op: Op
    start: float
    end: float


@dataclass(frozen=True)
class Costs:
    """How long one operation of one chunk takes on one stage, and how long an activation or
    a gradient takes to reach the next stage. ``w`` is 0 when the backward is not split."""
    f: float = 1.0
    b: float = 2.0
    w: float = 0.0
    send: float = 0.0

    def of(self, kind: str) -> float:
        return {"F": self.f, "B": self.b, "W": self.w}[kind]


def _check(stages: int, micros: int, chunks: int = 1) -> None:
    if stages < 1 or micros < 1 or chunks < 1:
        raise ValueError(f"stages, micro-batches and chunks must be at least 1, not "
                         f"{stages}, {micros}, {chunks}")


def gpipe(stages: int, micros: int, split: bool = False) -> list[list[Op]]:
    """GPipe: each stage runs every forward, then every backward (in micro-batch order, as
    PyTorch's ``ScheduleGPipe`` does); with ``split``, each backward is followed by its
    weight gradient."""
    _check(stages, micros)
    backward = [[Op("B", i), Op("W", i)] if split else [Op("B", i)] for i in range(micros)]
    return [[Op("F", i) for i in range(micros)] + [op for pair in backward for op in pair]
            for _ in range(stages)]


def one_f_one_b(stages: int, micros: int, split: bool = False) -> list[list[Op]]:
    """1F1B: stage ``s`` first runs ``min(p - s - 1, m)`` forwards, then alternates one
    forward and one backward, then runs the remaining backwards; it never holds more than
    ``p - s`` micro-batches' activations."""
    _check(stages, micros)
    orders = []
    for s in range(stages):
        warm = min(stages - s - 1, micros)
        order = [Op("F", i) for i in range(warm)]
        forward, backward = warm, 0
        while backward < micros:
            if forward < micros:
                order.append(Op("F", forward))
                forward += 1
            order.append(Op("B", backward))
            if split:
                order.append(Op("W", backward))
            backward += 1
        orders.append(order)
    return orders


def zero_bubble(stages: int, micros: int, costs: Costs = Costs(1.0, 1.0, 1.0),
                deferred: int | None = None) -> list[list[Op]]:
    """A schedule in the spirit of Qi et al.'s zero-bubble schedules (2024), found greedily
    for ``costs``: whenever a stage ``s`` is free it runs a ready input gradient ``B`` (the
    stage before it waits for that), else a ready forward if fewer than ``p - s`` of its
    micro-batches await their ``B`` (1F1B's rule), else a pending weight gradient ``W``
    (which nobody waits for, so it fills what would be idle time). At most ``deferred``
    weight gradients wait at a time (None: no limit; 0: each ``W`` right after its ``B``);
    a waiting ``W`` keeps its micro-batch's inputs, which :func:`in_flight` counts. Needs
    ``costs.w > 0``."""
    _check(stages, micros)
    if deferred is not None and deferred < 0:
        raise ValueError(f"deferred is at least 0 (or None), not {deferred}")
    if min(costs.f, costs.b, costs.w) <= 0:
        raise ValueError("a zero-bubble schedule splits the backward: F, B and W must take time")
    done: dict[tuple[int, Op], float] = {}
    clock, orders = [0.0] * stages, [[] for _ in range(stages)]
    forwards, backwards, weights = [0] * stages, [0] * stages, [0] * stages

    def arrived(s: int, op: Op) -> float | None:
        """When ``op`` on stage ``s`` could start for its inputs (None: not yet known)."""
        times = [done.get(n) for n in _needs(s, op, stages, 1)]
        if None in times:
            return None
        return max([t + (costs.send if n[0] != s else 0.0)
                    for t, n in zip(times, _needs(s, op, stages, 1))], default=0.0)

    waiting = [False] * stages  # found nothing to run at its clock since the last operation
    while any(w < micros for w in weights):
        s = min((i for i in range(stages) if weights[i] < micros),
                key=lambda i: (clock[i], waiting[i]))
        t = clock[s]
        candidates = []
        if backwards[s] < forwards[s]:
            candidates.append(Op("B", backwards[s]))
        if forwards[s] < micros and forwards[s] - backwards[s] < stages - s:
            candidates.append(Op("F", forwards[s]))
        ready = [(op, at) for op in candidates if (at := arrived(s, op)) is not None and at <= t]
        overdue = deferred is not None and backwards[s] - weights[s] > deferred
        if ready and not overdue:
            op = ready[0][0]
        elif weights[s] < backwards[s]:
            op = Op("W", weights[s])
        elif not waiting[s]:  # let the other stages at this time move first
            waiting[s] = True
            continue
        else:  # every stage at this time waits: move to the next time anything can happen
            later = [at for op in candidates if (at := arrived(s, op)) is not None and at > t]
            later += [clock[i] for i in range(stages) if weights[i] < micros and clock[i] > t]
            if not later:
                raise ValueError("the greedy zero-bubble schedule deadlocked")
            clock[s], waiting[s] = min(later), False
            continue
        end = t + costs.of(op.kind)
        done[(s, op)] = clock[s] = end
        orders[s].append(op)
        waiting = [False] * stages
        counter = {"F": forwards, "B": backwards, "W": weights}[op.kind]
        counter[s] += 1
    return orders


def zb_h1(stages: int, micros: int) -> list[list[Op]]:
    """ZB-H1 (Qi et al., 2024): 1F1B's order with each backward split into ``B`` and ``W``,
    stage ``s`` running each ``W`` ``s`` backward passes late (the rest at the end). The
    deferred ``W``s fill the last stages' idle time, and every stage keeps at most ``p``
    micro-batches, 1F1B's peak: with F = B = W, a third of 1F1B's bubble."""
    _check(stages, micros)
    orders = []
    for s in range(stages):
        warm = min(stages - s - 1, micros)
        order = [Op("F", i) for i in range(warm)]
        forward, backward, weight = warm, 0, 0
        while backward < micros:
            if forward < micros:
                order.append(Op("F", forward))
                forward += 1
            order.append(Op("B", backward))
            backward += 1
            if backward - 1 - s >= 0:
                order.append(Op("W", weight))
                weight += 1
        order += [Op("W", i) for i in range(weight, micros)]
        orders.append(order)
    return orders


def interleaved(stages: int, micros: int, chunks: int) -> list[list[Op]]:
    """Interleaved 1F1B (Narayanan et al., 2021): stage ``s`` holds ``chunks`` model chunks,
    chunk ``c`` being virtual stage ``c·p + s``; micro-batches go through the chunks in
    groups of ``p``. Needs ``m`` to be a multiple of ``p``."""
    _check(stages, micros, chunks)
    if micros % stages:
        raise ValueError(f"interleaving needs the micro-batches ({micros}) to be a multiple "
                         f"of the stages ({stages})")
    total = micros * chunks

    def forward(k: int) -> Op:
        group, within = divmod(k, stages * chunks)
        return Op("F", group * stages + within % stages, within // stages)

    def backward(k: int) -> Op:
        group, within = divmod(k, stages * chunks)
        return Op("B", group * stages + within % stages, chunks - 1 - within // stages)

    orders = []
    for s in range(stages):
        warm = min((stages - s - 1) * 2 + (chunks - 1) * stages, total)
        order = [forward(k) for k in range(warm)]
        f, b = warm, 0
        while b < total:
            if f < total:
                order.append(forward(f))
                f += 1
            order.append(backward(b))
            b += 1
        orders.append(order)
    return orders


def _needs(stage: int, op: Op, stages: int, chunks: int) -> list[tuple[int, Op]]:
    """The operations (stage, op) whose results ``op`` on ``stage`` waits for."""
    virtual, last = op.chunk * stages + stage, stages * chunks - 1
    if op.kind == "F":
        if virtual == 0:
            return []
        before = virtual - 1
        return [(before % stages, Op("F", op.micro, before // stages))]
    if op.kind == "B":
        needs = [(stage, Op("F", op.micro, op.chunk))]
        if virtual < last:
            after = virtual + 1
            needs.append((after % stages, Op("B", op.micro, after // stages)))
        return needs
    return [(stage, Op("B", op.micro, op.chunk))]


def simulate(orders: Sequence[Sequence[Op]], costs: Costs = Costs(),
             chunks: int = 1) -> list[Interval]:
    """Run each stage's operations in its order; an operation starts when its stage is free
    and what it needs has finished (plus ``costs.send`` when that was on another stage).
    Operation times are per chunk (a stage with ``chunks`` chunks holds 1/chunks of its
    layers: pass ``Costs`` scaled accordingly). Raises when the orders deadlock or when an
    operation or its inputs are missing."""
    stages = len(orders)
    if stages == 0:
        raise ValueError("no stages")
    for s, order in enumerate(orders):
        for op in order:
            if op.kind not in KINDS:
                raise ValueError(f"stage {s}: unknown kind {op.kind!r} (one of {KINDS})")
        if len(set(order)) != len(order):
            raise ValueError(f"stage {s} runs an operation twice")
    scheduled = {(s, op) for s, order in enumerate(orders) for op in order}
    done: dict[tuple[int, Op], float] = {}
    position, free = [0] * stages, [0.0] * stages
    out: list[Interval] = []
    remaining = len(scheduled)
    while remaining:
        progressed = False
        for s in range(stages):
            while position[s] < len(orders[s]):
                op = orders[s][position[s]]
                needs = _needs(s, op, stages, chunks)
                missing = [n for n in needs if n not in scheduled]
                if missing:
                    raise ValueError(f"stage {s}'s {op} needs {missing}, which no stage runs")
                if any(n not in done for n in needs):
                    break
                ready = max([done[n] + (costs.send if n[0] != s else 0.0) for n in needs],
                            default=0.0)
                start = max(free[s], ready)
                end = start + costs.of(op.kind)
                out.append(Interval(s, op, start, end))
                done[(s, op)] = free[s] = end
                position[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = {s: orders[s][position[s]] for s in range(stages)
                     if position[s] < len(orders[s])}
            raise ValueError(f"the schedule deadlocks: each stage waits ({stuck})")
    return out


def makespan(timeline: Sequence[Interval]) -> float:
    """The time from the first operation's start to the last one's end."""
    return max(i.end for i in timeline) - min(i.start for i in timeline)


def bubble(timeline: Sequence[Interval]) -> float:
    """The share of stage-time spent idle between the first start and the last end."""
    stages = {i.stage for i in timeline}
    busy = sum(i.end - i.start for i in timeline)
    return 1.0 - busy / (len(stages) * makespan(timeline))


def bubble_formula(stages: int, micros: int, chunks: int = 1) -> float:
    """The idle share of GPipe and 1F1B when F and B take the same time on every stage and
    sending is free, (p − 1) / (m + p − 1); with ``chunks`` chunks per stage (interleaved),
    (p − 1) / (v·m + p − 1)."""
    _check(stages, micros, chunks)
    return (stages - 1) / (chunks * micros + stages - 1)


def in_flight(timeline: Sequence[Interval]) -> dict[int, int]:
    """For each stage, the most micro-batch chunks whose forward had run and whose backward
    (its weight gradient, where the backward is split) had not yet finished: the activations
    the stage holds at its peak."""
    split = any(i.op.kind == "W" for i in timeline)
    release = "W" if split else "B"
    events: dict[int, list[tuple[float, int]]] = {}
    for i in timeline:
        if i.op.kind == "F":
            events.setdefault(i.stage, []).append((i.start, 1))
        elif i.op.kind == release:
            events.setdefault(i.stage, []).append((i.end, -1))
    peaks = {}
    for stage, changes in events.items():
        held = peak = 0
        for _, change in sorted(changes, key=lambda e: (e[0], e[1])):
            held += change
            peak = max(peak, held)
        peaks[stage] = peak
    return dict(sorted(peaks.items()))


def schedule(name: str, stages: int, micros: int, chunks: int = 1) -> list[list[Op]]:
    """A schedule by name: "gpipe", "1f1b", "interleaved", "zero-bubble" or "zb-h1"."""
    makers: Mapping[str, object] = {
        "gpipe": lambda: gpipe(stages, micros),
        "1f1b": lambda: one_f_one_b(stages, micros),
        "interleaved": lambda: interleaved(stages, micros, chunks),
        "zero-bubble": lambda: zero_bubble(stages, micros),
        "zb-h1": lambda: zb_h1(stages, micros)}
    if name not in makers:
        raise ValueError(f"a schedule is one of {', '.join(makers)}, not {name!r}")
    return makers[name]()
