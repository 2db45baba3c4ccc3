"""d2l_ext.tensor_parallel_mxnet: the block split across the contexts of one process equals the
whole block (tensor and sequence parallelism, 1, 2 and 4 contexts, odd lengths), its
collectives are counted against the formula, and bad splits are refused with what to do.
Skipped where MXNet 1.9.1 cannot be imported."""

from __future__ import annotations

import pytest

pytest.importorskip("mxnet")
tpm = pytest.importorskip("d2l_ext.tensor_parallel_mxnet")
import mxnet as mx  # noqa: E402
from mxnet import np, npx  # noqa: E402

from d2l_ext import transformer_mxnet as txm  # noqa: E402
from d2l_ext.split_bytes import block_all_reduce_bytes  # noqa: E402

npx.set_np()


def _block(d: int, heads: int):
    mx.random.seed(0)
    block = txm.Block(d, heads)
    block.initialize(mx.init.Normal(0.2))
    for param in block.collect_params().values():  # non-zero biases: one added k times shows
        param.set_data(param.data() + np.random.normal(scale=0.1, size=param.shape))
    return block


@pytest.mark.parametrize("k, d, heads, b, s", [(2, 32, 4, 2, 8), (4, 16, 4, 1, 12),
                                               (1, 8, 2, 1, 5), (2, 24, 2, 3, 6)])
@pytest.mark.parametrize("sequence", [False, True])
def test_the_split_block_equals_the_whole_block(k, d, heads, b, s, sequence):
    if sequence and s % k:
        pytest.skip("sequence parallelism needs the sequence to divide")
    block = _block(d, heads)
    x = np.random.normal(size=(b, s, d))
    whole = block(x)
    contexts = [mx.cpu(i) for i in range(k)]
    group = tpm.ContextGroup(contexts)
    part = s // k
    xs = [(x[:, r * part:(r + 1) * part] if sequence else x).copyto(c)
          for r, c in enumerate(contexts)]
    outs = tpm.block_forward(tpm.split_block(block, contexts), xs, group, sequence)
    for r, (out, ctx) in enumerate(zip(outs, contexts)):
        assert out.ctx == ctx
        want = whole[:, r * part:(r + 1) * part] if sequence else whole
        assert float(abs(out.copyto(mx.cpu()) - want).max()) < 1e-4
    forward = block_all_reduce_bytes(b, s, d, 4, k, backward=False)
    if sequence:
        assert group.traffic.calls == {"all_gather": 2, "reduce_scatter": 2}
        assert group.traffic.payload == {"all_gather": forward["payload"] // k,
                                         "reduce_scatter": forward["payload"]}
    else:
        assert group.traffic.calls == {"all_reduce": forward["calls"]}
        assert group.traffic.payload == {"all_reduce": forward["payload"]}


def test_the_collectives_sum_gather_and_scatter_across_contexts():
    contexts = [mx.cpu(0), mx.cpu(1), mx.cpu(2)]
    group = tpm.ContextGroup(contexts)
    parts = [np.full((2, 6), float(r + 1), ctx=c) for r, c in enumerate(contexts)]
    for out, ctx in zip(group.all_reduce(parts), contexts):
        assert out.ctx == ctx and float(out.min()) == float(out.max()) == 6.0
    gathered = group.all_gather(parts, axis=0)
    assert gathered[2].shape == (6, 6) and float(gathered[2][2:4].max()) == 2.0
    scattered = group.reduce_scatter([p * np.arange(6, ctx=p.ctx) for p in parts], axis=1)
    assert [s.shape for s in scattered] == [(2, 2)] * 3
    assert scattered[1].tolist() == [[12.0, 18.0], [12.0, 18.0]]  # columns 2 and 3, times 6
    assert group.traffic.calls == {"all_reduce": 1, "all_gather": 1, "reduce_scatter": 1}
    assert group.traffic.payload["all_gather"] == 2 * 6 * 4


def test_bad_input_is_refused_with_what_to_do():
    contexts = [mx.cpu(0), mx.cpu(1)]
    group = tpm.ContextGroup(contexts)
    with pytest.raises(ValueError, match="one array per context"):
        group.all_reduce([np.zeros(3)])
    with pytest.raises(ValueError, match="copy it there first"):
        group.all_reduce([np.zeros(3, ctx=mx.cpu(0)), np.zeros(3, ctx=mx.cpu(0))])
    with pytest.raises(ValueError, match="must divide evenly among 2 contexts"):
        group.reduce_scatter([np.zeros((3,), ctx=c) for c in contexts])
    with pytest.raises(ValueError, match="heads .3. must divide evenly among 2"):
        tpm.split_block(_block(12, 3), contexts)
    with pytest.raises(ValueError, match="at least one context"):
        tpm.ContextGroup([])


def test_the_group_reuses_its_kvstore_keys():
    """One key per shape: a training loop's sums do not pile up buffers."""
    contexts = [mx.cpu(0), mx.cpu(1)]
    group = tpm.ContextGroup(contexts)
    for _ in range(5):
        group.all_reduce([np.ones((3, 4), ctx=c) for c in contexts])
    group.all_reduce([np.ones((2,), ctx=c) for c in contexts])
    assert len(group._keys) == 2 and group.traffic.calls["all_reduce"] == 6
