"""d2l_ext.transformer_mxnet: attention naive and tiled, and the block, in MXNet's np.
Skipped where MXNet 1.9.1 cannot be imported."""

from __future__ import annotations

import numpy as onp
import pytest

pytest.importorskip("mxnet")
tfm = pytest.importorskip("d2l_ext.transformer_mxnet")
from mxnet import autograd, np  # noqa: E402

from d2l_ext import transformer  # noqa: E402


def qkv(b=2, h=3, s=37, d=16, s_k=None, seed=0):
    rng = onp.random.default_rng(seed)
    s_k = s if s_k is None else s_k
    return [np.array(rng.standard_normal(shape).astype("float32"))
            for shape in ((b, h, s, d), (b, h, s_k, d), (b, h, s_k, d))]


def reference(q, k, v, causal):
    """The torch version of the same attention (checked against SDPA in test_transformer)."""
    import torch

    return transformer.naive_attention(*(torch.from_numpy(t.asnumpy()) for t in (q, k, v)),
                                       causal).numpy()


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("blocks", [(64, 64), (1, 1), (5, 7), (16, 3)])
def test_tiled_equals_naive_and_torch(causal, blocks):
    q, k, v = qkv()
    expected = reference(q, k, v, causal)
    onp.testing.assert_allclose(tfm.naive_attention(q, k, v, causal).asnumpy(), expected,
                                rtol=1e-4, atol=1e-5)
    onp.testing.assert_allclose(tfm.tiled_attention(q, k, v, causal, *blocks).asnumpy(),
                                expected, rtol=1e-4, atol=1e-5)


def test_lengths_that_differ_and_gradients():
    q, k, v = qkv(s=20, s_k=50)
    onp.testing.assert_allclose(tfm.tiled_attention(q, k, v, block_q=6, block_k=4).asnumpy(),
                                reference(q, k, v, True), rtol=1e-4, atol=1e-5)
    q, k, v = qkv(s=19)
    grads = {}
    for how, attend in (("naive", tfm.naive_attention), ("tiled", tfm.tiled_attention)):
        for t in (q, k, v):
            t.attach_grad()
        with autograd.record():
            out = (attend(q, k, v) ** 2).sum()
        out.backward()
        grads[how] = [t.grad.asnumpy().copy() for t in (q, k, v)]
    for got, want in zip(grads["tiled"], grads["naive"]):
        onp.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_the_block_has_the_counted_parameters_and_attends_the_same_both_ways():
    d, heads = 24, 3
    blocks = {how: tfm.Block(d, heads, how) for how in ("naive", "tiled")}
    for block in blocks.values():
        block.initialize()
    cfg = transformer.GPTConfig(d=d, heads=heads, layers=1)
    per_block = transformer.parameter_count(cfg, embeddings=False) - 2 * d  # no final norm
    assert sum(p.data().size for p in blocks["naive"].collect_params().values()) == per_block
    # the two blocks were built alike, so their parameters come in the same order
    for mine, theirs in zip(blocks["tiled"].collect_params().values(),
                            blocks["naive"].collect_params().values()):
        mine.set_data(theirs.data())
    x = np.array(onp.random.default_rng(1).standard_normal((2, 30, d)).astype("float32"))
    onp.testing.assert_allclose(blocks["tiled"](x).asnumpy(), blocks["naive"](x).asnumpy(),
                                rtol=1e-4, atol=1e-5)


def test_bad_arguments():
    q, k, v = qkv(s=4)
    with pytest.raises(ValueError, match="at least 1"):
        tfm.tiled_attention(q, k, v, block_k=0)
    with pytest.raises(ValueError, match="multiple of heads"):
        tfm.Block(10, 3)
    with pytest.raises(ValueError, match="'naive' or 'tiled'"):
        tfm.Block(12, 3, "sdpa")


def test_the_gpt_has_the_counted_parameters_ties_its_output_and_refuses_long_inputs():
    from mxnet import gluon, init

    from d2l_ext import gpt_counts

    net = tfm.GPT(vocab=50, seq=12, d=16, heads=4, layers=2)
    net.initialize(init.Normal(0.02))
    idx = np.array(onp.random.default_rng(0).integers(0, 50, (3, 12)), dtype="int32")
    with autograd.record():
        logits = net(idx)
        loss = gluon.loss.SoftmaxCrossEntropyLoss()(logits, idx).mean()
    loss.backward()
    assert logits.shape == (3, 12, 50)
    count = sum(p.data().size for p in net.collect_params().values())
    assert count == gpt_counts.parameter_count(gpt_counts.GPTConfig(vocab=50, seq=12, d=16,
                                                                     heads=4, layers=2))
    # the output layer is the embedding: rows of tokens that never occur still get gradients
    unused = sorted(set(range(50)) - set(idx.asnumpy().ravel().tolist()))
    assert float(np.abs(net.tokens.weight.grad()[unused[0]]).sum()) > 0
    with pytest.raises(ValueError, match="longer than the model's seq=12"):
        net(np.zeros((1, 13), dtype="int32"))
    with pytest.raises(ValueError, match="at least 1"):
        tfm.GPT(vocab=0, seq=4, d=8, heads=2, layers=1)
