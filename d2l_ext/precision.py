"""Low-precision number formats: their ranges and rounding read from ``finfo``, round trips,
scaling for FP8 (per tensor, per row, delayed) and an FP8 matrix product.

The format facts work on any ``finfo`` (NumPy's or PyTorch's); the rest takes PyTorch
tensors, and imports PyTorch only when called, so that the MXNet pages can use the facts.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal

Scaling = Literal["none", "tensor", "row"]


@dataclass(frozen=True)
class Format:
    """A binary floating-point format: its bits, and the numbers at the edges of its range.
    ``eps`` is the spacing just above 1; a round trip's relative error is at most ``eps / 2``
    for a number between ``smallest_normal`` and ``max``."""

    name: str
    bits: int
    exponent_bits: int
    mantissa_bits: int
    max: float
    smallest_normal: float
    smallest_subnormal: float
    eps: float

    @property
    def decades(self) -> float:
        """Powers of ten from the smallest subnormal number to the largest."""
        return math.log10(self.max / self.smallest_subnormal)


def describe(name: str, finfo: Any) -> Format:
    """The :class:`Format` that ``finfo`` (``numpy.finfo`` or ``torch.finfo``) describes: the
    mantissa's bits follow from ``eps`` (2 to the minus that many), the exponent's from the
    rest of the bits after the sign."""
    if not hasattr(finfo, "eps"):
        raise ValueError(f"{name}: describe takes a floating-point finfo (numpy.finfo or "
                         f"torch.finfo), not {type(finfo).__name__}")
    eps = float(finfo.eps)
    mantissa = round(-math.log2(eps))
    if 2.0 ** -mantissa != eps:
        raise ValueError(f"{name}: eps {eps} is not a power of 2; is this a binary float format?")
    normal = float(getattr(finfo, "smallest_normal", None) or finfo.tiny)
    return Format(name, int(finfo.bits), int(finfo.bits) - 1 - mantissa, mantissa,
                  float(finfo.max), normal, normal * eps, eps)


def from_bits(name: str, exponent_bits: int, mantissa_bits: int,
              finite_only: bool = False) -> Format:
    """The :class:`Format` with a sign bit, ``exponent_bits`` and ``mantissa_bits``, the
    exponent biased by ``2**(exponent_bits − 1) − 1``. IEEE-style formats keep the top
    exponent for infinities and NaNs; ``finite_only`` formats (E4M3 "fn") keep only the
    all-ones pattern for NaN, so their top exponent holds numbers too."""
    if exponent_bits < 2 or mantissa_bits < 1:
        raise ValueError(f"a float format needs at least 2 exponent bits and 1 mantissa bit, "
                         f"got {exponent_bits} and {mantissa_bits}")
    bias = 2 ** (exponent_bits - 1) - 1
    eps = 2.0 ** -mantissa_bits
    if finite_only:  # the largest exponent is usable; its all-ones mantissa is NaN
        largest = 2.0 ** (2 ** exponent_bits - 1 - bias) * (2 - 2 * eps)
    else:
        largest = 2.0 ** bias * (2 - eps)
    normal = 2.0 ** (1 - bias)
    return Format(name, 1 + exponent_bits + mantissa_bits, exponent_bits, mantissa_bits,
                  largest, normal, normal * eps, eps)


def _torch():
    import torch

    return torch


def round_trip(x, dtype):
    """``x`` cast to ``dtype`` and back to its own dtype: what storing it in ``dtype`` keeps."""
    return x.to(dtype).to(x.dtype)


def worst_relative_error(x, dtype) -> float:
    """The largest ``|round_trip(x) − x| / |x|`` over the nonzero elements of ``x`` whose
    round trip stays finite."""
    torch = _torch()
    back = round_trip(x, dtype)
    keep = (x != 0) & torch.isfinite(back)
    if not bool(keep.any()):
        raise ValueError("no nonzero element of x survives the round trip: nothing to compare")
    return float(((back - x).abs() / x.abs())[keep].max())


def flushed(x, dtype, scale: float = 1.0) -> tuple[float, float]:
    """Of the nonzero elements of ``x`` multiplied by ``scale`` and stored in ``dtype``: the
    share that becomes zero, and the share that lands below ``dtype``'s smallest normal number
    (kept with fewer significant bits)."""
    torch = _torch()
    values = x[x != 0].double() * scale
    if values.numel() == 0:
        raise ValueError("x has no nonzero element")
    back = round_trip(values, dtype)
    tiny = torch.finfo(dtype).smallest_normal
    zero = float((back == 0).double().mean())
    subnormal = float(((back != 0) & (back.abs() < tiny)).double().mean())
    return zero, subnormal


def power_of_two_scale(amax: float, dtype, margin: int = 1) -> float:
    """The largest power of 2 that keeps ``amax`` times it at most ``dtype``'s largest number
    divided by ``2**margin``: a scale that loses no precision in the multiplication."""
    if not amax > 0 or not math.isfinite(amax):
        raise ValueError(f"amax must be positive and finite, got {amax}")
    top = _torch().finfo(dtype).max / 2.0 ** margin
    power = math.floor(math.log2(top) - math.log2(amax))
    if power > 1023:
        raise ValueError(f"amax {amax} is too small for a float64 power-of-2 scale")
    return 2.0 ** power


def amax(x, how: Scaling = "tensor"):
    """The largest magnitude of ``x``: one for the tensor, or one per row (over the last
    dimension, kept with size 1). Raises if ``x`` holds an infinity or a NaN, which no scale
    can map into a format."""
    torch = _torch()
    if how not in ("none", "tensor", "row"):
        raise ValueError(f"how is 'none', 'tensor' or 'row', not {how!r}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError("x holds an infinity or a NaN: no scale maps it into the format; "
                         "find where it came from (torch.isfinite) before quantizing")
    if how == "row":
        return x.abs().amax(dim=-1, keepdim=True).float()
    return x.abs().amax().float()


def scale_for(largest, dtype):
    """``dtype``'s largest number over ``largest`` (a float or a tensor): the factor that
    maps the largest magnitude onto the top of the format; 1 where ``largest`` is 0."""
    torch = _torch()
    largest = torch.as_tensor(largest, dtype=torch.float32)
    top = torch.finfo(dtype).max
    scale = torch.where(largest > 0, top / largest, torch.ones_like(largest))
    return scale.clamp(max=torch.finfo(torch.float32).max)  # a tiny largest: no infinite scale


def _check_fp8(dtype, who: str) -> None:
    torch = _torch()
    if not dtype.is_floating_point or torch.empty((), dtype=dtype).element_size() != 1:
        raise ValueError(f"{who} takes an FP8 dtype (torch.float8_e4m3fn, "
                         f"torch.float8_e5m2), not {dtype}")


def _check_not_empty(x, what: str) -> None:
    if x.numel() == 0:
        raise ValueError(f"{what} is empty ({tuple(x.shape)}): there is no largest magnitude "
                         "to scale by")


def quantize(x, dtype, how: Scaling = "tensor", scale=None):
    """``x`` in the 8-bit ``dtype``: ``(q, inverse)`` with ``q = (x · scale).to(dtype)`` and
    ``inverse = 1 / scale``, so that ``q.float() * inverse`` approximates ``x``. The scale is
    ``scale`` if given (e.g. from :class:`DelayedScaling`), else 1 for ``"none"``, or from the
    tensor's or each row's largest magnitude (current scaling)."""
    torch = _torch()
    _check_fp8(dtype, "quantize")
    if scale is None and how != "none":
        _check_not_empty(x, "x")
    if scale is None:
        scale = (torch.ones((), dtype=torch.float32) if how == "none"
                 else scale_for(amax(x, how), dtype))
    scale = torch.as_tensor(scale, dtype=torch.float32)
    q = (x.float() * scale).to(dtype)
    return q, (1.0 / scale).float()


def dequantize(q, inverse):
    """What :func:`quantize` stored, back in float32."""
    return q.float() * inverse


def relative_error(approx, exact) -> float:
    """``‖approx − exact‖ / ‖exact‖`` (Frobenius norms, in float64), for tensors of one shape."""
    if tuple(approx.shape) != tuple(exact.shape):
        raise ValueError(f"approx {tuple(approx.shape)} and exact {tuple(exact.shape)} differ "
                         "in shape: compare like with like")
    exact = exact.double()
    norm = float(exact.norm())
    if norm == 0:
        raise ValueError("exact is all zeros: a relative error needs a nonzero reference")
    return float((approx.double() - exact).norm()) / norm


class DelayedScaling:
    """A scale from the largest magnitudes of earlier steps (delayed scaling): ``scale()``
    maps the largest ``amax`` of the last ``history`` steps onto the top of ``dtype``;
    ``record(x)`` adds this step's ``amax`` after the tensor was quantized. A step whose
    values grew past the history's maximum overflows the format."""

    def __init__(self, dtype, history: int = 16) -> None:
        if isinstance(history, bool) or not isinstance(history, int):
            raise ValueError(f"history is a whole number of steps, not {history!r}")
        if history < 1:
            raise ValueError(f"history must be at least 1 step, got {history}")
        self.dtype = dtype
        self.amaxes: deque[float] = deque(maxlen=history)

    def scale(self):
        """The scale for the next tensor; 1 before any step was recorded."""
        return scale_for(max(self.amaxes) if self.amaxes else 0.0, self.dtype)

    def record(self, x) -> None:
        """Remember ``x``'s largest magnitude for the next steps; a step whose largest value
        is not finite (an overflow, a NaN) is left out of the history."""
        _check_not_empty(x, "the step's tensor")
        largest = float(x.abs().amax())
        if math.isfinite(largest):
            self.amaxes.append(largest)


def overflowed(x, scale, dtype) -> float:
    """The share of ``x``'s elements whose magnitude times ``scale`` exceeds ``dtype``'s
    largest number: E4M3 clamps them to it; E5M2 rounds those below its rounding midpoint
    (61,440) to it and turns the rest into infinity. 0 for an empty ``x``."""
    torch = _torch()
    if x.numel() == 0:
        return 0.0
    top = torch.finfo(dtype).max * (1 + 2.0**-20)  # a float32 scale's rounding is no overflow
    return float(((x.double().abs() * torch.as_tensor(scale).double()) > top).double().mean())


def fp8_matmul(a, b, dtype=None, how: Scaling = "tensor") -> tuple[Any, str]:
    """``a @ b`` (``a``: (m, k), ``b``: (k, n), float32) with both inputs in FP8 (``dtype``,
    by default E4M3), scaled per tensor or per row of ``a`` and column of ``b``. Returns
    ``(product, what_ran)``, the product in float32: ``"_scaled_mm"`` when
    ``torch._scaled_mm`` ran here with a float32 output, ``"_scaled_mm, bfloat16 out"`` when
    this device's kernel offers that scaling only with a bfloat16 output (then rounded to it),
    else ``"emulated: <why>"`` (the FP8 values, dequantized, multiplied in float32)."""
    torch = _torch()
    dtype = dtype or torch.float8_e4m3fn
    _check_fp8(dtype, "fp8_matmul")
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"a and b must be 2-D matrices; got {a.dim()}-D and {b.dim()}-D")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a (m, k) @ b (k, n) needs matching k; got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    if how not in ("tensor", "row"):
        raise ValueError(f"how is 'tensor' or 'row', not {how!r}")
    if 0 in a.shape or 0 in b.shape:
        raise ValueError(f"a {tuple(a.shape)} or b {tuple(b.shape)} is empty: nothing to "
                         "scale or multiply")
    qa, ia = quantize(a, dtype, how)
    qb_t, ib_t = quantize(b.t(), dtype, how)  # b's columns are the rows of b.t()
    qa, qb_t = qa.contiguous(), qb_t.contiguous()  # a row-major, b column-major: as cuBLAS asks
    ib = ib_t.t() if how == "row" else ib_t  # (1, n)
    why = ""
    for out_dtype, ran in ((torch.float32, "_scaled_mm"),
                           (torch.bfloat16, "_scaled_mm, bfloat16 out")):
        try:
            out = torch._scaled_mm(qa, qb_t.t(), scale_a=ia, scale_b=ib, out_dtype=out_dtype)
        except (RuntimeError, NotImplementedError) as error:  # not this scaling or device
            why = why or (str(error).strip().splitlines() or ["no reason given"])[0]
            continue
        out = out[0] if isinstance(out, tuple) else out  # PyTorch 2.1-2.3: (out, amax)
        return out.float(), ran
    return dequantize(qa, ia) @ dequantize(qb_t, ib_t).t(), f"emulated: {why}"
