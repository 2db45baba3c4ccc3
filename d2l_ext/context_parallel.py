"""Context parallelism by hand: ring attention (Liu et al., 2023) over the ``k`` processes of
one ``torch.distributed`` group.

Each process holds its chunks of the sequence (:func:`d2l_ext.split_bytes.ring_chunks`):
their queries, keys and values. Attention needs every query against every key, so the keys
and values travel around a ring: at each of ``k`` steps a process attends its queries to the
keys and values it holds, folds the result into an online softmax (a running maximum, sum
and output per query, as in the tiled attention of the transformers chapter), and passes
them on to the next process while receiving the previous process's. After ``k`` steps each
process has its queries' exact output, and no process held more than two shards of keys and
values at a time, the one it computes with and the one in flight (plus, for 16-bit inputs,
a float32 copy of the first; the next exchange is posted before a step's products, so that
the two can overlap). Under a causal mask a process skips the chunks of keys that come after its
queries; with contiguous chunks that leaves the later processes most of the work, and the
zigzag layout (an early and a late chunk per process) evens it out. Forward pass only: the
keys and values that arrive are new tensors to autograd, so a backward pass would miss
their gradients; :func:`ring_attention` refuses inputs that require a gradient.
"""

from __future__ import annotations

import math

import torch

from d2l_ext.collectives import rank_and_size, start_send_receive
from d2l_ext.split_bytes import Work, ring_attention_bytes, ring_chunks, ring_positions

__all__ = ["ring_attention", "ring_attention_bytes", "ring_chunks", "ring_positions", "Work"]

_State = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _fold(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
          state: _State) -> _State:
    """One block of keys folded into the running (maximum, sum, output) of ``q``'s rows."""
    high, total, out = state
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    new_high = torch.maximum(high, scores.amax(dim=-1, keepdim=True))
    weights = torch.exp(scores - new_high)
    rescale = torch.exp(high - new_high)
    return new_high, total * rescale + weights.sum(-1, keepdim=True), out * rescale + weights @ v


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
                   layout: str = "contiguous", work: Work | None = None) -> torch.Tensor:
    """Attention of this process's queries ``q`` (batch, heads, rows, head size) to the whole
    sequence, whose queries, keys and values are sharded alike across the processes as
    ``layout`` says (:func:`~d2l_ext.split_bytes.ring_chunks`; this process's chunks one
    after the other, every process with as many rows). Every process calls it and gets the
    output of its own rows, in ``q``'s type. It computes in float32 or wider (a GPU kernel
    would run the products in 16 bits on the tensor cores and keep only the running softmax
    in float32). ``work``, if given, counts the query–key scores this process computes.
    Forward pass only."""
    rank, size = rank_and_size()
    if q.shape != k.shape or k.shape != v.shape:
        raise ValueError(f"q, k and v must have one shape per process, not {tuple(q.shape)}, "
                         f"{tuple(k.shape)} and {tuple(v.shape)}")
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        raise ValueError("ring_attention is the forward pass only (the keys and values that "
                         "arrive carry no gradient back): call it under torch.no_grad(), or "
                         "with detached tensors")
    mine = ring_chunks(rank, size, layout)
    if q.shape[-2] == 0 or q.shape[-2] % len(mine):
        raise ValueError(f"the {layout} layout gives each process {len(mine)} chunk(s) of "
                         f"equal, non-zero length; {q.shape[-2]} rows do not divide that way")
    n = q.shape[-2] // len(mine)
    wide = torch.promote_types(q.dtype, torch.float32)  # the type it computes in
    queries = q.to(wide).split(n, dim=-2)
    states = [(torch.full((*part.shape[:-1], 1), float("-inf"), dtype=wide, device=q.device),
               torch.zeros((*part.shape[:-1], 1), dtype=wide, device=q.device),
               torch.zeros_like(part)) for part in queries]
    diagonal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    kv = torch.stack([k, v])
    for step in range(size):
        owner = (rank - step) % size  # whose keys and values this process holds now
        pending = (start_send_receive(kv, to=(rank + 1) % size, source=(rank - 1) % size)
                   if step < size - 1 else None)  # in flight while this step computes
        held = zip(ring_chunks(owner, size, layout), kv[0].to(wide).split(n, dim=-2),
                   kv[1].to(wide).split(n, dim=-2))
        for key_chunk, keys, values in held:
            for i, (query_chunk, part) in enumerate(zip(mine, queries)):
                if causal and key_chunk > query_chunk:
                    continue  # every key in the chunk comes after every query: all masked
                mask = diagonal if causal and key_chunk == query_chunk else None
                states[i] = _fold(part, keys, values, mask, states[i])
                if work is not None:
                    work.add(part.shape[:-1].numel() * n)
        if pending is not None:
            kv = pending.wait()
    return torch.cat([out / total for _, total, out in states], dim=-2).to(q.dtype)
