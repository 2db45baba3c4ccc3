"""Tensor parallelism by hand (d2l_ext.tensor_parallel), run in real gloo processes: the split
block equals the one-process block (output, input gradient, every parameter's gradient as the
matching slice), with 1, 2 and 4 processes and odd widths; the all-reduces it runs are the ones
the formula counts; bad splits are refused with what to do."""

from __future__ import annotations

import pytest
import torch

from d2l_ext import comm, transformer
from d2l_ext import tensor_parallel as tp
from d2l_ext.gpt_counts import GPTConfig


def _compare(rank: int, world: int, d: int, heads: int, batch: int, seq: int, how: str):
    """The split block against the whole one on the same input; the largest differences."""
    torch.manual_seed(0)
    cfg = GPTConfig(d=d, heads=heads, seq=seq)
    block = transformer.Block(cfg, how)
    x = torch.randn(batch, seq, d, requires_grad=True)
    block(x).square().sum().backward()
    split = tp.ParallelBlock(block)
    mine = x.detach().clone().requires_grad_()
    with tp.counting() as traffic:
        out = split(mine)
        out.square().sum().backward()
    diffs = {"output": (out - block(x)).abs().max().item(),
             "input grad": (mine.grad - x.grad).abs().max().item()}
    part = d // world
    whole = dict(block.named_parameters())
    for name, p in split.named_parameters():
        ref = whole[name].grad
        if name in ("attn.qkv.weight", "attn.qkv.bias"):
            ref = torch.cat([r[rank * part:(rank + 1) * part] for r in ref.split(d)])
        elif name in ("mlp.fc.weight", "mlp.fc.bias"):
            ref = ref[rank * 4 * part:(rank + 1) * 4 * part]
        elif name in ("attn.proj.weight",):
            ref = ref[:, rank * part:(rank + 1) * part]
        elif name == "mlp.proj.weight":
            ref = ref[:, rank * 4 * part:(rank + 1) * 4 * part]
        assert p.grad.shape == ref.shape, name
        diffs[name] = (p.grad - ref).abs().max().item()
    return diffs, dict(traffic.calls), dict(traffic.payload)


@pytest.mark.parametrize("world, d, heads, batch, seq, how", [
    (2, 32, 4, 2, 8, "sdpa"), (4, 24, 4, 3, 5, "naive"), (1, 16, 2, 1, 4, "sdpa")])
def test_the_split_block_equals_the_whole_block(world, d, heads, batch, seq, how):
    results = comm.spawn(_compare, world, d, heads, batch, seq, how, backend="gloo",
                         threads=1, timeout=120)
    expected = tp.block_all_reduce_bytes(batch, seq, d, 4, world)
    for diffs, calls, payload in results:
        worst = max(diffs, key=diffs.get)
        assert diffs[worst] < 1e-4, (worst, diffs[worst])
        assert calls == {"all_reduce": expected["calls"]}
        assert payload == {"all_reduce": expected["payload"]}


def test_the_formula_counts_forward_and_backward_all_reduces():
    both = tp.block_all_reduce_bytes(2, 8, 32, 4, 2)
    assert both == {"calls": 4, "payload": 4 * 2 * 8 * 32 * 4,
                    "sent_per_process": 4 * 2 * 8 * 32 * 4}  # 2(k − 1)/k = 1 for k = 2
    forward = tp.block_all_reduce_bytes(2, 8, 32, 2, 4, backward=False)
    assert forward["calls"] == 2 and forward["sent_per_process"] == 3 * forward["payload"] // 2


def _refuse(rank: int, world: int) -> list[str]:
    """The errors of three splits that do not divide among the processes."""
    makers = [lambda: tp.ParallelBlock(transformer.Block(GPTConfig(d=12, heads=3, seq=4))),
              lambda: tp.ColumnParallelLinear(torch.nn.Linear(4, 6)),
              lambda: tp.RowParallelLinear(torch.nn.Linear(6, 4))]
    errors = []
    for make in makers:
        try:
            make()
        except ValueError as error:
            errors.append(str(error))
    return errors


def test_splits_that_do_not_divide_are_refused():
    errors = comm.spawn(_refuse, 4, backend="gloo", threads=1)[0]
    assert errors == ["the heads (3) must divide evenly among 4 processes",
                      "the outputs of each part (6) must divide evenly among 4 processes",
                      "the inputs (6) must divide evenly among 4 processes"]


def test_outside_a_process_group_it_says_how_to_start_one():
    with pytest.raises(RuntimeError, match="comm.spawn"):
        tp.ColumnParallelLinear(torch.nn.Linear(4, 4))


def _compare_sequence(rank: int, world: int, d: int, heads: int, batch: int, seq: int,
                      regather: bool = False):
    """The sequence-parallel block on this process's shard against the whole block."""
    torch.manual_seed(0)
    block = transformer.Block(GPTConfig(d=d, heads=heads, seq=seq), "sdpa")
    x = torch.randn(batch, seq, d, requires_grad=True)
    full = block(x)
    full.square().sum().backward()
    split = tp.ParallelBlock(block, sequence=True, regather=regather)
    rows = slice(rank * seq // world, (rank + 1) * seq // world)
    mine = x[:, rows].detach().clone().requires_grad_()
    with tp.counting() as traffic:
        out = split(mine)
        out.square().sum().backward()
    partial = {n: p.grad.clone() for n, p in split.named_parameters()
               if n.startswith(("ln", "attn.proj.bias", "mlp.proj.bias"))}
    whole = {n: p.grad.clone() for n, p in block.named_parameters() if n in partial}
    return ((out - full[:, rows]).abs().max().item(),
            (mine.grad - x.grad[:, rows]).abs().max().item(),
            (split.mlp.fc.weight.grad - block.mlp.fc.weight.grad[
                rank * 4 * d // world:(rank + 1) * 4 * d // world]).abs().max().item(),
            partial, whole, dict(traffic.calls), dict(traffic.payload))


@pytest.mark.parametrize("world, d, heads, batch, seq, regather", [
    (2, 32, 4, 2, 8, False), (4, 16, 4, 1, 12, False), (2, 32, 4, 2, 8, True),
    (4, 16, 4, 1, 12, True)])
def test_the_sequence_parallel_block_equals_the_whole_block(world, d, heads, batch, seq,
                                                             regather):
    results = comm.spawn(_compare_sequence, world, d, heads, batch, seq, regather,
                         backend="gloo", threads=1)
    expected = tp.block_sequence_bytes(batch, seq, d, 4, world, regather=regather)
    for out, grad, fc, _, _, calls, payload in results:
        assert max(out, grad, fc) < 1e-4
        assert calls == {"all_gather": expected["all_gather_calls"],
                         "reduce_scatter": expected["reduce_scatter_calls"]}
        assert payload == {"all_gather": expected["all_gather"],
                           "reduce_scatter": expected["reduce_scatter"]}
    whole = results[0][4]
    for name, reference in whole.items():  # LayerNorms and row biases: one part per shard
        summed = sum(r[3][name] for r in results)
        assert torch.allclose(summed, reference, atol=1e-4), name


def test_sequence_parallel_bytes_equal_an_all_reduce_on_a_ring():
    """All-gather + reduce-scatter send what the all-reduce they replace sends."""
    for world in (2, 4, 8):
        sp = tp.block_sequence_bytes(2, 16, 32, 2, world)
        tp_bytes = tp.block_all_reduce_bytes(2, 16, 32, 2, world)
        assert sp["sent_per_process"] == tp_bytes["sent_per_process"]
    with pytest.raises(ValueError, match="divide evenly among 3"):
        tp.block_sequence_bytes(1, 8, 4, 2, 3)
    again = tp.block_sequence_bytes(2, 16, 32, 2, 4, regather=True)
    assert again["all_gather_calls"] == 6 and again["reduce_scatter_calls"] == 4
    once = tp.block_sequence_bytes(2, 16, 32, 2, 4)["sent_per_process"]
    assert again["sent_per_process"] == once * 5 // 4  # 10 collectives of equal cost, not 8


def test_ring_bytes_per_collective():
    from d2l_ext import collectives

    assert collectives.ring_bytes("all_reduce", 1000, 4) == 1500  # 2(k − 1)/k
    assert collectives.ring_bytes("reduce_scatter", 1000, 4) == 750  # (k − 1)/k
    assert collectives.ring_bytes("all_gather", 250, 4) == 750  # (k − 1) shards
    assert collectives.ring_bytes("all_reduce", 1000, 1) == 0
    with pytest.raises(ValueError, match="kind is one of"):
        collectives.ring_bytes("broadcast", 1000, 4)


def _kept(rank: int, world: int, d: int, heads: int, batch: int, seq: int, sequence: bool,
          regather: bool):
    """What one process of the split block keeps for its backward pass, by term."""
    torch.manual_seed(0)
    split = tp.ParallelBlock(transformer.Block(GPTConfig(d=d, heads=heads, seq=seq), "naive"),
                             sequence, regather)
    x = torch.randn(batch, seq // world if sequence else seq, d, requires_grad=True)
    return transformer.saved_terms(transformer.saved_by_node(split(x), exclude=[split]))


@pytest.mark.parametrize("sequence, regather", [(False, False), (True, False), (True, True)])
def test_each_process_keeps_its_share_of_the_activations(sequence, regather):
    """Per process, in float32: the LayerNorm inputs whole under tensor parallelism and 1/k
    under sequence parallelism; the inputs of the column-split layers whole (gathered) unless
    re-gathered, those of the row-split layers 1/k; Q, K, V, the GELU input and the scores
    1/k."""
    k, d, heads, b, s = 2, 32, 4, 2, 8
    kept = comm.spawn(_kept, k, d, heads, b, s, sequence, regather, backend="gloo",
                      threads=1)[0]
    sbh = s * b * d * 4
    assert kept["LayerNorm inputs"] == 2 * sbh // (k if sequence else 1)
    column_inputs = 2 * sbh // (k if regather else 1)  # qkv's and fc's
    assert kept["linear-layer inputs"] == column_inputs + 5 * sbh // k  # proj's and out's
    assert kept["Q, K and V"] == 3 * sbh // k
    assert kept["GELU input"] == 4 * sbh // k
    assert kept["softmax output"] == heads * s * s * b * 4 // k
    assert kept["weight copies (autocast)"] == 0  # bias-less products save their input


def _copied_norms(rank: int, world: int):
    block = transformer.Block(GPTConfig(d=8, heads=2, seq=4)).to(torch.float64)
    split = tp.ParallelBlock(block)
    x = torch.randn(1, 4, 8, dtype=torch.float64)
    return split.ln1.weight.dtype, (split(x) - block(x)).abs().max().item()


def test_the_split_block_keeps_the_block_s_type_and_device():
    """The LayerNorms are copied in the block's type (and on its device)."""
    dtype, diff = comm.spawn(_copied_norms, 2, backend="gloo", threads=1)[0]
    assert dtype == torch.float64 and diff < 1e-12


def _under_autocast(rank: int, world: int):
    torch.manual_seed(0)
    block = transformer.Block(GPTConfig(d=16, heads=4, seq=8), "naive")
    x = torch.randn(2, 8, 16, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        block(x).float().square().sum().backward()
    split = tp.ParallelBlock(block, sequence=True, regather=True)
    mine = x.detach()[:, rank * 4:(rank + 1) * 4].clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        split(mine).float().square().sum().backward()
    return ((mine.grad - x.grad[:, rank * 4:(rank + 1) * 4]).abs().max().item()
            / x.grad.abs().max().item(), mine.grad.dtype, split.mlp.fc.weight.grad.dtype)


def test_the_re_gathering_layer_runs_under_autocast():
    """bfloat16 autocast: the gradients come back in the types of what they belong to."""
    error, grad_type, weight_grad_type = comm.spawn(_under_autocast, 2, backend="gloo",
                                                    threads=1)[0]
    assert error < 0.05 and grad_type == weight_grad_type == torch.float32


def test_a_block_with_dropout_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match="dropout=0"):
        tp.ParallelBlock(transformer.Block(GPTConfig(d=8, heads=2, seq=4, dropout=0.1)))


def _bytes_under_autocast(rank: int, world: int, sequence: bool, regather: bool):
    torch.manual_seed(0)
    split = tp.ParallelBlock(transformer.Block(GPTConfig(d=16, heads=4, seq=8), "naive"),
                             sequence, regather)
    x = torch.randn(2, 4 if sequence else 8, 16, requires_grad=True)
    with tp.counting() as traffic, torch.autocast("cpu", dtype=torch.bfloat16):
        split(x).float().square().sum().backward()
    return dict(traffic.payload)


@pytest.mark.parametrize("sequence, regather", [(False, False), (True, False), (True, True)])
def test_under_autocast_the_collectives_carry_16_bit_activations(sequence, regather):
    """The LayerNorm's float32 output is cast before it is sent: the payloads are those of
    2-byte elements."""
    payload = comm.spawn(_bytes_under_autocast, 2, sequence, regather, backend="gloo",
                         threads=1)[0]
    if sequence:
        expected = tp.block_sequence_bytes(2, 8, 16, 2, 2, regather=regather)
        assert payload == {"all_gather": expected["all_gather"],
                           "reduce_scatter": expected["reduce_scatter"]}
    else:
        assert payload == {"all_reduce": tp.block_all_reduce_bytes(2, 8, 16, 2, 2)["payload"]}
