"""Collectives that count what they are handed, for the pages that split a model.

Each function runs one ``torch.distributed`` operation and, inside :func:`counting`,
records its kind, the call and the bytes of the tensor this process handed in (for a
send, the bytes sent; for an all-to-all, the bytes it sends to the others). A page checks
those counts against its formula; what a ring algorithm then puts on the wire is
:func:`ring_bytes`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch
import torch.distributed as dist

from d2l_ext.split_bytes import Traffic, ring_bytes  # noqa: F401 (ring_bytes: re-exported)

_counters: list[Traffic] = []


@contextlib.contextmanager
def counting() -> Iterator[Traffic]:
    """Count the collectives this module runs inside the block (nested blocks count too)."""
    traffic = Traffic()
    _counters.append(traffic)
    try:
        yield traffic
    finally:
        _counters.remove(traffic)


def _record(kind: str, nbytes: int) -> None:
    for traffic in _counters:
        traffic.record(kind, nbytes)


def _bytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def rank_and_size() -> tuple[int, int]:
    """This process's rank and the number of processes; a clear error outside a group."""
    if not dist.is_initialized():
        raise RuntimeError("this runs in a torch.distributed group: start the processes with "
                           "d2l_ext.comm.spawn (or torchrun) first")
    return dist.get_rank(), dist.get_world_size()


def all_reduce(tensor: torch.Tensor) -> torch.Tensor:
    """Sum ``tensor`` over the processes, in place; returns it."""
    _record("all_reduce", _bytes(tensor))
    if rank_and_size()[1] > 1:
        dist.all_reduce(tensor)
    return tensor


def all_gather(tensor: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """Every process's ``tensor``, concatenated along ``dim`` in rank order."""
    _, size = rank_and_size()
    _record("all_gather", _bytes(tensor))
    parts = [torch.empty_like(tensor) for _ in range(size)]
    dist.all_gather(parts, tensor.contiguous())
    return torch.cat(parts, dim=dim)


def reduce_scatter(tensor: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """The sum over the processes of ``tensor``, of which this process keeps its slice along
    ``dim`` (rank r keeps the r-th of ``world`` equal slices): ``reduce_scatter_single``,
    which NCCL runs as a ring's reduce-scatter and gloo as an all-reduce followed by a copy
    of the slice (the same result, more bytes on the wire)."""
    _, size = rank_and_size()
    if tensor.shape[dim] % size:
        raise ValueError(f"dimension {dim} ({tensor.shape[dim]}) must divide evenly among "
                         f"{size} processes")
    _record("reduce_scatter", _bytes(tensor))
    stacked = tensor.movedim(dim, 0).contiguous()  # the slices, one after the other
    out = torch.empty((stacked.shape[0] // size, *stacked.shape[1:]), dtype=tensor.dtype,
                      device=tensor.device)
    if size > 1:  # reduce_scatter_single is new in PyTorch 2.13; reduce_scatter_tensor before
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        scatter(out, stacked)
    else:
        out.copy_(stacked)
    return out.movedim(0, dim).contiguous()


def all_to_all(parts: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Send ``parts[j]`` to process ``j``; returns what each process sent here, by rank.
    The parts may differ in length along their first dimension (the sizes are exchanged
    first, and not counted as payload)."""
    rank, size = rank_and_size()
    if len(parts) != size:
        raise ValueError(f"all_to_all needs one part per process ({size}), not {len(parts)}")
    _record("all_to_all", sum(_bytes(p) for j, p in enumerate(parts) if j != rank))
    device = parts[0].device  # NCCL exchanges tensors on the GPU, gloo on the CPU
    sizes = torch.tensor([p.shape[0] for p in parts], device=device)
    incoming = torch.empty_like(sizes)
    dist.all_to_all_single(incoming, sizes)
    rest = parts[0].shape[1:]
    out = [torch.empty((int(n), *rest), dtype=parts[0].dtype, device=device)
           for n in incoming.tolist()]
    if dist.get_backend() == "gloo":  # gloo's all_to_all takes no list: pair sends by hand
        requests = [dist.isend(p.contiguous(), j) for j, p in enumerate(parts) if j != rank]
        requests += [dist.irecv(out[j], j) for j in range(size) if j != rank]
        out[rank] = parts[rank].clone()
        for request in requests:
            request.wait()
    else:
        dist.all_to_all(out, [p.contiguous() for p in parts])
    return out


class Exchange:
    """A send and a receive in flight (:func:`start_send_receive`); :meth:`wait` returns the
    received tensor once both are done."""

    def __init__(self, received: torch.Tensor, requests: list) -> None:
        self._received, self._requests = received, requests

    def wait(self) -> torch.Tensor:
        for request in self._requests:
            request.wait()
        return self._received


def start_send_receive(tensor: torch.Tensor, to: int, source: int) -> Exchange:
    """Start sending ``tensor`` to process ``to`` and receiving one of the same shape from
    ``source`` (a step around a ring), and return at once, so that computation can run while
    they travel. The two are posted as one batch (``batch_isend_irecv``): NCCL may block a
    send until its receive is posted, and a batch cannot deadlock around a ring."""
    received = torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device)
    if to == source == dist.get_rank():  # a ring of one: nothing is sent
        return Exchange(received.copy_(tensor), [])
    _record("send", _bytes(tensor))
    requests = dist.batch_isend_irecv([dist.P2POp(dist.isend, tensor.contiguous(), to),
                                       dist.P2POp(dist.irecv, received, source)])
    return Exchange(received, requests)


def send_receive(tensor: torch.Tensor, to: int, source: int) -> torch.Tensor:
    """Send ``tensor`` to process ``to`` while receiving one of the same shape from
    ``source`` (a step around a ring); returns the received tensor."""
    return start_send_receive(tensor, to, source).wait()
