"""d2l_ext.attention: the traffic of naive and tiled attention counted against the formulas,
the kernel SDPA chose, the peak memory of each way, FlexAttention's masks on a CPU."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch.nn import functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from d2l_ext import attention as at
from d2l_ext import gpt_counts
from d2l_ext import transformer as tf

B, H, D = 2, 3, 16


def qkv(s=37, dtype=torch.float32, b=B, h=H, d=D, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, h, s, d, generator=g).to(dtype) for _ in range(3))


# ---------------------------------------------------------------------- traffic
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("s, block_q, block_k, dtype", [
    (37, 8, 5, torch.float32),     # s a multiple of neither block
    (37, 8, 5, torch.bfloat16),    # read and written in 2 bytes, summed in float32
    (37, 64, 64, torch.float32),   # blocks larger than s: one tile
    (20, 20, 3, torch.bfloat16),   # one query block, many key blocks
    (33, 1, 7, torch.float32),     # one query per block
    (5, 3, 64, torch.float32),     # a key block larger than s, two query blocks
])
def test_tiled_traffic_is_the_formula(s, block_q, block_k, dtype, causal):
    q, k, v = qkv(s, dtype)
    item = q.element_size()
    counted = at.count_traffic(tf.tiled_attention, q, k, v, causal, block_q, block_k)
    per_head = (gpt_counts.causal_attention_traffic(s, D, block_q, block_k, item) if causal
                else gpt_counts.attention_traffic(s, D, block_q, item))
    assert counted.io == B * H * per_head
    assert counted.read["q"] == counted.written == B * H * s * D * item  # each once
    assert counted.read["k"] == counted.read["v"]
    assert counted.total > counted.io  # the tiles, which a fused kernel keeps on chip


def test_causal_skips_key_blocks_only_when_there_are_several():
    s, d = 64, 8
    assert (gpt_counts.causal_attention_traffic(s, d, 64, 64)
            == gpt_counts.attention_traffic(s, d, 64) == 2 * 4 * s * d)
    assert gpt_counts.causal_attention_traffic(s, d, 16, 16) < gpt_counts.attention_traffic(
        s, d, 16)
    # s = 4, one query and one key per block: query block i reads keys 0..i
    assert gpt_counts.causal_attention_traffic(4, 1, 1, 1, item=1) == 4 + 2 * (1 + 2 + 3 + 4) + 4
    # a key block reaching past the query block is read whole: 3 keys for query 0
    assert gpt_counts.causal_attention_traffic(4, 1, 1, 3, item=1) == 4 + 2 * (3 + 3 + 3 + 4) + 4
    with pytest.raises(ValueError, match="at least 1"):
        gpt_counts.causal_attention_traffic(4, 1, 1, 0)
    # NumPy int32 sizes give the Python ints' count, not an overflowed one
    s32, d32 = np.int32(65536), np.int32(128)
    assert gpt_counts.attention_traffic(s32, d32) == gpt_counts.attention_traffic(65536, 128)
    assert gpt_counts.attention_traffic(65536, 128) > 2**31
    assert (gpt_counts.causal_attention_traffic(s32, d32, np.int32(128), np.int32(128))
            == gpt_counts.causal_attention_traffic(65536, 128, 128, 128))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_naive_traffic_is_the_formula_plus_the_division(dtype):
    s = 37
    q, k, v = qkv(s, dtype)
    item, scores = q.element_size(), B * H * s * s * q.element_size()
    counted = at.count_traffic(tf.naive_attention, q, k, v, False)
    ops = counted.by_op()
    assert list(ops) == ["bmm", "div", "_softmax"]  # the reshapes of matmul move nothing
    assert ops["div"] == (scores, scores)  # the pass over the scores the formula folds in
    assert ops["_softmax"] == (scores, scores)
    assert counted.total == B * H * gpt_counts.attention_traffic(s, D, None, item) + 2 * scores
    assert counted.io == 4 * B * H * s * D * item

    causal = at.count_traffic(tf.naive_attention, q, k, v, True)
    # masked_fill reads the scores and the s×s mask (broadcast over batch and heads: once)
    assert causal.by_op()["masked_fill"] == (scores + s * s, scores)
    assert causal.total > counted.total + 2 * scores


def test_count_traffic_counts_views_as_nothing_and_broadcasts_once():
    q, k, v = qkv(8)
    n = q.numel() * 4
    assert at.count_traffic(lambda q, k, v: q.transpose(-1, -2), q, k, v).total == 0
    summed = at.count_traffic(lambda q, k, v: q + k, q, k, v)
    assert (summed.read, summed.written, summed.total) == ({"q": n, "k": n, "v": 0}, n, 3 * n)
    first_row = at.count_traffic(lambda q, k, v: q * v[..., :1, :], q, k, v)
    assert first_row.read == {"q": n, "k": 0, "v": B * H * D * 4}
    # an op into a preallocated output writes it, and the output is found
    out = at.count_traffic(lambda q, k, v: torch.add(q, k, out=torch.empty_like(q)), q, k, v)
    assert out.written == n and out.by_op()["empty_like"] == (0, 0)


def test_count_traffic_books_reads_of_views_of_one_qkv_tensor_to_each_name():
    b, s, h, d = 2, 9, 3, 4
    qkv_all = torch.randn(b, s, 3, h, d).permute(2, 0, 3, 1, 4)  # q, k, v interleaved
    q, k, v = qkv_all.unbind(0)
    part = b * h * s * d * 4
    each = at.count_traffic(lambda q, k, v: q @ k.transpose(-1, -2) + v.sum(), q, k, v)
    assert each.read == {"q": part, "k": part, "v": part}
    # slices of the interleaved views, as a tiled loop reads them: each to its own name
    sliced = at.count_traffic(lambda q, k, v: q[:, :, :4] @ k[:, :, 4:].transpose(-1, -2)
                              + v[:, :, 2:7].sum(), q, k, v)
    row = d * 4  # bytes of one token's row of one head
    assert sliced.read == {"q": b * h * 4 * row, "k": b * h * (s - 4) * row,
                           "v": b * h * 5 * row}
    # the same tensor passed twice: its reads go to the first name
    twice = at.count_traffic(lambda q, k, v: q + k + v, q, k, k)
    assert twice.read == {"q": part, "k": 2 * part, "v": 0}


def test_a_tiled_loop_on_an_interleaved_qkv_books_the_same_reads_as_on_separate_tensors():
    qkv_all = torch.randn(1, 256, 3, 1, 32, dtype=torch.bfloat16).permute(2, 0, 3, 1, 4)
    views = qkv_all.unbind(0)
    apart = [t.contiguous() for t in views]
    on_views = at.count_traffic(tf.tiled_attention, *views, True, 64, 64)
    on_copies = at.count_traffic(tf.tiled_attention, *apart, True, 64, 64)
    assert on_views.read == on_copies.read and on_views.io == on_copies.io


def test_the_cpu_fused_kernel_is_one_op_reading_q_k_v_once():
    s = 37
    q, k, v = qkv(s)
    counted = at.count_traffic(F.scaled_dot_product_attention, q, k, v, is_causal=True)
    qkv_bytes = B * H * s * D * 4
    lse = B * H * s * 4  # the log-sum-exp it keeps for the backward pass, float32
    assert counted.by_op() == {"_scaled_dot_product_flash_attention_for_cpu":
                               (3 * qkv_bytes, qkv_bytes + lse)}
    assert counted.io == gpt_counts.attention_traffic(s, D, s, 4) * B * H


# ---------------------------------------------------------------------- SDPA's choice
MASK = torch.ones(11, 11, dtype=torch.bool).tril()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kwargs", [{}, {"is_causal": True}, {"attn_mask": MASK},
                                    {"attn_mask": torch.zeros(11, 11)}],
                         ids=["plain", "causal", "bool-mask", "float-mask"])
def test_sdpa_on_a_cpu_runs_its_flash_kernel(dtype, kwargs):
    q, k, v = qkv(11, dtype)
    kwargs = {key: (value.to(dtype) if value.is_floating_point() else value)
              if isinstance(value, torch.Tensor) else value for key, value in kwargs.items()}
    assert at.sdpa_backend(q, k, v, **kwargs) == "flash"
    assert at.sdpa_op(q, k, v, **kwargs) == "_scaled_dot_product_flash_attention_for_cpu"
    grads = [t.clone().requires_grad_() for t in (q, k, v)]
    node = F.scaled_dot_product_attention(*grads, **kwargs).grad_fn.name()
    assert node == "ScaledDotProductFlashAttentionForCpuBackward0"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sdpa_with_dropout_falls_back_to_math(dtype):
    q, k, v = qkv(11, dtype)
    assert at.sdpa_backend(q, k, v, dropout_p=0.1) == "math"
    assert at.sdpa_op(q, k, v, dropout_p=0.1) == "_scaled_dot_product_attention_math"
    with torch.profiler.profile() as profile:  # the profiler names the math op itself
        F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)
    names = {event.name for event in profile.events()}
    assert "aten::_scaled_dot_product_attention_math" in names
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" not in names


def test_the_fused_kernels_named_are_aten_ops():
    for name in at.SDPA_OPS:
        assert hasattr(torch.ops.aten, name), name
    assert hasattr(torch.ops.aten, "_scaled_dot_product_attention_math")


def test_sdpa_kernel_restricts_the_backends():
    q, k, v = qkv(11)
    with sdpa_kernel(SDPBackend.MATH):
        assert at.sdpa_backend(q, k, v, is_causal=True) == "math"
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        assert at.sdpa_backend(q, k, v) == "math"  # no efficient kernel on a CPU
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        assert at.sdpa_backend(q, k, v) == "flash"
        with warnings.catch_warnings(), pytest.raises(RuntimeError, match="No available kernel"):
            warnings.simplefilter("ignore")  # it warns why flash was refused: the dropout
            at.sdpa_backend(q, k, v, dropout_p=0.1)
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION), pytest.raises(
            RuntimeError, match="No viable backend"):
        at.sdpa_backend(q, k, v)
    assert at.sdpa_backend(q, k, v) == "flash"  # restored after the block


# ---------------------------------------------------------------------- peak memory
def test_naive_forward_peak_is_two_score_matrices_and_the_output():
    s = 96
    q, k, v = qkv(s, b=1, h=2)
    fn = tf.naive_attention
    fn(q, k, v, False)
    scores, out = 2 * s * s * 4, 2 * s * D * 4
    measured = at.attention_memory(fn, q, k, v, False)
    # q·kᵀ and its division by √d live at once, then the division and the softmax, then
    # the softmax and the output
    assert measured == at.AttentionMemory(2 * scores + out, out, None)
    with_grad = at.attention_memory(fn, q, k, v, False, backward=True)
    assert 0 <= with_grad.kept - (scores + out) <= 64  # the probabilities (and a scalar)
    assert with_grad.backward_peak > with_grad.kept


def test_fused_attention_keeps_no_score_matrix_and_tiled_autograd_keeps_every_tile():
    s = 96
    q, k, v = qkv(s, b=1, h=2)
    scores, out, lse = 2 * s * s * 4, 2 * s * D * 4, 2 * s * 4
    sdpa = at.attention_memory(F.scaled_dot_product_attention, q, k, v, backward=True)
    assert sdpa.kept == out + lse
    assert sdpa.forward_peak < scores
    tiled = at.attention_memory(tf.tiled_attention, q, k, v, False, 32, 32, backward=True)
    assert tiled.kept > scores  # autograd saves each tile's probabilities: s² in all


def test_peaks_grow_quadratically_naive_and_linearly_fused():
    peaks = at.attention_peaks((32, 128), batch=1, heads=2, d=D)
    naive, tiled, sdpa = ([m.forward_peak for m in peaks[how]]
                          for how in ("naive", "tiled", "sdpa"))
    assert naive[1] / naive[0] > 10  # 16 for the score matrices alone
    assert sdpa[1] / sdpa[0] < 6 and tiled[1] / tiled[0] < 6
    assert naive[1] >= 2 * 2 * 128 * 128 * 4 > sdpa[1]
    custom = at.attention_peaks((32,), {"scores": lambda q, k, v: q @ k.transpose(-1, -2)},
                                batch=1, heads=2, d=D)
    assert custom["scores"][0].forward_peak == 2 * 32 * 32 * 4


# ---------------------------------------------------------------------- FlexAttention
flex = pytest.importorskip("torch.nn.attention.flex_attention")


@pytest.fixture
def no_dynamo(monkeypatch):
    """Call FlexAttention's eager implementation directly, without the eager-backend
    compilation it wraps it in (seconds on a first call); the same dense computation."""
    monkeypatch.setattr(flex, "_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG", True)


@pytest.mark.usefixtures("no_dynamo")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_flex_masks_equal_sdpa_in_eager_mode(dtype):
    s = 130  # not a multiple of the 128-token blocks
    q, k, v = qkv(s, dtype, b=1, h=2)
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {}
    causal = flex.create_block_mask(at.causal_mask, None, None, s, s, device="cpu")
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(flex.flex_attention(q, k, v, block_mask=causal), expected, **tol)
    torch.testing.assert_close(flex.flex_attention(q, k, v, score_mod=at.causal_score),
                               expected, **tol)
    window = at.sliding_window(20)
    dense = flex.create_mask(window, None, None, s, s, device="cpu")
    assert dense[0, 0, 40, 21:41].all() and not dense[0, 0, 40, 20] and not dense[0, 0, 40, 41]
    torch.testing.assert_close(
        flex.flex_attention(q, k, v, block_mask=flex.create_block_mask(window, None, None, s, s,
                                                                       device="cpu")),
        F.scaled_dot_product_attention(q, k, v, attn_mask=dense), **tol)
    with pytest.raises(ValueError, match="at least 1"):
        at.sliding_window(0)


def test_flex_has_no_backward_on_a_cpu():
    q, k, v = qkv(8, b=1, h=1)
    message = at.flex_backward_error(q, k, v)
    assert message is not None and "does not support backward on CPU" in message


@pytest.mark.parametrize("s, heads, d, dtype, threads", [
    (100, 1, 64, torch.float32, 2), (256, 2, 48, torch.float32, 1),
    (800, 1, 32, torch.float32, 2), (300, 1, 64, torch.bfloat16, 2)])
def test_cpu_flash_bytes_counts_sdpa_s_forward_peak_exactly(s, heads, d, dtype, threads):
    """The CPU flash kernel's output, log-sum-exp and per-thread blocks are its whole peak,
    at each of its three query-block sizes, any thread count, and in 16-bit."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        sdpa = {"sdpa": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)}
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            peak = at.attention_peaks([s], sdpa, heads=heads, d=d, dtype=dtype)
        counted = at.cpu_flash_bytes(s, d, batch_heads=heads,
                                            item=torch.finfo(dtype).bits // 8)
    finally:
        torch.set_num_threads(before)
    assert counted["threads"] == threads
    assert peak["sdpa"][0].forward_peak == (counted["output"] + counted["logsumexp"]
                                            + counted["blocks"])


def test_cpu_flash_bytes_refuses_what_it_cannot_count():
    with pytest.raises(ValueError, match="item is 4"):
        at.cpu_flash_bytes(128, item=8)
    with pytest.raises(ValueError, match="positive"):
        at.cpu_flash_bytes(0)
    assert at.cpu_flash_bytes(1000, threads=3)["q_block"] == 256
