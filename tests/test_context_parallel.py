"""Ring attention by hand (d2l_ext.context_parallel) in real gloo processes: each process's
output equals its rows of full attention, causal or not, for 1–4 processes and odd sizes; it
sends its keys-and-values shard k − 1 times, as the formula counts."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from d2l_ext import collectives, comm
from d2l_ext import context_parallel as cp


def _ring(rank: int, world: int, shape: tuple[int, int, int, int], causal: bool):
    torch.manual_seed(0)
    q, k, v = (torch.randn(shape, dtype=torch.float64) for _ in range(3))
    full = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    rows = shape[2] // world
    mine = slice(rank * rows, (rank + 1) * rows)
    with collectives.counting() as traffic:
        out = cp.ring_attention(q[:, :, mine], k[:, :, mine], v[:, :, mine], causal)
    return (out - full[:, :, mine]).abs().max().item(), dict(traffic.calls), dict(traffic.payload)


@pytest.mark.parametrize("world, shape", [(1, (1, 2, 6, 4)), (2, (2, 3, 8, 5)),
                                          (3, (1, 2, 9, 8)), (4, (2, 1, 12, 3))])
@pytest.mark.parametrize("causal", [True, False])
def test_ring_attention_equals_full_attention(world, shape, causal):
    results = comm.spawn(_ring, world, shape, causal, backend="gloo", threads=1)
    b, h, s, d = shape
    expected = cp.ring_bytes_per_process(b, h, s, d, 8, world)
    for error, calls, payload in results:
        assert error < 1e-12
        assert calls == ({"send": expected["sends"]} if world > 1 else {})
        assert payload.get("send", 0) == expected["total"]


def test_the_formula_needs_whole_shards():
    # keys and values: 2 × (1 batch × 2 heads × 8/4 rows × 4 features) × 2 bytes = 64
    assert cp.ring_bytes_per_process(1, 2, 8, 4, 2, 4) == {"sends": 3, "per_send": 64,
                                                           "total": 192}
    with pytest.raises(ValueError, match="divide evenly among 3"):
        cp.ring_bytes_per_process(1, 2, 8, 4, 2, 3)


def _mismatched(rank: int, world: int):
    try:
        cp.ring_attention(torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 3, 4), torch.zeros(1, 1, 3, 4))
    except ValueError as error:
        return str(error)
    return None


def test_shards_of_different_shapes_are_refused():
    assert "one shape per process" in comm.spawn(_mismatched, 2, backend="gloo", threads=1)[0]
