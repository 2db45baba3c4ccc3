"""d2l_ext.precision: format facts, round trips, loss and FP8 scaling, the FP8 product."""
import math

import numpy as np
import pytest
import torch

from d2l_ext import precision

FORMATS = {"bfloat16": (torch.bfloat16, 8, 7, False), "float16": (torch.float16, 5, 10, False),
           "E4M3": (torch.float8_e4m3fn, 4, 3, True), "E5M2": (torch.float8_e5m2, 5, 2, False),
           "float32": (torch.float32, 8, 23, False)}


@pytest.mark.parametrize("name", FORMATS)
def test_the_bits_give_the_range_that_finfo_reports(name):
    dtype, exponent, mantissa, finite_only = FORMATS[name]
    read = precision.describe(name, torch.finfo(dtype))
    assert read == precision.from_bits(name, exponent, mantissa, finite_only)
    assert (read.exponent_bits, read.mantissa_bits) == (exponent, mantissa)
    assert read.smallest_subnormal == read.smallest_normal * read.eps


def test_known_edges_of_the_formats():
    assert precision.from_bits("E4M3", 4, 3, finite_only=True).max == 448
    assert precision.from_bits("E5M2", 5, 2).max == 57344
    assert precision.from_bits("float16", 5, 10).max == 65504
    assert precision.from_bits("E4M3", 4, 3, True).smallest_subnormal == 2.0 ** -9
    assert precision.describe("f16", np.finfo(np.float16)) == precision.from_bits("f16", 5, 10)
    assert round(precision.from_bits("float16", 5, 10).decades, 1) == 12.0


def test_a_format_that_is_not_binary_or_too_small_is_refused():
    class Decimal:
        eps, bits, max, tiny = 0.1, 16, 1e4, 1e-4

    with pytest.raises(ValueError, match="power of 2"):
        precision.describe("decimal", Decimal())
    with pytest.raises(ValueError, match="at least 2 exponent bits"):
        precision.from_bits("tiny", 1, 3)


@pytest.mark.parametrize("name", ["bfloat16", "float16", "E4M3", "E5M2"])
def test_a_round_trip_errs_by_at_most_half_a_step_in_the_normal_range(name):
    dtype = FORMATS[name][0]
    f = precision.describe(name, torch.finfo(dtype))
    g = torch.Generator().manual_seed(1)
    logs = torch.empty(5000, dtype=torch.float64).uniform_(math.log(f.smallest_normal),
                                                           math.log(f.max), generator=g)
    x = logs.exp().float()
    worst = precision.worst_relative_error(x, dtype)
    assert f.eps / 4 < worst <= f.eps / 2
    assert precision.worst_relative_error(-x, dtype) == worst  # the sign is exact


def test_a_round_trip_of_nothing_comparable_is_an_error():
    with pytest.raises(ValueError, match="nothing to compare"):
        precision.worst_relative_error(torch.zeros(3), torch.float16)


def test_flushed_counts_zeros_and_subnormals_of_the_nonzero_values():
    x = torch.tensor([1e-9, 1e-6, 1e-3, 0.0, 0.0])  # 1e-9 -> 0, 1e-6 subnormal in float16
    assert precision.flushed(x, torch.float16) == (pytest.approx(1 / 3), pytest.approx(1 / 3))
    assert precision.flushed(x, torch.bfloat16) == (0.0, 0.0)
    assert precision.flushed(x, torch.float16, scale=2.0 ** 20) == (0.0, 0.0)
    with pytest.raises(ValueError, match="no nonzero"):
        precision.flushed(torch.zeros(4), torch.float16)


def test_the_loss_scale_is_the_largest_power_of_two_below_the_margin():
    assert precision.power_of_two_scale(1.0, torch.float16) == 2.0 ** 14  # 65504 / 2 / 1
    assert precision.power_of_two_scale(0.347, torch.float16) == 2.0 ** 16
    assert precision.power_of_two_scale(3.0, torch.float8_e4m3fn, margin=0) == 128
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="positive and finite"):
            precision.power_of_two_scale(bad, torch.float16)


def test_quantize_maps_the_largest_magnitude_onto_the_top_of_the_format():
    x = torch.tensor([[3.0, -1.0], [0.0009, 0.002], [0.0, 0.0]])
    q, inverse = precision.quantize(x, torch.float8_e4m3fn, "tensor")
    assert q.dtype == torch.float8_e4m3fn and q.float().abs().max() == 448
    assert inverse.item() == pytest.approx(3 / 448)
    q, inverse = precision.quantize(x, torch.float8_e4m3fn, "row")
    assert inverse.shape == (3, 1)
    assert q.float()[:2].abs().amax(dim=1).tolist() == [448, 448]
    assert inverse[2].item() == 1.0  # an all-zero row keeps the scale 1
    back = precision.dequantize(q, inverse)
    assert torch.allclose(back, x, rtol=0.07, atol=1e-5)
    q, inverse = precision.quantize(x, torch.float8_e4m3fn, "none")
    assert inverse.item() == 1 and q.float()[1].tolist() == [0.0, 0.001953125]
    with pytest.raises(ValueError, match="'none', 'tensor' or 'row'"):
        precision.quantize(x, torch.float8_e4m3fn, "column")


def test_quantize_takes_a_strided_view_and_a_given_scale():
    base = torch.randn(8, 6, generator=torch.Generator().manual_seed(0))
    view = base.t()[:, ::2]  # not contiguous
    q, inverse = precision.quantize(view, torch.float8_e5m2, "row")
    assert q.shape == view.shape
    assert precision.relative_error(precision.dequantize(q, inverse), view) < 0.2
    q, inverse = precision.quantize(view, torch.float8_e4m3fn, scale=4.0)
    assert inverse.item() == 0.25


def test_relative_error_of_a_zero_reference_is_refused():
    assert precision.relative_error(torch.ones(3), torch.ones(3)) == 0
    assert precision.relative_error(torch.tensor([3.0, 4.0]), torch.tensor([0.0, 5.0])) == \
        pytest.approx(math.sqrt(10) / 5)
    with pytest.raises(ValueError, match="all zeros"):
        precision.relative_error(torch.ones(2), torch.zeros(2))


def test_delayed_scaling_uses_the_history_and_misses_a_jump():
    delayed = precision.DelayedScaling(torch.float8_e4m3fn, history=2)
    assert delayed.scale().item() == 1.0  # nothing recorded yet
    for amax in (1.0, 4.0, 2.0):
        delayed.record(torch.tensor([amax, -amax / 2]))
    assert list(delayed.amaxes) == [4.0, 2.0]  # only the last two steps
    assert delayed.scale().item() == 112.0  # 448 / 4
    jump = torch.tensor([8.0, 1.0, 2.0, 3.0])
    assert precision.overflowed(jump, delayed.scale(), torch.float8_e4m3fn) == 0.25
    with pytest.raises(ValueError, match="at least 1 step"):
        precision.DelayedScaling(torch.float8_e4m3fn, history=0)


@pytest.mark.parametrize("shape", [(32, 64, 16), (7, 5, 3)])
@pytest.mark.parametrize("how", ["tensor", "row"])
def test_the_fp8_product_is_the_product_of_the_dequantized_inputs(shape, how):
    m, k, n = shape
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    out, ran = precision.fp8_matmul(a, b, how=how)
    assert out.shape == (m, n) and out.dtype == torch.float32
    assert ran == "_scaled_mm" or ran.startswith(("_scaled_mm, bfloat16", "emulated: "))
    qa, ia = precision.quantize(a, torch.float8_e4m3fn, how)
    qb, ib = precision.quantize(b.t(), torch.float8_e4m3fn, how)
    emulated = precision.dequantize(qa, ia) @ precision.dequantize(qb, ib).t()
    assert torch.allclose(out, emulated, rtol=1e-4, atol=1e-4)
    assert precision.relative_error(out, a @ b) < 0.1


def test_the_fp8_product_refuses_mismatched_shapes_and_unknown_scaling():
    with pytest.raises(ValueError, match="matching k"):
        precision.fp8_matmul(torch.ones(2, 3), torch.ones(4, 2))
    with pytest.raises(ValueError, match="'tensor' or 'row'"):
        precision.fp8_matmul(torch.ones(2, 3), torch.ones(3, 2), how="none")
    with pytest.raises(ValueError, match="2-D"):
        precision.fp8_matmul(torch.ones(2, 4, 8), torch.ones(8, 4))


def test_the_fp8_product_takes_a_contiguous_b_and_its_transpose_alike():
    g = torch.Generator().manual_seed(3)
    a, w = torch.randn(16, 32, generator=g), torch.randn(48, 32, generator=g)
    for b in (w.t(), w.t().contiguous()):  # column-major and row-major (k, n)
        out, ran = precision.fp8_matmul(a, b)
        assert out.shape == (16, 48) and precision.relative_error(out, a @ b) < 0.1


def test_non_finite_values_are_refused_or_left_out():
    x = torch.tensor([[1.0, float("inf")], [2.0, 3.0]])
    for how in ("tensor", "row"):  # "none" takes no scale, and stores what it gets
        with pytest.raises(ValueError, match="infinity or a NaN"):
            precision.quantize(x, torch.float8_e4m3fn, how)
    with pytest.raises(ValueError, match="infinity or a NaN"):
        precision.quantize(torch.tensor([float("nan"), 1.0]), torch.float8_e5m2)
    delayed = precision.DelayedScaling(torch.float8_e4m3fn, history=4)
    for values in ([2.0], [float("nan")], [float("inf")], [4.0]):
        delayed.record(torch.tensor(values))
    assert list(delayed.amaxes) == [2.0, 4.0]


def test_relative_error_needs_one_shape_and_describe_a_float_format():
    with pytest.raises(ValueError, match="differ in shape"):
        precision.relative_error(torch.ones(3, 1), torch.ones(3))
    with pytest.raises(ValueError, match="floating-point finfo"):
        precision.describe("int8", torch.iinfo(torch.int8))


def test_the_format_facts_need_no_torch():
    """The MXNet pages use describe and from_bits: the module imports torch only on demand."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None\n"
            "from d2l_ext import precision\n"
            "print(precision.from_bits('bfloat16', 8, 7).max)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert float(done.stdout) == pytest.approx(3.3895313892515355e38)


def test_a_tiny_largest_value_gets_a_finite_scale_and_a_non_fp8_dtype_is_refused():
    scale = precision.scale_for(torch.tensor([1e-40, 0.0]), torch.float8_e4m3fn)
    assert torch.isfinite(scale).all() and scale[1].item() == 1.0
    with pytest.raises(ValueError, match="too small"):
        precision.power_of_two_scale(5e-324, torch.float16)
    for dtype in (torch.float16, torch.int8):
        with pytest.raises(ValueError, match="FP8 dtype"):
            precision.fp8_matmul(torch.ones(2, 2), torch.ones(2, 2), dtype)


def test_quantize_takes_fp8_only_and_empty_inputs_get_a_clear_answer():
    for dtype in (torch.bfloat16, torch.float32, torch.int8):
        with pytest.raises(ValueError, match="quantize takes an FP8 dtype"):
            precision.quantize(torch.randn(3), dtype)
    empty = torch.empty(0, 4)
    for how in ("tensor", "row"):
        with pytest.raises(ValueError, match="empty"):
            precision.quantize(empty, torch.float8_e4m3fn, how)
    q, inverse = precision.quantize(empty, torch.float8_e4m3fn, scale=2.0)  # a given scale
    assert q.shape == (0, 4) and inverse.item() == 0.5
    with pytest.raises(ValueError, match="empty"):
        precision.fp8_matmul(torch.ones(3, 0), torch.ones(0, 2))
    with pytest.raises(ValueError, match="empty"):
        precision.DelayedScaling(torch.float8_e4m3fn).record(empty)
    assert precision.overflowed(empty, 1.0, torch.float8_e4m3fn) == 0.0
    for history in (2.5, True, "16"):
        with pytest.raises(ValueError, match="whole number"):
            precision.DelayedScaling(torch.float8_e4m3fn, history=history)


def test_a_tensor_scaled_by_its_own_largest_value_does_not_overflow():
    """scale = 448 / amax in float32 maps amax to 448 up to rounding: not an overflow."""
    torch.manual_seed(0)
    for _ in range(200):
        x = torch.randn(64) * float(torch.rand(()) * 100 + 1e-3)
        scale = precision.scale_for(precision.amax(x), torch.float8_e4m3fn)
        assert precision.overflowed(x, scale, torch.float8_e4m3fn) == 0.0
    assert precision.overflowed(torch.tensor([1.0, 2.0]), 448.0, torch.float8_e4m3fn) == 0.5
