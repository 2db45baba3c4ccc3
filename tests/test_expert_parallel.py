"""Expert parallelism by hand (d2l_ext.expert_parallel) in real gloo processes: each process's
output and gradients equal the one-process layer's on its tokens, for top-1 and top-2 routing
and 1, 2 and 4 processes; the all-to-all bytes match the formula; the load is read."""

from __future__ import annotations

import pytest
import torch

from d2l_ext import collectives, comm
from d2l_ext import expert_parallel as ep


def _compare(rank: int, world: int, experts: int, top_k: int, tokens: int):
    torch.manual_seed(0)
    d, hidden = 6, 10
    moe = ep.MoE(d, hidden, experts, top_k).double()
    x = torch.randn(world, tokens, d, dtype=torch.float64, requires_grad=True)
    moe(x).square().sum().backward()
    split = ep.ExpertParallelMoE(moe)
    mine = x[rank].detach().clone().requires_grad_()
    with collectives.counting() as traffic:
        out = split(mine)
        out.square().sum().backward()
    expected = moe(x[rank].detach())
    per = experts // world
    owners = [moe.route(x[j].detach())[0] // per for j in range(world)]
    away = int((owners[rank] != rank).sum())  # my (token, expert) pairs held elsewhere
    arriving = sum(int((owners[j] == rank).sum()) for j in range(world) if j != rank)
    mine_experts = slice(rank * per, (rank + 1) * per)
    return {"output": (out - expected).abs().max().item(),
            "input grad": (mine.grad - x.grad[rank]).abs().max().item(),
            "expert grads": max((split.up.grad - moe.up.grad[mine_experts]).abs().max().item(),
                                (split.down.grad - moe.down.grad[mine_experts]).abs().max().item()),
            "bytes": traffic.payload.get("all_to_all", 0),
            "expected bytes": (ep.dispatch_bytes(away, arriving, d, 8)  # forward
                               + ep.dispatch_bytes(arriving, away, d, 8)),  # backward
            "calls": traffic.calls.get("all_to_all", 0),
            "load": split.load.tolist(),
            "router grad": split.router.weight.grad.clone(),
            "whole router grad": moe.router.weight.grad.clone()}


@pytest.mark.parametrize("world, experts, top_k, tokens",
                         [(1, 3, 2, 5), (2, 4, 1, 7), (2, 4, 2, 6), (4, 8, 2, 9)])
def test_the_split_layer_equals_the_whole_layer(world, experts, top_k, tokens):
    results = comm.spawn(_compare, world, experts, top_k, tokens, backend="gloo", threads=1)
    for r in results:
        assert max(r["output"], r["input grad"], r["expert grads"]) < 1e-12
        assert r["calls"] == 4  # there and back, forward and backward
        assert r["bytes"] == r["expected bytes"]
    # each process's router learns from its own tokens: the sum is the whole router's gradient
    summed = sum(r["router grad"] for r in results)
    assert torch.allclose(summed, results[0]["whole router grad"], atol=1e-12)
    assert sum(sum(r["load"]) for r in results) == world * tokens * top_k


def test_imbalance_and_bad_sizes():
    with pytest.raises(ValueError, match="top_k must be between 1 and the experts"):
        ep.MoE(4, 8, 2, top_k=3)
    assert ep.dispatch_bytes(3, 2, 4, 2) == (3 + 2) * 4 * 2


def _idle_experts(rank: int, world: int):
    """Every token routed to experts 0 and 1 (process 0's): process 1's experts get no rows."""
    torch.manual_seed(0)
    moe = ep.MoE(4, 6, 4, top_k=2).double()
    with torch.no_grad():
        moe.router.weight.zero_()
        moe.router.weight[2:] = -1.0  # negative scores for positive tokens
    x = torch.rand(world, 5, 4, dtype=torch.float64, requires_grad=True)
    moe(x).square().sum().backward()
    split = ep.ExpertParallelMoE(moe)
    mine = x[rank].detach().clone().requires_grad_()
    split(mine).square().sum().backward()
    return (split.load.tolist(), (mine.grad - x.grad[rank]).abs().max().item(),
            (split.up.grad - moe.up.grad[2 * rank:2 * rank + 2]).abs().max().item())


def test_a_process_whose_experts_get_no_rows_still_joins_the_backward_exchanges():
    results = comm.spawn(_idle_experts, 2, backend="gloo", threads=1, timeout=60)
    assert results[1][0] == [0, 0]
    for _, input_error, expert_error in results:
        assert input_error < 1e-12 and expert_error < 1e-12
