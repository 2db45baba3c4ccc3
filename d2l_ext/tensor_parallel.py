"""Tensor parallelism by hand, as Megatron-LM does it, for the ``k`` processes of one
``torch.distributed`` group: each process holds 1/k of every weight matrix of a block.

A linear layer split by *columns* (its outputs) needs the whole input and gives each process
a slice of the output; one split by *rows* (its inputs) takes that slice and gives each
process a partial sum of the whole output, which an all-reduce completes. An MLP is a column
split, then a row split: one all-reduce in the forward pass, and one in the backward pass
(for the gradient of the input, which every process computed a part of). Attention splits the
same way by heads. The all-reduces are counted (:func:`d2l_ext.collectives.counting`), so a
page can check them against :func:`block_all_reduce_bytes`.

The layers are built from the one-process layers of :mod:`d2l_ext.transformer` (their
weights sliced, not re-initialised), so that the split block can be checked equal to the
whole one. Dropout is not split: build the one-process block with ``dropout=0``.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from d2l_ext import transformer
from d2l_ext.collectives import (
    all_gather,
    all_reduce,
    counting,
    rank_and_size,
    reduce_scatter,
)
from d2l_ext.split_bytes import block_all_reduce_bytes, block_sequence_bytes

__all__ = ["ColumnParallelLinear", "RowParallelLinear", "ParallelMLP", "ParallelAttention",
           "ParallelBlock", "block_all_reduce_bytes", "block_sequence_bytes", "counting"]


class _CopyIn(torch.autograd.Function):
    """Identity forward; the backward sums the input's gradient over the processes (each
    computed the part that flows back through its slice of the weights)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return all_reduce(grad.contiguous().clone())


class _SumOut(torch.autograd.Function):
    """Sum the partial outputs over the processes; the backward passes the gradient on (each
    process's partial sum contributed to the whole output with weight 1)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return all_reduce(x.contiguous().clone())

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad


class _GatherSequence(torch.autograd.Function):
    """Sequence parallelism's entry: all-gather the sequence shards (dimension 1); the
    backward reduce-scatters the gradient, each process keeping its shard's sum."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return all_gather(x, dim=1)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return reduce_scatter(grad, dim=1)


class _ScatterSequence(torch.autograd.Function):
    """Sequence parallelism's exit: reduce-scatter the partial outputs along the sequence,
    in place of the all-reduce; the backward all-gathers the gradient."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return reduce_scatter(x, dim=1)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return all_gather(grad, dim=1)


class _GatheringLinear(torch.autograd.Function):
    """A column-split layer on a sequence shard that keeps only the shard for the backward
    pass (Megatron-LM's sequence parallelism): the forward pass all-gathers the sequence and
    multiplies; the backward pass all-gathers it again for the weight's gradient and
    reduce-scatters the input's gradient."""

    @staticmethod
    def forward(ctx, shard: torch.Tensor, weight: torch.Tensor,
                bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(shard, weight)
        ctx.has_bias = bias is not None
        return F.linear(all_gather(shard, dim=1), weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        shard, weight = ctx.saved_tensors
        whole = all_gather(shard, dim=1).to(grad.dtype)  # gathered again: it was not kept
        rows = grad.flatten(0, -2)  # under autocast the forward pass ran in a lower precision
        grad_weight = (rows.t() @ whole.flatten(0, -2)).to(weight.dtype)
        grad_bias = rows.sum(0).to(weight.dtype) if ctx.has_bias else None
        grad_shard = reduce_scatter(grad @ weight.to(grad.dtype), dim=1).to(shard.dtype)
        return grad_shard, grad_weight, grad_bias


def _slice(size: int, world: int, rank: int, what: str) -> slice:
    if size % world:
        raise ValueError(f"{what} ({size}) must divide evenly among {world} processes")
    part = size // world
    return slice(rank * part, (rank + 1) * part)


class ColumnParallelLinear(nn.Module):
    """This process's columns (outputs) of ``full``; ``parts`` > 1 splits each of ``parts``
    equal blocks of outputs separately (q, k and v of a fused projection)."""

    def __init__(self, full: nn.Linear, parts: int = 1, sequence: bool = False,
                 regather: bool = False) -> None:
        super().__init__()
        self.sequence = sequence  # the input arrives whole, gathered by the caller
        self.regather = regather  # the input arrives as a shard, gathered here twice
        rank, world = rank_and_size()
        blocks = full.weight.shape[0] // parts
        rows = _slice(blocks, world, rank, "the outputs of each part")
        weight = torch.cat([w[rows] for w in full.weight.detach().split(blocks)])
        self.weight = nn.Parameter(weight.clone())
        self.bias = (None if full.bias is None else nn.Parameter(
            torch.cat([b[rows] for b in full.bias.detach().split(blocks)]).clone()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.regather:
            return _GatheringLinear.apply(x, self.weight, self.bias)
        return F.linear(x if self.sequence else _CopyIn.apply(x), self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """This process's rows (inputs) of ``full``: it takes its slice of the input, and the
    all-reduce of the partial products gives every process the whole output; the bias is
    added once, after the sum."""

    def __init__(self, full: nn.Linear, sequence: bool = False) -> None:
        super().__init__()
        self.sequence = sequence  # reduce-scatter along the sequence instead of all-reduce
        rank, world = rank_and_size()
        cols = _slice(full.weight.shape[1], world, rank, "the inputs")
        self.weight = nn.Parameter(full.weight.detach()[:, cols].clone())
        self.bias = None if full.bias is None else nn.Parameter(full.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight)
        y = _ScatterSequence.apply(y) if self.sequence else _SumOut.apply(y)
        return y if self.bias is None else y + self.bias


class ParallelMLP(nn.Module):
    """The MLP with its first layer split by columns and its second by rows."""

    def __init__(self, mlp: transformer.MLP, sequence: bool = False,
                 regather: bool = False) -> None:
        super().__init__()
        self.fc = ColumnParallelLinear(mlp.fc, sequence=sequence, regather=regather)
        self.proj = RowParallelLinear(mlp.proj, sequence=sequence)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))


class ParallelAttention(nn.Module):
    """Causal self-attention with this process's heads: q, k and v split by columns (per
    head), the output projection by rows."""

    def __init__(self, attn: transformer.CausalSelfAttention, sequence: bool = False,
                 regather: bool = False) -> None:
        super().__init__()
        _, world = rank_and_size()
        if attn.heads % world:
            raise ValueError(f"the heads ({attn.heads}) must divide evenly among {world} "
                             "processes")
        self.heads, self.how = attn.heads // world, attn.how
        self.qkv = ColumnParallelLinear(attn.qkv, parts=3, sequence=sequence, regather=regather)
        self.proj = RowParallelLinear(attn.proj, sequence=sequence)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        width = self.qkv.weight.shape[0] // 3  # this process's heads × head size
        qkv = self.qkv(x)
        s = qkv.shape[1]  # the whole sequence, also when x is a shard (regather)
        q, k, v = (t.view(b, s, self.heads, width // self.heads).transpose(1, 2)
                   for t in qkv.split(width, dim=-1))
        y = transformer.attention(q, k, v, self.how).transpose(1, 2).reshape(b, s, width)
        return self.proj(y)


class ParallelBlock(nn.Module):
    """A pre-norm block with split attention and MLP; the LayerNorms are whole on every
    process (their gradients come out equal everywhere).

    With ``sequence`` (sequence parallelism, Korthikanti et al., 2022), the block takes and
    returns this process's shard of the sequence: the LayerNorms and the residual additions
    run on the shard, an all-gather assembles the sequence before attention and the MLP, and
    a reduce-scatter, in place of the all-reduce, returns each process its shard of their
    outputs. The gradients of the LayerNorms and of the two projections' biases are then
    partial: sum them over the processes.

    With ``regather`` as well, the two column-split layers keep only the shard of their input
    for the backward pass and all-gather it again there (Megatron-LM's choice: one more
    all-gather per layer for the memory of the gathered inputs)."""

    def __init__(self, block: transformer.Block, sequence: bool = False,
                 regather: bool = False) -> None:
        super().__init__()
        if block.attn.dropout.p or block.mlp.dropout.p:
            raise ValueError("the split layers leave out dropout: build the block with "
                             "dropout=0 (GPTConfig(dropout=0.0))")
        if regather and not sequence:
            raise ValueError("regather applies to sequence parallelism: pass sequence=True")
        self.sequence, self.regather = sequence, regather
        self.ln1, self.ln2 = (_copy_norm(block.ln1), _copy_norm(block.ln2))
        self.attn = ParallelAttention(block.attn, sequence, regather)
        self.mlp = ParallelMLP(block.mlp, sequence, regather)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self._gather(self.ln1(x)))
        return x + self.mlp(self._gather(self.ln2(x)))

    def _gather(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_autocast_enabled(x.device.type):  # send and keep what the layers compute in
            x = x.to(torch.get_autocast_dtype(x.device.type))
        if self.sequence and not self.regather:
            return _GatherSequence.apply(x)
        return x  # whole already, or gathered inside the column-split layers


def _copy_norm(norm: nn.LayerNorm) -> nn.LayerNorm:
    return copy.deepcopy(norm)  # on the block's device, in its type
