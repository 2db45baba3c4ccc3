"""A mixture-of-experts layer, whole in one process and split by experts across processes.

:class:`MoE` routes each token to its ``top_k`` experts (small MLPs) by a learned router and
sums their outputs weighted by the router's softmax over those ``top_k``.
:class:`ExpertParallelMoE` holds ``experts / k`` of them in each of the ``k`` processes: each
process routes its own tokens, tells every process how many rows it will send to each of
its experts, sends every (token, expert) row to the process that holds the expert with an
all-to-all, runs its experts on what arrives, and returns the results with a second
all-to-all. Both all-to-alls are differentiable (the backward pass runs them the other way)
and counted (:mod:`d2l_ext.collectives`), so a page can check the bytes against
:func:`~d2l_ext.split_bytes.dispatch_bytes` and read the load of each expert.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from d2l_ext.collectives import all_to_all, rank_and_size
from d2l_ext.split_bytes import dispatch_bytes

__all__ = ["MoE", "ExpertParallelMoE", "dispatch_bytes"]


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
        self.load: torch.Tensor | None = None  # rows per local expert, last call

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, size = rank_and_size()
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        scores, chosen = self.router(x).topk(self.top_k, dim=-1)
        weights = scores.softmax(dim=-1)
        flat = chosen.reshape(-1)  # one entry per (token, slot)
        order = flat.argsort(stable=True)  # grouped by expert, so by process
        token = order // self.top_k
        counts = torch.bincount(flat, minlength=self.local * size)  # rows for each expert
        incoming = torch.empty_like(counts)  # rows for each of my experts, from each process
        dist.all_to_all_single(incoming, counts)
        incoming = incoming.view(size, self.local)
        arrived = _Exchange.apply(x[token], counts.view(size, self.local).sum(1).tolist())
        # rows arrive by process, each process's grouped by expert: which expert each is for
        expert = torch.arange(self.local, device=x.device).repeat(size).repeat_interleave(
            incoming.reshape(-1))
        self.load = incoming.sum(0)
        outputs = torch.zeros_like(arrived)
        for e in range(self.local):  # every expert runs, on no rows too: the backward pass
            rows = (expert == e).nonzero(as_tuple=True)[0]  # must reach both exchanges
            outputs = outputs.index_copy(
                0, rows, F.gelu(arrived[rows] @ self.up[e]) @ self.down[e])
        back = _Exchange.apply(outputs, incoming.sum(1).tolist())
        weighted = weights.reshape(-1)[order, None] * back
        return torch.zeros_like(x).index_add(0, token, weighted).reshape(shape)
