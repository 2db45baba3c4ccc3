"""What the collectives of a split model are handed and send, counted without a framework:
the :class:`Traffic` a counter records, what a ring sends for a payload (:func:`ring_bytes`),
and the bytes one split transformer block hands to its collectives in a step, under tensor
parallelism (:func:`block_all_reduce_bytes`) and sequence parallelism
(:func:`block_sequence_bytes`); which chunks and positions of a sequence each process of a
ring attention holds (:func:`ring_chunks`, :func:`ring_positions`) and what it sends
(:func:`ring_attention_bytes`); what a mixture-of-experts layer hands its all-to-alls
(:func:`dispatch_bytes`) and how unevenly its experts are loaded (:func:`load_imbalance`).
Shared by the PyTorch splits and the MXNet ones; imports neither framework."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from d2l_ext.utils import whole_numbers

__all__ = ["Traffic", "Work", "ring_bytes", "block_all_reduce_bytes", "block_sequence_bytes",
           "ring_chunks", "ring_positions", "ring_attention_bytes", "dispatch_bytes",
           "load_imbalance"]


@dataclass
class Traffic:
    """Per kind of collective: the calls and the bytes of payload."""
    calls: dict[str, int] = field(default_factory=dict)
    payload: dict[str, int] = field(default_factory=dict)

    def record(self, kind: str, nbytes: int) -> None:
        self.calls[kind] = self.calls.get(kind, 0) + 1
        self.payload[kind] = self.payload.get(kind, 0) + nbytes


@dataclass
class Work:
    """What one process computed: the query–key scores of the blocks it folded in."""
    scores: int = 0
    blocks: int = 0

    def add(self, scores: int) -> None:
        self.scores += scores
        self.blocks += 1


def ring_bytes(kind: str, payload: int, processes: int) -> int:
    """What a ring algorithm sends from each process for a collective handed ``payload``
    bytes per process: all-reduce 2(k − 1)/k of it, reduce-scatter (k − 1)/k of it,
    all-gather (k − 1) times it (each process's input goes to k − 1 others)."""
    (payload,) = whole_numbers(0, payload=payload)
    (k,) = whole_numbers(processes=processes)
    factors = {"all_reduce": (2 * (k - 1), k), "reduce_scatter": (k - 1, k),
               "all_gather": (k - 1, 1)}
    if kind not in factors:
        raise ValueError(f"kind is one of {', '.join(factors)}, not {kind!r}")
    num, den = factors[kind]
    return payload * num // den


def block_all_reduce_bytes(batch: int, seq: int, d: int, item: int, world: int,
                           backward: bool = True) -> dict[str, int]:
    """The bytes one split block hands to all-reduces in one step: 2 of b·s·d elements in the
    forward pass (after attention and after the MLP) and, with ``backward``, 2 more (the
    gradients of the two inputs); and what a ring all-reduce of that payload sends from each
    process, 2(k − 1)/k of it."""
    batch, seq, d, item, world = whole_numbers(batch=batch, seq=seq, d=d, item=item,
                                               world=world)
    calls = 4 if backward else 2
    payload = calls * batch * seq * d * item
    return {"calls": calls, "payload": payload,
            "sent_per_process": ring_bytes("all_reduce", payload, world)}


def block_sequence_bytes(batch: int, seq: int, d: int, item: int, world: int,
                         backward: bool = True, regather: bool = False) -> dict[str, int]:
    """The bytes one sequence-parallel block hands to its collectives in one step: before
    attention and the MLP an all-gather of this process's shard (b·s/k·d elements), after
    them a reduce-scatter of the whole partial output (b·s·d); the backward pass runs each
    the other way round, as many again, and with ``regather`` two more all-gathers of the
    shard (the inputs of the column-split layers, gathered again). On a ring an all-gather
    and a reduce-scatter send, from each process, what one all-reduce of b·s·d sends:
    2(k − 1)/k of it."""
    batch, seq, d, item, world = whole_numbers(batch=batch, seq=seq, d=d, item=item,
                                               world=world)
    if seq % world:
        raise ValueError(f"the sequence ({seq}) must divide evenly among {world} processes")
    rounds = 2 if backward else 1
    gathers = 2 * rounds + (2 if regather and backward else 0)
    shard, whole = batch * (seq // world) * d * item, batch * seq * d * item
    return {"all_gather": gathers * shard, "reduce_scatter": 2 * rounds * whole,
            "all_gather_calls": gathers, "reduce_scatter_calls": 2 * rounds,
            "sent_per_process": (gathers * ring_bytes("all_gather", shard, world)
                                 + 2 * rounds * ring_bytes("reduce_scatter", whole, world))}


LAYOUTS = ("contiguous", "zigzag")


def ring_chunks(rank: int, size: int, layout: str = "contiguous") -> list[int]:
    """The chunks of the sequence that process ``rank`` of ``size`` holds, in order.
    ``"contiguous"``: the sequence cut into ``size`` chunks, chunk ``rank``. ``"zigzag"``: cut
    into ``2·size`` chunks, chunks ``rank`` and ``2·size − 1 − rank``, an early one and a late
    one, so that under a causal mask every process computes as many scores."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout is one of {', '.join(LAYOUTS)}, not {layout!r}")
    (size,) = whole_numbers(size=size)
    (rank,) = whole_numbers(0, rank=rank)
    if not 0 <= rank < size:
        raise ValueError(f"rank must be between 0 and {size - 1}, not {rank}")
    return [rank] if layout == "contiguous" else [rank, 2 * size - 1 - rank]


def ring_positions(rank: int, size: int, seq: int, layout: str = "contiguous") -> list[int]:
    """The positions of a sequence of ``seq`` tokens that process ``rank`` of ``size`` holds
    under ``layout`` (:func:`ring_chunks`), its chunks one after the other."""
    chunks = ring_chunks(rank, size, layout)
    (seq,) = whole_numbers(seq=seq)
    pieces = size * len(chunks)
    if seq % pieces:
        raise ValueError(f"the {layout} layout cuts the sequence into {pieces} equal chunks; "
                         f"{seq} tokens do not divide that way")
    n = seq // pieces
    return [i for c in chunks for i in range(c * n, (c + 1) * n)]


def ring_attention_bytes(batch: int, heads: int, seq: int, head_size: int, item: int,
                         processes: int) -> dict[str, int]:
    """What one process sends in one ring attention's forward pass: its shard of keys and
    values, 2·b·h·(s/k)·d_h numbers, at each of the k − 1 steps."""
    batch, heads, seq, head_size, item, processes = whole_numbers(
        batch=batch, heads=heads, seq=seq, head_size=head_size, item=item, processes=processes)
    if seq % processes:
        raise ValueError(f"the sequence ({seq}) must divide evenly among {processes} processes")
    shard = 2 * batch * heads * (seq // processes) * head_size * item
    return {"sends": processes - 1, "per_send": shard, "total": (processes - 1) * shard}


def dispatch_bytes(rows_out: int, rows_in: int, d: int, item: int) -> int:
    """Bytes one process hands the two all-to-alls of a mixture-of-experts forward pass:
    ``rows_out`` (token, expert) pairs whose expert another process holds go there, d numbers
    each, and the outputs of the ``rows_in`` rows other processes sent here go back, d
    numbers each. (The backward pass sends as many bytes, the other way round; the counts
    of rows exchanged first are a few integers and not counted.)"""
    rows_out, rows_in = whole_numbers(0, rows_out=rows_out, rows_in=rows_in)
    d, item = whole_numbers(d=d, item=item)
    return (rows_out + rows_in) * d * item


def load_imbalance(loads: Sequence[float]) -> float:
    """The busiest worker's load over the mean load: 1 is perfectly balanced."""
    loads = [float(x) for x in loads]
    if not loads:
        raise ValueError("load_imbalance needs at least one load")
    total = sum(loads)
    return max(loads) * len(loads) / total if total > 0 else 1.0
