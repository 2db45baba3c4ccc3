"""The memory of :mod:`d2l_ext.transformer_mxnet`'s attention, naive and tiled, read from
MXNet's storage counter (:class:`d2l_ext.mxnet_memory.StorageCounter`).

MXNet's resource manager keeps the temporary workspaces that operators request (its
``kTempSpace``: ``MXNET_CPU_TEMP_COPY`` copies on a CPU, 4 by default, used in turn) and
grows each to the largest request it has served; ``np.matmul`` of the naive attention asks
for one about as large as the scores. The counter counts them, and they stay allocated after
the call: :func:`attention_peak` therefore runs the function until as many calls in a row as
there are workspaces leave nothing more behind, reports what those calls left
(``workspace``), and measures the next call. MXNet's engine runs operators on its own
threads and frees arrays when it gets to it, so a peak can differ by a tile or an output
from one call to the next.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import mxnet as mx
from mxnet import autograd, np, npx

from d2l_ext import transformer_mxnet
from d2l_ext.mxnet_memory import StorageCounter

__all__ = ["MXAttentionMemory", "attention_peak", "attention_peaks"]


@dataclass(frozen=True)
class MXAttentionMemory:
    """Bytes above what MXNet's storage held before one call: the peak during the call
    (with ``backward``, during the forward pass), what stayed allocated with the output
    alive (the output, and the graph's arrays when recorded), the peak during the backward
    pass (None without it), and the workspaces that the warm-up calls left allocated."""

    peak: int
    kept: int
    backward_peak: int | None
    workspace: int


def _temp_copies() -> int:
    """How many temporary workspaces MXNet keeps per CPU (``MXNET_CPU_TEMP_COPY``, 4 by
    default): a call may use any of them, so that many calls in a row must leave nothing."""
    return max(1, int(os.environ.get("MXNET_CPU_TEMP_COPY", "4")))


def _call(fn: Callable, q, k, v, args, kwargs, backward: bool):
    if not backward:
        out = fn(q, k, v, *args, **kwargs)
        npx.waitall()
        return out
    with autograd.record():
        out = fn(q, k, v, *args, **kwargs)
    npx.waitall()
    return out


def attention_peak(counter: StorageCounter, fn: Callable, q, k, v, *args,
                   backward: bool = False, warmup: int = 16, calls: int = 5,
                   **kwargs) -> MXAttentionMemory:
    """Measure ``fn(q, k, v, *args, **kwargs)`` with ``counter`` (started before the first
    array of the process). First call it, unmeasured, until as many calls in a row as MXNet
    keeps workspaces (``MXNET_CPU_TEMP_COPY``) leave no more memory allocated than before
    them (at most ``warmup`` calls); then read the peaks of ``calls`` calls and keep the
    smallest: the engine frees arrays on its own threads, so a call's peak can include
    arrays that a faster engine would have freed already, never fewer than the call needs.
    With ``backward``, q, k and v get gradient arrays (before the measurement), the forward
    pass is recorded and the backward pass runs from ``out.backward()`` (a gradient of
    ones)."""
    if calls < 1:
        raise ValueError(f"calls must be at least 1, not {calls}")
    if backward:
        for t in (q, k, v):
            if t.grad is None:
                t.attach_grad()
    start = counter.read().current
    quiet = 0  # calls in a row that left nothing more behind
    for _ in range(warmup):
        before = counter.read().current
        out = _call(fn, q, k, v, args, kwargs, backward)
        if backward:
            out.backward()
        del out
        quiet = quiet + 1 if counter.read().current <= before else 0
        if quiet >= _temp_copies():
            break
    found = []  # (forward peak, kept after the forward pass, backward peak) per call
    for _ in range(calls):
        before = counter.read().current
        out = _call(fn, q, k, v, args, kwargs, backward)
        forward = counter.read()
        backward_peak = None
        if backward:
            out.backward()
            npx.waitall()
            backward_peak = counter.read().peak - before
        del out
        npx.waitall()
        found.append((forward.peak - before, forward.current - before, backward_peak))
    peak, kept, _ = min(found, key=lambda call: call[0])
    backward_peak = min(call[2] for call in found) if backward else None
    return MXAttentionMemory(peak, kept, backward_peak, before - start)


def attention_peaks(counter: StorageCounter, lengths: Iterable[int],
                    ways: Sequence[str] | Mapping[str, Callable] = ("naive", "tiled"), *,
                    batch: int = 1, heads: int = 1, d: int = 64, causal: bool = True,
                    backward: bool = False, ctx=None,
                    seed: int = 0) -> dict[str, list[MXAttentionMemory]]:
    """:func:`attention_peak` for each sequence length and each way: ``naive`` or ``tiled``
    of :mod:`d2l_ext.transformer_mxnet` (called with ``causal``) or, in a mapping, any
    function of (q, k, v). Random float32 inputs of shape (batch, heads, s, d)."""
    if not isinstance(ways, Mapping):
        functions = {"naive": transformer_mxnet.naive_attention,
                     "tiled": transformer_mxnet.tiled_attention}
        unknown = [how for how in ways if how not in functions]
        if unknown:
            raise ValueError(f"attention is computed 'naive' or 'tiled' here, not {unknown}")
        ways = {how: (lambda q, k, v, how=how: functions[how](q, k, v, causal))
                for how in ways}
    mx.random.seed(seed)
    found: dict[str, list[MXAttentionMemory]] = {name: [] for name in ways}
    for s in lengths:
        q, k, v = (np.random.normal(size=(batch, heads, s, d), ctx=ctx) for _ in range(3))
        for name, fn in ways.items():
            found[name].append(attention_peak(counter, fn, q, k, v, backward=backward))
        del q, k, v
    return found
