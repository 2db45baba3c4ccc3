"""Tests of d2l_ext.memory_diag: offload counts, the census of saved tensors, the allocator's
statistics and snapshots (read from plain dictionaries, as a GPU returns them), and the
activations of a transformer layer under model parallelism."""

from __future__ import annotations

import matplotlib
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from d2l_ext import comm, memory, memory_diag
from d2l_ext.memory_budget import fsdp2_moments

matplotlib.use("Agg")


# ------------------------------------------------------------------------------ offload
def test_fsdp2_placement_without_offload_is_the_largest_moment():
    units = [1000.0, 3000.0, 2000.0]
    got = memory_diag.fsdp2_placement(units, 4)
    assert got.device == max(m.total for m in fsdp2_moments(units, 4))
    assert got.host == got.link == 0


def test_fsdp2_offload_by_hand_for_equal_units():
    # four units of u: backward of a middle unit holds 8u of 16-bit buffers (its weights, the
    # prefetched neighbour, its gradients, the reduce-scatter in flight) + its shard copied to
    # the device in float32 and cast to bfloat16
    u, k = 1_000_000.0, 8
    got = memory_diag.fsdp2_placement([u] * 4, k, offload=True)
    assert got.device == pytest.approx(8 * u + 6 * u / k)
    assert got.host == pytest.approx(16 * 4 * u / k)
    assert got.link == pytest.approx(12 * 4 * u / k)
    # the state left the GPU: less than without offloading by the sharded state
    plain = memory_diag.fsdp2_placement([u] * 4, k)
    assert got.device < plain.device
    with pytest.raises(ValueError):
        memory_diag.fsdp2_placement([u], 0)


def test_zero_offload_matches_the_papers_headline():
    # ZeRO-Offload: 13 billion parameters on one 32 GB V100 (2 bytes each on the GPU),
    # where 16 bytes per parameter (mixed precision, Adam) fit 1.4 billion at most
    got = memory_diag.zero_offload_placement(13e9)
    assert got.device == pytest.approx(26e9) and got.device < 32e9
    assert 16 * 13e9 > 32e9 and 16 * 1.4e9 < 32e9
    assert got.link == pytest.approx(4 * 13e9)
    assert memory_diag.zero_offload_placement(13e9, 4).host == pytest.approx(14 * 13e9 / 4)
    with pytest.raises(ValueError):
        memory_diag.zero_offload_placement(1e9, 0)


def test_census_counts_every_save_and_the_weights():
    torch.manual_seed(0)
    lin = nn.Linear(30, 20)
    x = torch.randn(8, 30)
    with memory_diag.SavedCensus(lin.parameters()) as census:
        lin(x).sum()
    # the input does not need a gradient: only the input is saved (for the weight's gradient)
    assert census.nbytes == 8 * 30 * 4 and census.parameter_nbytes == 0
    x.requires_grad_()
    with memory_diag.SavedCensus(lin.parameters()) as census:
        lin(x).sum()
    # now the weight (as a transposed view) is saved too, for the input's gradient
    assert census.parameter_nbytes == 20 * 30 * 4
    assert census.nbytes == 8 * 30 * 4 + 20 * 30 * 4


def test_census_counts_a_tensor_saved_twice_twice():
    net = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(5, 10)
    with memory_diag.SavedCensus(net.parameters()) as census:
        net(x).sum()
    # the ReLU's output is saved by the ReLU and by the next linear layer: two copies
    relu_saves = [n for n, p in census.entries if n == 5 * 16 * 4 and not p]
    assert len(relu_saves) == 2


def test_census_matches_what_a_copying_hook_allocates():
    """On a CPU-only machine save_on_cpu(pin_memory=True) copies every saved tensor and the
    originals that nothing else holds are freed: after the forward pass exactly the census's
    bytes (and the 4-byte loss) are allocated, where without it only the activations are."""
    if torch.cuda.is_available():
        pytest.skip("on a GPU machine the copies go to pinned host memory")
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                        nn.Linear(128, 10))
    X, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    with memory_diag.SavedCensus(net.parameters()) as census:
        F.cross_entropy(net(X), y)
    cpu = torch.device("cpu")
    with memory.Tracker(cpu) as copied:
        with torch.autograd.graph.save_on_cpu(pin_memory=True):
            loss = F.cross_entropy(net(X), y)
        copied.mark("forward")
    del loss
    assert copied.readings[0].allocated == census.nbytes + 4
    # the weights of the second and third layers are among the copies (the first layer's
    # input needs no gradient, so its weight is not saved)
    assert census.parameter_nbytes == (128 * 128 + 10 * 128) * 4


# ------------------------------------------------------------------ allocator diagnostics
def _stats(**overrides):
    stats = {"allocated_bytes.all.current": 600 * 2**20, "requested_bytes.all.current":
             590 * 2**20, "reserved_bytes.all.current": 1000 * 2**20,
             "inactive_split_bytes.all.current": 300 * 2**20, "segment.all.current": 12,
             "num_alloc_retries": 0, "num_ooms": 0, "allocated_bytes.large_pool.current": 1}
    stats.update(overrides)
    return stats


def test_read_allocator_picks_the_aggregate_keys():
    got = memory_diag.read_allocator(_stats())
    assert got.allocated == 600 * 2**20 and got.reserved == 1000 * 2**20
    assert got.unallocated == 400 * 2**20 and got.rounding == 10 * 2**20
    assert got.non_releasable == 300 * 2**20 and got.segments == 12
    assert got.private_pools == 0
    empty = memory_diag.read_allocator({})
    assert empty.reserved == 0 and memory_diag.diagnose(empty) == ["tensors"]


def test_private_pools_are_summed_over_pools_not_over_pool_kinds():
    stats = _stats(**{"reserved_bytes_by_private_pools.1_0.all.current": 40 * 2**20,
                      "reserved_bytes_by_private_pools.1_0.large_pool.current": 40 * 2**20,
                      "reserved_bytes_by_private_pools.2_0.all.current": 4 * 2**20,
                      "reserved_bytes_by_private_pools.2_0.all.peak": 99 * 2**20})
    assert memory_diag.read_allocator(stats).private_pools == 44 * 2**20


def test_diagnose_codes():
    assert memory_diag.diagnose(memory_diag.read_allocator(_stats())) == ["fragmented"]
    tidy = _stats(**{"inactive_split_bytes.all.current": 10 * 2**20})
    assert memory_diag.diagnose(memory_diag.read_allocator(tidy)) == ["tensors"]
    retried = _stats(num_alloc_retries=3, num_ooms=1)
    assert memory_diag.diagnose(memory_diag.read_allocator(retried))[:2] == ["retries", "ooms"]
    graphs = _stats(**{"inactive_split_bytes.all.current": 0,
                       "reserved_bytes_by_private_pools.1_0.all.current": 2**20})
    assert memory_diag.diagnose(memory_diag.read_allocator(graphs)) == ["private pools"]
    with pytest.raises(ValueError):
        memory_diag.diagnose(memory_diag.read_allocator(_stats()), fragmented=1.5)


def _snapshot():
    MiB = 2**20
    return {"segments": [
        {"address": 0x9000000, "total_size": 40 * MiB, "segment_type": "large", "blocks": [
            {"address": 0x9000000, "size": 40 * MiB, "state": "active_allocated"}]},
        {"address": 0x1000000, "total_size": 20 * MiB, "segment_type": "large", "blocks": [
            {"address": 0x1000000 + 4 * MiB, "size": 8 * MiB, "state": "active_allocated"},
            {"address": 0x1000000, "size": 4 * MiB, "state": "inactive"},
            {"address": 0x1000000 + 12 * MiB, "size": 8 * MiB, "state": "inactive"}]},
        {"address": 0x5000000, "total_size": 2 * MiB, "segment_type": "small", "blocks": [
            {"address": 0x5000000, "size": 512, "state": "active_awaiting_free"},
            {"address": 0x5000200, "size": 2 * MiB - 512, "state": "inactive"}]}],
        "device_traces": []}


def test_snapshot_segments_in_address_order_with_blocks_in_order():
    segs = memory_diag.snapshot_segments(_snapshot())
    assert [s.total // 2**20 for s in segs] == [20, 2, 40]
    first = segs[0]
    assert [state for _, state in first.blocks] == ["inactive", "active_allocated", "inactive"]
    assert first.allocated == 8 * 2**20 and first.free == 12 * 2**20
    assert not segs[1].large and segs[2].large


def test_snapshot_segments_refuses_blocks_that_do_not_add_up():
    bad = _snapshot()
    bad["segments"][0]["blocks"].pop()
    with pytest.raises(ValueError, match="add up"):
        memory_diag.snapshot_segments(bad)


def test_draw_snapshot_draws_one_bar_per_block():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    drawn = memory_diag.draw_snapshot(ax, _snapshot(), min_size=4 * 2**20)
    assert [s.total // 2**20 for s in drawn] == [20, 40]
    assert len(ax.patches) == 4  # 3 blocks + 1 block
    widths = sorted(round(p.get_width()) for p in ax.patches)
    assert widths == [4, 8, 8, 40]
    plt.close(fig)
    fig, ax = plt.subplots()
    drawn = memory_diag.draw_snapshot(ax, _snapshot(), largest=2)
    assert [s.total // 2**20 for s in drawn] == [20, 40]  # the two largest, in address order
    plt.close(fig)


# ------------------------------------------------------------ activations of parallelism
def test_transformer_layer_activations_table_2():
    s, b, h, a = 2048, 1, 12288, 96  # GPT-3 175B, one sequence
    sbh = s * b * h
    none = memory_diag.transformer_layer_activations(s, b, h, a)
    assert none == pytest.approx(sbh * (34 + 5 * a * s / h))
    tp = memory_diag.transformer_layer_activations(s, b, h, a, t=8)
    assert tp == pytest.approx(sbh * (10 + 24 / 8 + 5 * a * s / (h * 8)))
    sp = memory_diag.transformer_layer_activations(s, b, h, a, t=8, sequence_parallel=True)
    assert sp == pytest.approx(none / 8)
    sel = memory_diag.transformer_layer_activations(s, b, h, a, t=8, sequence_parallel=True,
                                                    recompute="selective")
    assert sel == pytest.approx(34 * sbh / 8)
    assert memory_diag.transformer_layer_activations(s, b, h, a, t=8,
                                                     recompute="full") == 2 * sbh
    assert none > tp > sp > sel
    with pytest.raises(ValueError):
        memory_diag.transformer_layer_activations(s, b, h, a, recompute="some")
    with pytest.raises(ValueError):
        memory_diag.transformer_layer_activations(s, b, h, a, t=0)


# ----------------------------------------------- FSDP2's CPUOffloadPolicy on gloo, for real
def test_cpu_offload_policy_trains_like_fsdp2_on_a_cpu():
    """On a CPU (gloo) CPUOffloadPolicy runs with pin_memory=False, and trains to the same
    parameters as plain FSDP2: the policy moves nothing where host and device are one
    memory."""
    if torch.cuda.is_available():
        pytest.skip("checked on CPU processes")
    from tests import offload_lab

    plain = comm.spawn(offload_lab.train, 2, False, backend="gloo")
    offloaded = comm.spawn(offload_lab.train, 2, True, backend="gloo")
    for a, b in zip(plain[0], offloaded[0]):
        assert torch.equal(a, b)
