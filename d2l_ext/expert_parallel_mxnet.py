"""A mixture-of-experts layer in MXNet, whole on one context and split by experts across the
contexts of one process, for the chapter "Splitting the model" (MXNet tab): the layer of
:mod:`d2l_ext.expert_parallel`, with
:meth:`~d2l_ext.tensor_parallel_mxnet.ContextGroup.all_to_all` (counted copies between
contexts) in place of the all-to-all between processes. Forward pass only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import mxnet as mx
import numpy as onp
from mxnet import np, npx

from d2l_ext.tensor_parallel_mxnet import ContextGroup

__all__ = ["Experts", "make_experts", "route", "moe", "split", "moe_split"]


@dataclass
class Experts:
    """A router (E × d) and E MLPs (d → hidden → d, GELU): ``up`` (E, d, hidden) and
    ``down`` (E, hidden, d); ``first`` is the number of the first expert held here."""
    router: Any
    up: Any
    down: Any
    top_k: int
    first: int = 0


def make_experts(d: int, hidden: int, experts: int, top_k: int = 2,
                 ctx: mx.Context | None = None) -> Experts:
    """Random experts on ``ctx``, scaled as :class:`d2l_ext.expert_parallel.MoE` scales its."""
    if not 1 <= top_k <= experts:
        raise ValueError(f"top_k must be between 1 and the experts ({experts}), not {top_k}")
    ctx = ctx or mx.cpu()
    return Experts(np.random.normal(size=(experts, d), ctx=ctx) / d**0.5,
                   np.random.normal(size=(experts, d, hidden), ctx=ctx) / d**0.5,
                   np.random.normal(size=(experts, hidden, d), ctx=ctx) / hidden**0.5, top_k)


def route(x: Any, experts: Experts) -> tuple[onp.ndarray, Any]:
    """For tokens ``x`` (n, d): each one's ``top_k`` experts, as a NumPy array (n, top_k),
    and their weights, the softmax of the router's scores over those ``top_k``."""
    if x.shape[0] == 0:  # MXNet would report it later, at an unrelated operation
        raise ValueError("route needs at least one token, not an empty array")
    scores = np.matmul(x, experts.router.T)
    chosen = npx.topk(scores, k=experts.top_k, ret_typ="indices", dtype="int64")
    best = npx.topk(scores, k=experts.top_k, ret_typ="value")
    return chosen.asnumpy(), npx.softmax(best, axis=-1)


def _mlp(x: Any, up: Any, down: Any) -> Any:
    return np.matmul(npx.leaky_relu(np.matmul(x, up), act_type="gelu"), down)


def _index(rows: onp.ndarray, ctx: mx.Context) -> Any:
    return np.array(rows.astype("int64"), dtype="int64", ctx=ctx)


def moe(x: Any, experts: Experts) -> Any:
    """The whole layer on one context: each token's ``top_k`` experts, weighted."""
    chosen, weights = route(x, experts)
    out = np.zeros_like(x)
    for e in range(experts.up.shape[0]):
        token, slot = onp.nonzero(chosen == e)
        if len(token):  # a token meets each expert at most once: no index repeats
            rows, slots = _index(token, x.ctx), _index(slot, x.ctx)
            out[rows] = out[rows] + weights[rows, slots][:, None] * _mlp(
                x[rows], experts.up[e], experts.down[e])
    return out


def split(experts: Experts, contexts: Sequence[mx.Context]) -> list[Experts]:
    """Each context's share: a copy of the router and E/k consecutive experts."""
    total, k = experts.up.shape[0], len(contexts)
    if total % k:
        raise ValueError(f"the experts ({total}) must divide evenly among {k} contexts")
    local = total // k
    return [Experts(experts.router.copyto(c), experts.up[r * local:(r + 1) * local].copyto(c),
                    experts.down[r * local:(r + 1) * local].copyto(c), experts.top_k,
                    r * local) for r, c in enumerate(contexts)]


def moe_split(xs: Sequence[Any], shards: Sequence[Experts], group: ContextGroup
              ) -> tuple[list[Any], list[int], list[tuple[int, int]]]:
    """The layer split by experts: ``xs[r]``, context r's tokens, routed there; every
    (token, expert) row sent to the context that holds its expert (one all-to-all), run
    there, and sent back (another). Returns each context's output, the rows each expert
    ran, and for each context the rows it sent away and the rows it received."""
    k = group.size
    if len(xs) != k or len(shards) != k:
        raise ValueError(f"one array of tokens and one share of the experts per context ({k})")
    local = shards[0].up.shape[0]
    plans, parts = [], []
    for x, shard in zip(xs, shards):  # each context routes its own tokens
        chosen, weights = route(x, shard)
        flat = chosen.reshape(-1)
        order = onp.argsort(flat, kind="stable")  # by expert, so by context
        owner = flat[order] // local
        plans.append((order, flat[order], weights))
        parts.append([x[_index(order[owner == j] // shard.top_k, x.ctx)] for j in range(k)])
    arrived = group.all_to_all(parts)  # arrived[j][i]: what context i sent context j
    results = []
    loads = [0] * (local * k)
    for j, (shard, rows_from) in enumerate(zip(shards, arrived)):
        row_results = []
        for i, rows in enumerate(rows_from):
            experts_of = plans[i][1][plans[i][1] // local == j]  # each row's expert
            out = np.zeros_like(rows)
            for e in onp.unique(experts_of):
                picked = _index(onp.nonzero(experts_of == e)[0], rows.ctx)
                out[picked] = _mlp(rows[picked], shard.up[e - shard.first],
                                   shard.down[e - shard.first])
                loads[e] += len(picked)
            row_results.append(out)
        results.append(row_results)
    returned = group.all_to_all(results)  # returned[i][j]: context j's results for context i
    outs, moved = [], []
    for i, (x, (order, experts_sorted, weights)) in enumerate(zip(xs, plans)):
        back = np.concatenate(returned[i], axis=0)  # in the order of ``order``
        token, slot = order // shards[i].top_k, order % shards[i].top_k
        out = np.zeros_like(x)
        for s in range(shards[i].top_k):  # a token appears once per slot: no index repeats
            picked = onp.nonzero(slot == s)[0]
            rows = _index(token[picked], x.ctx)
            out[rows] = out[rows] + weights[rows, s][:, None] * back[_index(picked, x.ctx)]
        outs.append(out)
        away = int((experts_sorted // local != i).sum())
        arriving = sum(len(arrived[i][j]) for j in range(k) if j != i)
        moved.append((away, arriving))
    return outs, loads, moved
