"""The MXNet tab's ring attention and mixture of experts across the contexts of one process
(d2l_ext.context_parallel_mxnet, d2l_ext.expert_parallel_mxnet): equal to the one-context
computation for 1–4 contexts, odd sizes, both layouts, causal or not; copies counted against
the formulas; bad input refused with what to do. Skipped where MXNet 1.9.1 cannot be
imported."""

from __future__ import annotations

import numpy as onp
import pytest

pytest.importorskip("mxnet")
cpm = pytest.importorskip("d2l_ext.context_parallel_mxnet")
import mxnet as mx  # noqa: E402
from mxnet import np, npx  # noqa: E402

from d2l_ext import expert_parallel_mxnet as epm  # noqa: E402
from d2l_ext.split_bytes import Work, dispatch_bytes, ring_attention_bytes, ring_positions  # noqa: E402
from d2l_ext.tensor_parallel_mxnet import ContextGroup  # noqa: E402

npx.set_np()


@pytest.mark.parametrize("k, shape", [(1, (1, 2, 6, 4)), (2, (2, 3, 8, 5)),
                                      (3, (1, 2, 12, 8)), (4, (2, 1, 16, 3))])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
def test_ring_attention_across_contexts(k, shape, causal, layout):
    mx.random.seed(0)
    q, k_, v = (np.random.normal(size=shape, dtype="float64") for _ in range(3))
    full = cpm.attention(q, k_, v, causal).asnumpy()
    contexts = [mx.cpu(i) for i in range(k)]
    group = ContextGroup(contexts)
    mine = [onp.array(ring_positions(r, k, shape[2], layout)) for r in range(k)]
    shards = [[a[:, :, np.array(m, dtype="int64")].copyto(c) for m, c in zip(mine, contexts)]
              for a in (q, k_, v)]
    works = [Work() for _ in range(k)]
    outs = cpm.ring_attention(*shards, group, causal, layout, works)
    for r, out in enumerate(outs):
        assert out.ctx == contexts[r]
        assert abs(out.asnumpy() - full[:, :, mine[r]]).max() < 1e-12
    b, h, s, d = shape
    expected = ring_attention_bytes(b, h, s, d, 8, k)
    assert group.traffic.calls.get("send", 0) == expected["sends"]
    assert group.traffic.payload.get("send", 0) == expected["total"]
    if causal and k > 1:
        scores = [w.scores for w in works]
        assert scores[-1] > scores[0] if layout == "contiguous" else len(set(scores)) == 1


def test_ring_attention_refuses_bad_input():
    group = ContextGroup([mx.cpu(0), mx.cpu(1)])
    x = [np.zeros((1, 1, 3, 2), ctx=mx.cpu(i)) for i in range(2)]
    with pytest.raises(ValueError, match="do not divide that way"):
        cpm.ring_attention(x, x, x, group, layout="zigzag")
    empty = [np.zeros((1, 1, 0, 2), ctx=mx.cpu(i)) for i in range(2)]
    with pytest.raises(ValueError, match="non-zero length"):
        cpm.ring_attention(empty, empty, empty, group)
    with pytest.raises(ValueError, match="one shape on every context"):
        cpm.ring_attention(x, x, [x[0], np.zeros((1, 1, 4, 2), ctx=mx.cpu(1))], group)
    with pytest.raises(ValueError, match="one array of queries, keys and values per context"):
        cpm.ring_attention(x[:1], x, x, group)


@pytest.mark.parametrize("k, experts, top_k, tokens", [(1, 3, 2, 5), (2, 4, 1, 7),
                                                       (2, 4, 2, 6), (4, 8, 2, 9)])
def test_moe_split_equals_the_whole_layer(k, experts, top_k, tokens):
    mx.random.seed(1)
    d, hidden = 6, 10
    whole = epm.make_experts(d, hidden, experts, top_k)
    xs = [np.random.normal(size=(tokens, d)) for _ in range(k)]
    want = [epm.moe(x, whole).asnumpy() for x in xs]
    contexts = [mx.cpu(i) for i in range(k)]
    group = ContextGroup(contexts)
    outs, loads, moved = epm.moe_split([x.copyto(c) for x, c in zip(xs, contexts)],
                                       epm.split(whole, contexts), group)
    for out, w, c in zip(outs, want, contexts):
        assert out.ctx == c
        assert abs(out.asnumpy() - w).max() < 1e-5
    assert sum(loads) == k * tokens * top_k
    routed = onp.concatenate([epm.route(x, whole)[0].reshape(-1) for x in xs])
    assert loads == onp.bincount(routed, minlength=experts).tolist()
    assert sum(out for out, _ in moved) == sum(into for _, into in moved)
    expected = sum(dispatch_bytes(out, into, d, 4) for out, into in moved)
    assert group.traffic.payload.get("all_to_all", 0) == expected
    assert group.traffic.calls.get("all_to_all", 0) == 2


def test_moe_refuses_bad_splits():
    with pytest.raises(ValueError, match="at least one token"):
        epm.route(np.zeros((0, 4)), epm.make_experts(4, 8, 2))
    with pytest.raises(ValueError, match="top_k must be between 1 and the experts"):
        epm.make_experts(4, 8, 2, top_k=3)
    with pytest.raises(ValueError, match="must divide evenly among 3 contexts"):
        epm.split(epm.make_experts(4, 8, 4), [mx.cpu(i) for i in range(3)])
    group = ContextGroup([mx.cpu(0), mx.cpu(1)])
    with pytest.raises(ValueError, match="2 × 2 arrays"):
        group.all_to_all([[np.zeros(2)], [np.zeros(2)]])
    with pytest.raises(ValueError, match="copy it there first"):
        group.all_to_all([[np.zeros(2), np.zeros(2)], [np.zeros(2), np.zeros(2)]])
