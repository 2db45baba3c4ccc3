"""Context parallelism by hand: ring attention (Liu et al., 2023) over the ``k`` processes of
one ``torch.distributed`` group.

Each process holds one contiguous shard of the sequence: its queries, keys and values.
Attention needs every query against every key, so the key and value shards travel around a
ring: at each of ``k`` steps a process attends its queries to the shard it holds, folds the
result into an online softmax (the running maximum, sum and output of the tiled attention
page), and passes the shard on to the next process while receiving one from the previous.
After ``k`` steps each process has its queries' exact output; no process ever held more
than two shards of keys and values. With a causal mask a process skips the shards that come
after its own (they are masked out entirely), which leaves the later processes with more
work: the load imbalance that zigzag orderings of the shards fix.
"""

from __future__ import annotations

import math

import torch

from d2l_ext.collectives import rank_and_size, send_receive


def _fold(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
          state: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One block of keys folded into the running (maximum, sum, output) of ``q``'s rows."""
    high, total, out = state
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    new_high = torch.maximum(high, scores.amax(dim=-1, keepdim=True))
    weights = torch.exp(scores - new_high)
    rescale = torch.exp(high - new_high)
    return new_high, total * rescale + weights.sum(-1, keepdim=True), out * rescale + weights @ v


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   causal: bool = True) -> torch.Tensor:
    """Attention of this process's queries ``q`` (batch, heads, s/k, head size) to the whole
    sequence, whose keys and values are sharded like ``q`` across the processes in rank
    order. Every process calls it; each gets its own shard of the output."""
    rank, size = rank_and_size()
    if q.shape != k.shape or k.shape != v.shape:
        raise ValueError(f"q, k and v must have one shape per process, not {tuple(q.shape)}, "
                         f"{tuple(k.shape)} and {tuple(v.shape)}")
    rows = q.shape[-2]
    state = (torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype),
             torch.zeros((*q.shape[:-1], 1), dtype=q.dtype), torch.zeros_like(q))
    kv = torch.stack([k, v])
    for step in range(size):
        owner = (rank - step) % size  # whose shard of keys and values this process holds
        if not causal or owner < rank:
            state = _fold(q, kv[0], kv[1], None, state)
        elif owner == rank:
            mask = torch.ones(rows, rows, dtype=torch.bool).tril()
            state = _fold(q, kv[0], kv[1], mask, state)
        if step < size - 1:
            kv = send_receive(kv, to=(rank + 1) % size, source=(rank - 1) % size)
    high, total, out = state
    return out / total


def ring_bytes_per_process(batch: int, heads: int, seq: int, head_size: int, item: int,
                           processes: int) -> dict[str, int]:
    """What one process sends in one ring attention: its keys and values shard,
    2·b·h·(s/k)·d_h numbers, at each of the k − 1 steps."""
    if seq % processes:
        raise ValueError(f"the sequence ({seq}) must divide evenly among {processes} processes")
    shard = 2 * batch * heads * (seq // processes) * head_size * item
    return {"sends": processes - 1, "per_send": shard, "total": (processes - 1) * shard}
