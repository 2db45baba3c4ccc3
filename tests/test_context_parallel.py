"""Ring attention by hand (d2l_ext.context_parallel) in real gloo processes: each process's
output equals its rows of full attention, causal or not, contiguous or zigzag, for 1–4
processes and odd sizes; it sends its keys-and-values shard k − 1 times, as the formula
counts; the scores it computes are those of the chunks the causal mask leaves."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from d2l_ext import collectives, comm
from d2l_ext import context_parallel as cp


def _positions(rank: int, world: int, seq: int, layout: str) -> torch.Tensor:
    return torch.tensor(cp.ring_positions(rank, world, seq, layout))


def _ring(rank: int, world: int, shape: tuple[int, int, int, int], causal: bool, layout: str):
    torch.manual_seed(0)
    q, k, v = (torch.randn(shape, dtype=torch.float64) for _ in range(3))
    full = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    mine = _positions(rank, world, shape[2], layout)
    work = cp.Work()
    with collectives.counting() as traffic:
        out = cp.ring_attention(q[:, :, mine], k[:, :, mine], v[:, :, mine], causal, layout,
                                work=work)
    return ((out - full[:, :, mine]).abs().max().item(), dict(traffic.calls),
            dict(traffic.payload), work.scores, work.blocks)


@pytest.mark.parametrize("world, shape", [(1, (1, 2, 6, 4)), (2, (2, 3, 8, 5)),
                                          (3, (1, 2, 12, 8)), (4, (2, 1, 16, 3))])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_ring_attention_equals_full_attention(world, shape, causal, layout):
    results = comm.spawn(_ring, world, shape, causal, layout, backend="gloo", threads=1)
    b, h, s, d = shape
    expected = cp.ring_attention_bytes(b, h, s, d, 8, world)
    chunks = world * len(cp.ring_chunks(0, world, layout))
    n = s // chunks
    for rank, (error, calls, payload, scores, blocks) in enumerate(results):
        assert error < 1e-12
        assert calls == ({"send": expected["sends"]} if world > 1 else {})
        assert payload.get("send", 0) == expected["total"]
        mine = cp.ring_chunks(rank, world, layout)
        visible = sum(1 for qc in mine for kc in range(chunks) if not causal or kc <= qc)
        assert blocks == visible
        assert scores == visible * b * h * n * n
    if causal and world > 1:  # contiguous: the last process works most; zigzag: all alike
        work = [r[3] for r in results]
        assert (work[-1] > work[0]) if layout == "contiguous" else len(set(work)) == 1


def test_chunks_cover_the_sequence_once():
    for world in (1, 2, 3, 5):
        for layout, per in (("contiguous", 1), ("zigzag", 2)):
            held = sorted(c for r in range(world) for c in cp.ring_chunks(r, world, layout))
            assert held == list(range(per * world))
    assert cp.ring_chunks(1, 4, "zigzag") == [1, 6]
    assert cp.ring_positions(1, 2, 8, "zigzag") == [2, 3, 4, 5]
    assert cp.ring_positions(0, 2, 8, "zigzag") == [0, 1, 6, 7]
    assert cp.ring_positions(1, 2, 6) == [3, 4, 5]
    with pytest.raises(ValueError, match="4 equal chunks; 6 tokens"):
        cp.ring_positions(0, 2, 6, "zigzag")
    with pytest.raises(ValueError, match="layout is one of contiguous, zigzag"):
        cp.ring_chunks(0, 2, "striped")
    with pytest.raises(ValueError, match="rank must be between 0 and 1"):
        cp.ring_chunks(2, 2)


def _odd_zigzag(rank: int, world: int):
    try:
        cp.ring_attention(*(torch.zeros(1, 1, 3, 4) for _ in range(3)), layout="zigzag")
    except ValueError as error:
        return str(error)
    return None


def test_zigzag_needs_two_equal_chunks():
    assert "do not divide that way" in comm.spawn(_odd_zigzag, 2, backend="gloo", threads=1)[0]


def _refusals(rank: int, world: int):
    said = []
    for q in (torch.zeros(1, 1, 4, 2, requires_grad=True), torch.zeros(1, 1, 0, 2)):
        try:
            cp.ring_attention(q, q.detach(), q.detach())
        except ValueError as error:
            said.append(str(error))
    return said


def test_the_ring_refuses_gradients_and_empty_shards():
    said = comm.spawn(_refusals, 2, backend="gloo", threads=1)[0]
    assert "forward pass only" in said[0] and "non-zero length" in said[1]


def _bfloat16(rank: int, world: int, seed: int):
    torch.manual_seed(seed)
    q, k, v = (torch.randn(1, 2, 64, 16, dtype=torch.float64) for _ in range(3))
    mine = _positions(rank, world, 64, "zigzag")
    rounded = [t.to(torch.bfloat16).double() for t in (q, k, v)]  # the inputs' own rounding
    full = F.scaled_dot_product_attention(*rounded, is_causal=True)
    half = [t[:, :, mine].to(torch.bfloat16) for t in (q, k, v)]
    out = cp.ring_attention(*half, layout="zigzag")
    want = full[:, :, mine]
    # correctly rounded to bfloat16 (8 significant bits) is within 2^-8 of the value, relative
    return out.dtype, ((out.double() - want).abs() / (want.abs() + 1e-4)).max().item() * 2**8


@pytest.mark.parametrize("seed", [0, 1, 3, 8])
def test_bfloat16_inputs_keep_a_float32_softmax(seed):
    for dtype, error in comm.spawn(_bfloat16, 4, seed, backend="gloo", threads=1):
        assert dtype == torch.bfloat16
        assert error <= 1.0  # a running softmax kept in bfloat16 errs by more


def test_the_formula_needs_whole_shards():
    # keys and values: 2 × (1 batch × 2 heads × 8/4 rows × 4 features) × 2 bytes = 64
    assert cp.ring_attention_bytes(1, 2, 8, 4, 2, 4) == {"sends": 3, "per_send": 64,
                                                           "total": 192}
    with pytest.raises(ValueError, match="divide evenly among 3"):
        cp.ring_attention_bytes(1, 2, 8, 4, 2, 3)


def _mismatched(rank: int, world: int):
    try:
        cp.ring_attention(torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 3, 4), torch.zeros(1, 1, 3, 4))
    except ValueError as error:
        return str(error)
    return None


def test_shards_of_different_shapes_are_refused():
    assert "one shape per process" in comm.spawn(_mismatched, 2, backend="gloo", threads=1)[0]


def _exchange(rank: int, world: int):
    from d2l_ext import collectives
    t = torch.arange(6.0).reshape(2, 3).t() + 10 * rank  # not contiguous
    got = collectives.send_receive(t, to=(rank + 1) % world, source=(rank - 1) % world)
    return got.tolist()


@pytest.mark.parametrize("world", [1, 2, 3])
def test_a_ring_step_takes_any_layout_and_a_ring_of_one(world):
    for rank, got in enumerate(comm.spawn(_exchange, world, backend="gloo", threads=1)):
        source = (rank - 1) % world
        assert got == (torch.arange(6.0).reshape(2, 3).t() + 10 * source).tolist()
