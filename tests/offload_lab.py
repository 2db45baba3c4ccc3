"""Run in each process of tests/test_memory_diag.py's FSDP2 CPUOffloadPolicy test (spawned
processes must import their function from a module)."""

from __future__ import annotations

import torch
from torch import nn


def train(rank: int, world_size: int, offload: bool) -> list[torch.Tensor]:
    """Two Adam steps of a small MLP under FSDP2, with ``CPUOffloadPolicy(pin_memory=False)``
    if ``offload``; return the full parameters afterwards."""
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

    policy = CPUOffloadPolicy(pin_memory=False) if offload else OffloadPolicy()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    for layer in net:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, offload_policy=policy)
    fully_shard(net, offload_policy=policy)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    torch.manual_seed(1 + rank)
    for _ in range(2):
        net(torch.randn(8, 32)).square().mean().backward()
        opt.step()
        opt.zero_grad()
    return [p.full_tensor().detach().clone() for p in net.parameters()]
