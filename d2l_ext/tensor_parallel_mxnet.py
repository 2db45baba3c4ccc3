"""Tensor and sequence parallelism by hand in MXNet, across the contexts (devices) of one
process, for the chapter "Splitting the model" (MXNet tab).

Each context holds 1/k of every weight matrix of a :class:`d2l_ext.transformer_mxnet.Block`,
split as :mod:`d2l_ext.tensor_parallel` splits PyTorch's (q, k and v and the MLP's first
layer by outputs, the two projections by inputs). MXNet has no collectives between the
contexts of one process; its kvstore is the nearest thing: pushing one array per context and
pulling the sum back to every context is an all-reduce. :class:`ContextGroup` runs the
all-reduce, all-gather and reduce-scatter the split block needs that way, and counts what
each context hands in, as :func:`d2l_ext.collectives.counting` does for PyTorch.
:func:`block_forward` is the forward pass only, by choice: autograd records no kvstore sum
unless it is wrapped in an ``mx.autograd.Function``, as the PyTorch splits wrap theirs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import mxnet as mx
from mxnet import np, npx

from d2l_ext import transformer_mxnet
from d2l_ext.split_bytes import Traffic

__all__ = ["ContextGroup", "BlockShard", "split_block", "block_forward"]


def _bytes(array: Any) -> int:
    return array.size * array.dtype.itemsize


class ContextGroup:
    """The contexts of one process as a group, with collectives built on a kvstore."""

    def __init__(self, contexts: Sequence[mx.Context]) -> None:
        if len(contexts) < 1:
            raise ValueError("a group needs at least one context, e.g. [mx.cpu(0), mx.cpu(1)]")
        self.contexts = list(contexts)
        self.kv = mx.kv.create("device")
        self.traffic = Traffic()
        self._keys: dict[tuple, str] = {}  # one kvstore key per shape and type, reused

    @property
    def size(self) -> int:
        return len(self.contexts)

    def _check(self, parts: Sequence[Any]) -> None:
        if len(parts) != self.size:
            raise ValueError(f"one array per context ({self.size}), not {len(parts)}")
        for part, ctx in zip(parts, self.contexts):
            if part.ctx != ctx:
                raise ValueError(f"an array on {part.ctx} was handed in for {ctx}: copy it "
                                 "there first (array.copyto(ctx))")

    def _sum(self, parts: Sequence[Any]) -> list[Any]:
        shape = (tuple(parts[0].shape), str(parts[0].dtype))
        if shape not in self._keys:  # a kvstore key keeps the shape it was made with
            self._keys[shape] = f"sum{len(self._keys)}"
            self.kv.init(self._keys[shape], np.zeros(parts[0].shape, dtype=parts[0].dtype))
        key = self._keys[shape]
        out = [np.zeros(parts[0].shape, dtype=parts[0].dtype, ctx=c) for c in self.contexts]
        self.kv.push(key, list(parts))
        self.kv.pull(key, out=out)
        return out

    def all_reduce(self, parts: Sequence[Any]) -> list[Any]:
        """The sum of the contexts' arrays, on every context."""
        self._check(parts)
        self.traffic.record("all_reduce", _bytes(parts[0]))
        return self._sum(parts)

    def all_gather(self, shards: Sequence[Any], axis: int = 0) -> list[Any]:
        """Every context's shard, concatenated along ``axis`` in context order, on every
        context."""
        self._check(shards)
        self.traffic.record("all_gather", _bytes(shards[0]))
        return [np.concatenate([s.copyto(c) for s in shards], axis=axis) for c in self.contexts]

    def reduce_scatter(self, parts: Sequence[Any], axis: int = 0) -> list[Any]:
        """The sum of the contexts' arrays, of which context r keeps the r-th of k equal
        slices along ``axis`` (the kvstore sums whole arrays: the slice is cut after)."""
        self._check(parts)
        if parts[0].shape[axis] % self.size:
            raise ValueError(f"axis {axis} ({parts[0].shape[axis]}) must divide evenly among "
                             f"{self.size} contexts")
        self.traffic.record("reduce_scatter", _bytes(parts[0]))
        part = parts[0].shape[axis] // self.size
        return [np.take(total, np.arange(r * part, (r + 1) * part, ctx=total.ctx), axis=axis)
                for r, total in enumerate(self._sum(parts))]

    def shift(self, parts: Sequence[Any]) -> list[Any]:
        """One step around a ring: context r's array copied to context r + 1 (the last one's
        to the first); returns what each context received. Counts one context's array."""
        self._check(parts)
        self.traffic.record("send", _bytes(parts[0]))
        return [parts[(r - 1) % self.size].copyto(c) for r, c in enumerate(self.contexts)]

    def all_to_all(self, parts: Sequence[Sequence[Any]]) -> list[list[Any]]:
        """``parts[i][j]``, context i's array for context j, copied there; returns, for each
        context j, what every context sent it, in context order. The arrays may differ in
        length. Counts what all the contexts send to others, together (the payloads of an
        all-to-all differ from context to context)."""
        if len(parts) != self.size or any(len(row) != self.size for row in parts):
            raise ValueError(f"all_to_all needs {self.size} × {self.size} arrays: for each "
                             "context, one array for each context")
        for row, ctx in zip(parts, self.contexts):
            for part in row:
                if part.ctx != ctx:
                    raise ValueError(f"an array on {part.ctx} was handed in for {ctx}: copy "
                                     "it there first (array.copyto(ctx))")
        self.traffic.record("all_to_all", sum(_bytes(part) for i, row in enumerate(parts)
                                              for j, part in enumerate(row) if i != j))
        return [[parts[i][j].copyto(c) if i != j else parts[i][j].copy()
                 for i in range(self.size)] for j, c in enumerate(self.contexts)]


@dataclass
class BlockShard:
    """One context's share of a block: 1/k of each weight matrix, the whole LayerNorms and
    the biases that are added after a sum."""

    heads: int
    eps: float  # the LayerNorms' epsilon
    ln1: tuple[Any, Any]
    ln2: tuple[Any, Any]
    qkv: tuple[Any, Any]
    proj: tuple[Any, Any]
    fc: tuple[Any, Any]
    out: tuple[Any, Any]


def _rows(size: int, k: int, r: int, what: str) -> slice:
    if size % k:
        raise ValueError(f"{what} ({size}) must divide evenly among {k} contexts")
    return slice(r * size // k, (r + 1) * size // k)


def split_block(block: transformer_mxnet.Block, contexts: Sequence[mx.Context]) -> list[
        BlockShard]:
    """Each context's :class:`BlockShard` of an initialised ``block``: its heads of q, k and
    v and its rows of the MLP's first layer (output features), its columns (input features)
    of the two projections."""
    k, heads = len(contexts), block.attn.heads
    if heads % k:
        raise ValueError(f"the heads ({heads}) must divide evenly among {k} contexts")

    def data(layer: Any) -> tuple[Any, Any]:
        return layer.weight.data(), layer.bias.data()

    def norm(layer: Any) -> tuple[Any, Any]:
        return layer.gamma.data(), layer.beta.data()

    shards = []
    for r, ctx in enumerate(contexts):
        qkv_w, qkv_b = data(block.attn.qkv)
        d = qkv_w.shape[1]
        mine = _rows(d, k, r, "the width")
        cols = np.arange(mine.start, mine.stop)
        take = np.concatenate([cols + i * d for i in range(3)])  # its part of q, of k, of v
        fc_w, fc_b = data(block.fc)
        hidden = _rows(fc_w.shape[0], k, r, "the MLP's hidden width")
        (proj_w, proj_b), (out_w, out_b) = data(block.attn.proj), data(block.out)
        shards.append(BlockShard(
            heads=heads // k, eps=block.ln1._kwargs["eps"],
            ln1=tuple(a.copyto(ctx) for a in norm(block.ln1)),
            ln2=tuple(a.copyto(ctx) for a in norm(block.ln2)),
            qkv=(qkv_w[take].copyto(ctx), qkv_b[take].copyto(ctx)),
            proj=(proj_w[:, mine].copyto(ctx), proj_b.copyto(ctx)),
            fc=(fc_w[hidden].copyto(ctx), fc_b[hidden].copyto(ctx)),
            out=(out_w[:, hidden].copyto(ctx), out_b.copyto(ctx))))
    return shards


def _layer_norm(x: Any, params: tuple[Any, Any], eps: float) -> Any:
    return npx.layer_norm(x, params[0], params[1], axis=-1, eps=eps)


def _linear(x: Any, weight: Any, bias: Any | None = None) -> Any:
    return npx.fully_connected(x, weight, bias, num_hidden=weight.shape[0],
                               no_bias=bias is None, flatten=False)


def block_forward(shards: Sequence[BlockShard], xs: Sequence[Any], group: ContextGroup,
                  sequence: bool = False) -> list[Any]:
    """The split block's forward pass, one input per context: the whole sequence on every
    context (tensor parallelism), or with ``sequence`` each context's shard of it (sequence
    parallelism: LayerNorms and residual additions on the shard, an all-gather before
    attention and the MLP, a reduce-scatter in place of the all-reduce). Returns each
    context's output: the whole output, or its shard."""
    if len(shards) != group.size:
        raise ValueError(f"one shard per context ({group.size}), not {len(shards)}")
    gather = ((lambda parts: group.all_gather(parts, axis=1)) if sequence
              else (lambda parts: list(parts)))
    combine = ((lambda parts: group.reduce_scatter(parts, axis=1)) if sequence
               else group.all_reduce)

    def attention(shard: BlockShard, x: Any) -> Any:
        b, s, _ = x.shape
        q, k, v = (t.reshape(b, s, shard.heads, -1).transpose(0, 2, 1, 3)
                   for t in np.split(_linear(x, *shard.qkv), 3, axis=-1))
        y = transformer_mxnet.naive_attention(q, k, v).transpose(0, 2, 1, 3).reshape(b, s, -1)
        return _linear(y, shard.proj[0])  # the bias waits for the sum

    def mlp(shard: BlockShard, x: Any) -> Any:
        return _linear(npx.leaky_relu(_linear(x, *shard.fc), act_type="gelu"), shard.out[0])

    inputs = gather([_layer_norm(x, s.ln1, s.eps) for s, x in zip(shards, xs)])
    summed = combine([attention(s, x) for s, x in zip(shards, inputs)])
    xs = [x + y + s.proj[1] for s, x, y in zip(shards, xs, summed)]
    inputs = gather([_layer_norm(x, s.ln2, s.eps) for s, x in zip(shards, xs)])
    summed = combine([mlp(s, x) for s, x in zip(shards, inputs)])
    return [x + y + s.out[1] for s, x, y in zip(shards, xs, summed)]
