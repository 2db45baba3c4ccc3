"""d2l_ext.attention_mxnet and transformer_mxnet's attention: naive equals tiled at odd sizes,
and their memory read from MXNet's storage counter. The counter is process-wide and must
start before the first array, so the measurements run in a fresh Python process (one for the
module). Skipped where MXNet 1.9.1 cannot be imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as onp
import pytest

pytest.importorskip("mxnet")
tfm = pytest.importorskip("d2l_ext.transformer_mxnet")
from mxnet import np  # noqa: E402


def qkv(b=1, h=2, s=37, d=8, seed=0):
    rng = onp.random.default_rng(seed)
    return [np.array(rng.standard_normal((b, h, s, d)).astype("float32")) for _ in range(3)]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("s, block_q, block_k", [(37, 8, 5), (37, 64, 64), (5, 3, 64),
                                                 (20, 1, 7)])
def test_tiled_equals_naive_at_odd_sizes(s, block_q, block_k, causal):
    q, k, v = qkv(s=s)
    naive = tfm.naive_attention(q, k, v, causal).asnumpy()
    tiled = tfm.tiled_attention(q, k, v, causal, block_q, block_k).asnumpy()
    onp.testing.assert_allclose(tiled, naive, rtol=1e-5, atol=1e-6)


SCRIPT = textwrap.dedent("""
    import json
    from d2l_ext import mxnet_memory
    counter = mxnet_memory.StorageCounter()  # before any array
    from mxnet import np
    from d2l_ext import attention_mxnet as am
    from d2l_ext import transformer_mxnet as tfm

    out = {}
    s, b, h, d = 96, 1, 2, 16
    q, k, v = (np.random.normal(size=(b, h, s, d)) for _ in range(3))
    m = am.attention_peak(counter, tfm.naive_attention, q, k, v, False)
    out["naive"] = [m.peak, m.kept, m.workspace]
    m = am.attention_peak(counter, tfm.tiled_attention, q, k, v, False, 32, 32)
    out["tiled"] = [m.peak, m.kept, m.workspace]
    m = am.attention_peak(counter, tfm.naive_attention, q, k, v, False, backward=True)
    out["naive backward"] = [m.peak, m.kept, m.backward_peak]
    before = counter.current()
    m = am.attention_peak(counter, tfm.naive_attention, q, k, v, False)
    out["again"] = [m.workspace, counter.current() - before]
    peaks = am.attention_peaks(counter, (64, 256), batch=1, heads=2, d=16)
    out["peaks"] = {how: [x.peak for x in found] for how, found in peaks.items()}
    try:
        am.attention_peaks(counter, (8,), ways=("sdpa",))
    except ValueError as error:
        out["refused"] = str(error)
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def measured():
    env = dict(os.environ, MXNET_CPU_TEMP_COPY="4")
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_naive_peak_holds_the_score_matrices_and_tiled_does_not(measured):
    s, bh, d = 96, 2, 16
    scores, out = bh * s * s * 4, bh * s * d * 4
    peak, kept, workspace = measured["naive"]
    # q·kᵀ and its division, then the division and the softmax (the engine's threads free
    # the first before or after the output is allocated: the peak varies by the output)
    assert peak >= 2 * scores
    assert kept == out
    assert workspace >= scores  # matmul's temporary workspaces, kept by MXNet
    tiled_peak, tiled_kept, _ = measured["tiled"]
    assert tiled_kept == out and tiled_peak < peak / 2
    backward_peak = measured["naive backward"][2]
    assert measured["naive backward"][1] >= scores  # the recorded graph keeps the softmax
    assert backward_peak > scores


def test_a_warmed_up_call_leaves_nothing_behind(measured):
    assert measured["again"] == [0, 0]


def test_peaks_grow_quadratically_naive_not_tiled(measured):
    naive, tiled = measured["peaks"]["naive"], measured["peaks"]["tiled"]
    assert naive[1] / naive[0] > 10
    assert tiled[1] / tiled[0] < 6
    assert naive[1] > 2 * 2 * 256 * 256 * 4 > tiled[1]
    assert "'naive' or 'tiled'" in measured["refused"]


def test_attention_peak_refuses_zero_calls_before_it_calls_anything():
    from d2l_ext import attention_mxnet

    calls = []
    q, k, v = qkv()
    with pytest.raises(ValueError, match="calls must be at least 1"):
        attention_mxnet.attention_peak(None, lambda *a: calls.append(1), q, k, v, calls=0)
    assert calls == []
