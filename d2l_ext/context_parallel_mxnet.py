"""Ring attention by hand in MXNet, across the contexts (devices) of one process, for the
chapter "Splitting the model" (MXNet tab): the algorithm of :mod:`d2l_ext.context_parallel`,
with :meth:`~d2l_ext.tensor_parallel_mxnet.ContextGroup.shift` (a counted copy to the next
context) in place of the messages between processes. Forward pass only."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as onp
from mxnet import np

from d2l_ext.split_bytes import Work, ring_chunks
from d2l_ext.tensor_parallel_mxnet import ContextGroup

__all__ = ["ring_attention", "attention", "Work"]


def attention(q: Any, k: Any, v: Any, causal: bool = True) -> Any:
    """softmax(q kᵀ / √d) v over the last two axes, on one context: the reference."""
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        keep = np.array(onp.tril(onp.ones(scores.shape[-2:], dtype=bool)), ctx=q.ctx)
        scores = np.where(keep, scores, -onp.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return np.matmul(weights / weights.sum(axis=-1, keepdims=True), v)


def _fold(q: Any, k: Any, v: Any, keep: Any | None, state: tuple[Any, Any, Any]
          ) -> tuple[Any, Any, Any]:
    """One block of keys folded into the running (maximum, sum, output) of ``q``'s rows."""
    high, total, out = state
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) / math.sqrt(q.shape[-1])
    if keep is not None:
        scores = np.where(keep, scores, -onp.inf)
    new_high = np.maximum(high, scores.max(axis=-1, keepdims=True))
    weights = np.exp(scores - new_high)
    rescale = np.exp(high - new_high)
    return (new_high, total * rescale + weights.sum(axis=-1, keepdims=True),
            out * rescale + np.matmul(weights, v))


def ring_attention(qs: Sequence[Any], ks: Sequence[Any], vs: Sequence[Any],
                   group: ContextGroup, causal: bool = True, layout: str = "contiguous",
                   works: Sequence[Work] | None = None) -> list[Any]:
    """Each context's rows of attention over the whole sequence. ``qs[r]``, ``ks[r]`` and
    ``vs[r]`` (batch, heads, rows, head size) are context r's chunks as ``layout`` says
    (:func:`~d2l_ext.split_bytes.ring_chunks`); the keys and values go around the ring of
    contexts, one :meth:`~ContextGroup.shift` per step. ``works[r]``, if given, counts the
    query–key scores context r computes."""
    size = group.size
    if not len(qs) == len(ks) == len(vs) == size:
        raise ValueError(f"one array of queries, keys and values per context ({size})")
    if works is not None and len(works) != size:
        raise ValueError(f"one Work per context ({size}), not {len(works)}")
    shapes = {tuple(a.shape) for a in (*qs, *ks, *vs)}
    if len(shapes) != 1:
        raise ValueError(f"q, k and v must have one shape on every context, not {sorted(shapes)}")
    per = len(ring_chunks(0, size, layout))
    rows = qs[0].shape[-2]
    if rows == 0 or rows % per:
        raise ValueError(f"the {layout} layout gives each context {per} chunk(s) of equal, "
                         f"non-zero length; {rows} rows do not divide that way")
    n = rows // per

    def chunks(a: Any) -> list[Any]:
        return [a[..., i * n:(i + 1) * n, :] for i in range(per)]

    queries = [chunks(q) for q in qs]
    states = [[(np.full((*part.shape[:-1], 1), -onp.inf, dtype=part.dtype, ctx=part.ctx),
                np.zeros((*part.shape[:-1], 1), dtype=part.dtype, ctx=part.ctx),
                np.zeros_like(part))
               for part in parts] for parts in queries]
    keeps = [np.array(onp.tril(onp.ones((n, n), dtype=bool)), ctx=c) for c in group.contexts]
    kvs = [np.stack([k, v]) for k, v in zip(ks, vs)]
    for step in range(size):
        for rank in range(size):
            owner = (rank - step) % size
            held = zip(ring_chunks(owner, size, layout), chunks(kvs[rank][0]),
                       chunks(kvs[rank][1]))
            for key_chunk, keys, values in held:
                for i, query_chunk in enumerate(ring_chunks(rank, size, layout)):
                    if causal and key_chunk > query_chunk:
                        continue  # every key comes after every query: all masked
                    keep = keeps[rank] if causal and key_chunk == query_chunk else None
                    part = queries[rank][i]
                    states[rank][i] = _fold(part, keys, values, keep, states[rank][i])
                    if works is not None:
                        works[rank].add(int(onp.prod(part.shape[:-1])) * n)
        if step < size - 1:
            kvs = group.shift(kvs)
    return [np.concatenate([out / total for _, total, out in parts], axis=-2)
            for parts in states]
