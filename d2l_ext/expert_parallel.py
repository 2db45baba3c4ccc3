"""A mixture-of-experts layer, whole in one process and split by experts across processes.

:class:`MoE` routes each token to its ``top_k`` experts (small MLPs) by a learned router and
sums their outputs weighted by the router's softmax. :class:`ExpertParallelMoE` holds
``experts / k`` of them in each of the ``k`` processes: each process routes its own tokens,
sends every token to the process that holds its expert with an all-to-all, runs its experts
on what arrives, and returns the results with a second all-to-all. The two all-to-alls are
differentiable (the backward pass runs them in reverse), and counted
(:mod:`d2l_ext.collectives`), so a page can check the bytes against
:func:`dispatch_bytes` and read the load of each expert.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from d2l_ext.collectives import all_to_all, rank_and_size


class MoE(nn.Module):
    """``experts`` MLPs (d → hidden → d, GELU) behind a linear router; each token goes to its
    ``top_k`` experts, weighted by the router's softmax over those ``top_k``."""

    def __init__(self, d: int, hidden: int, experts: int, top_k: int = 2) -> None:
        super().__init__()
        if not 1 <= top_k <= experts:
            raise ValueError(f"top_k must be between 1 and the experts ({experts}), not {top_k}")
        self.top_k = top_k
        self.router = nn.Linear(d, experts, bias=False)
        self.up = nn.Parameter(torch.randn(experts, d, hidden) / d**0.5)
        self.down = nn.Parameter(torch.randn(experts, hidden, d) / hidden**0.5)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """For tokens ``x`` (n, d): each one's ``top_k`` experts (n, top_k) and weights."""
        scores, chosen = self.router(x).topk(self.top_k, dim=-1)
        return chosen, scores.softmax(dim=-1)

    def expert(self, e: int, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x @ self.up[e]) @ self.down[e]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        chosen, weights = self.route(x)
        out = torch.zeros_like(x)
        for e in range(self.up.shape[0]):
            token, slot = (chosen == e).nonzero(as_tuple=True)
            if len(token):
                out = out.index_add(0, token, weights[token, slot, None] * self.expert(e, x[token]))
        return out.reshape(shape)


class _Exchange(torch.autograd.Function):
    """An all-to-all of rows whose backward pass sends the gradients back the way they came."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, send: list[int]) -> torch.Tensor:
        received = all_to_all(list(x.split(send)))
        ctx.send, ctx.received = send, [len(r) for r in received]
        return torch.cat(received)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        returned = all_to_all(list(grad.contiguous().split(ctx.received)))
        return torch.cat(returned), None


class ExpertParallelMoE(nn.Module):
    """This process's experts of ``moe`` (experts ``rank·E/k`` to ``(rank+1)·E/k − 1``) and a
    copy of its router; called with this process's tokens, it gives what ``moe`` gives."""

    def __init__(self, moe: MoE) -> None:
        super().__init__()
        rank, size = rank_and_size()
        experts = moe.up.shape[0]
        if experts % size:
            raise ValueError(f"the experts ({experts}) must divide evenly among {size} processes")
        self.local, self.top_k = experts // size, moe.top_k
        mine = slice(rank * self.local, (rank + 1) * self.local)
        self.router = copy.deepcopy(moe.router)
        self.up = nn.Parameter(moe.up.detach()[mine].clone())
        self.down = nn.Parameter(moe.down.detach()[mine].clone())
        self.load: torch.Tensor | None = None  # tokens per local expert, last call

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rank, size = rank_and_size()
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        scores, chosen = self.router(x).topk(self.top_k, dim=-1)
        weights = scores.softmax(dim=-1)
        flat = chosen.reshape(-1)  # one entry per (token, slot)
        order = flat.argsort(stable=True)  # grouped by expert, so by process
        owner = flat[order] // self.local
        send = torch.bincount(owner, minlength=size).tolist()
        received = self.received_sizes(send)  # the return trip sends these back
        token = order // self.top_k
        # the experts' numbers travel with the tokens, as one more column
        payload = torch.cat([x[token], flat[order, None].to(x.dtype)], dim=1)
        arrived = _Exchange.apply(payload, send)
        inputs, expert = arrived[:, :-1], arrived[:, -1].long() - rank * self.local
        self.load = torch.bincount(expert, minlength=self.local)
        outputs = torch.zeros_like(inputs)
        for e in range(self.local):
            rows = (expert == e).nonzero(as_tuple=True)[0]
            if len(rows):
                outputs = outputs.index_copy(
                    0, rows, F.gelu(inputs[rows] @ self.up[e]) @ self.down[e])
        back = _Exchange.apply(outputs, received)
        weighted = weights.reshape(-1)[order, None] * back
        return torch.zeros_like(x).index_add(0, token, weighted).reshape(shape)

    @staticmethod
    def received_sizes(send: list[int]) -> list[int]:
        """How many rows each process sent here, for the return trip (exchanged again)."""
        incoming = torch.empty(len(send), dtype=torch.long)
        torch.distributed.all_to_all_single(incoming, torch.tensor(send))
        return incoming.tolist()


def dispatch_bytes(rows_out: int, rows_in: int, d: int, item: int) -> int:
    """Bytes one process hands the two all-to-alls of a forward pass: ``rows_out`` (token,
    expert) pairs go to other processes, each a row of d numbers with its expert's number
    (one more column), and the outputs of the ``rows_in`` rows other processes sent here go
    back, d numbers each. (The backward pass sends as many bytes, the other way round.)"""
    return (rows_out * (d + 1) + rows_in * d) * item


def imbalance(load: torch.Tensor) -> float:
    """The busiest expert's tokens over the mean: 1 is perfectly balanced."""
    load = load.double()
    return float(load.max() / load.mean()) if load.sum() > 0 else 1.0
