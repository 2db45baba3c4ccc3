"""Attention from naive to tiled, measured: the bytes it moves, the kernel SDPA chose, the
memory it peaks at, and FlexAttention's masks.

* :func:`count_traffic` runs an attention function and counts, op by op, the bytes each
  operation reads and writes (as the dispatcher sees them: a fused kernel is one op). Its
  :attr:`Traffic.total` is the traffic of an implementation whose every op goes to memory
  (the naive one); its :attr:`Traffic.io` counts only the reads of q, k and v and the writes
  into the output, the traffic of a tiled implementation whose tiles stay on chip.
  Set them beside :func:`d2l_ext.gpt_counts.attention_traffic` (non-causal) and
  :func:`d2l_ext.gpt_counts.causal_attention_traffic`.
* :func:`sdpa_backend` says which implementation ``scaled_dot_product_attention`` ran.
* :func:`attention_memory` and :func:`attention_peaks` read the peak memory of a forward
  pass (and of a backward pass) with :class:`d2l_ext.memory.Tracker`, in bytes.
* :func:`causal_mask`, :func:`sliding_window` and :func:`causal_score` are FlexAttention's
  ``mask_mod`` and ``score_mod`` functions; :func:`flex_backward_error` says why
  FlexAttention cannot run backward on a device (None where it can).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from d2l_ext import memory, transformer

__all__ = ["SDPA_OPS", "AttentionMemory", "OpTraffic", "Traffic", "attention_memory",
           "attention_peaks", "causal_mask", "causal_score", "count_traffic",
           "flex_backward_error", "op_traffic", "sdpa_backend", "sdpa_op", "sliding_window"]


# ---------------------------------------------------------------------- traffic
@dataclass(frozen=True)
class OpTraffic:
    """One operation the dispatcher ran: its name (``bmm``, ``_softmax``) and the bytes it
    read from its tensor inputs and wrote to its outputs."""

    op: str
    read: int
    written: int


@dataclass(frozen=True)
class Traffic:
    """What :func:`count_traffic` counted: every op in order, the bytes read of each input
    (``read["q"]``, ``read["k"]``, ``read["v"]``) and the bytes written into the output."""

    ops: tuple[OpTraffic, ...]
    read: dict[str, int]
    written: int

    @property
    def total(self) -> int:
        """Bytes read and written by all ops: the traffic when every op's inputs and outputs
        live in memory, as in the naive attention."""
        return sum(op.read + op.written for op in self.ops)

    @property
    def io(self) -> int:
        """Bytes read of q, k and v plus bytes written into the output: the traffic when
        everything else (the tiles of scores, the running statistics) stays on chip."""
        return sum(self.read.values()) + self.written

    def by_op(self) -> dict[str, tuple[int, int]]:
        """(bytes read, bytes written) summed per op name, in the order the ops first ran."""
        sums: dict[str, list[int]] = {}
        for op in self.ops:
            entry = sums.setdefault(op.op, [0, 0])
            entry[0] += op.read
            entry[1] += op.written
        return {name: (r, w) for name, (r, w) in sums.items()}


def _unique_bytes(t: torch.Tensor) -> int:
    """The bytes of the distinct elements a tensor view covers: an expanded (stride 0)
    dimension counts once."""
    if t.numel() == 0:
        return 0
    try:
        sizes = [n for n, stride in zip(t.shape, t.stride()) if stride != 0]
    except RuntimeError:  # a layout without strides (sparse, oneDNN): all its elements
        return t.numel() * t.element_size()
    return math.prod(sizes) * t.element_size()


def _view_key(t: torch.Tensor) -> tuple:
    """What tells two views of one storage apart: where they start and how they step."""
    try:
        return t.data_ptr(), tuple(t.shape), t.stride()
    except RuntimeError:  # a layout without strides
        return t.data_ptr(), tuple(t.shape), None


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for t in value if isinstance(t, torch.Tensor)]
    return []


#: Ops that only allocate: their tensor inputs give shapes, and nothing is written.
_ALLOCATE = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}


class _TrafficMode(TorchDispatchMode):
    """Count each non-view op's bytes read (its inputs) and written (its outputs and the
    arguments it mutates), the reads of the named inputs and the writes per storage."""

    def __init__(self, named: Mapping[str, torch.Tensor]) -> None:
        super().__init__()
        self.named = [(name, StorageWeakRef(t.untyped_storage()), _view_key(t), t.data_ptr(),
                       t) for name, t in named.items()]
        self.ops: list[OpTraffic] = []
        self.reads: dict[str, int] = dict.fromkeys(named, 0)
        self.writes: dict[StorageWeakRef, int] = defaultdict(int)

    def _name_of(self, t: torch.Tensor) -> str | None:
        if not self.named:
            return None
        ref = StorageWeakRef(t.untyped_storage())
        for name, named_ref, view, _, _ in self.named:
            if ref == named_ref and view == _view_key(t):
                return name
        for name, named_ref, _, start, _ in self.named:
            if ref == named_ref and start == t.data_ptr():
                return name
        for name, named_ref, _, _, named_t in self.named:
            if ref == named_ref and _holds_element(named_t, t.data_ptr()):
                return name
        return None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.is_view:
            return out
        op = func._schema.name.split("::")[-1]
        if _returns_an_alias(func, args, kwargs, out):
            return out
        read = written = 0
        if op not in _ALLOCATE:
            metadata_only = op.endswith("_like") or op.startswith("new_")
            for i, arg in enumerate(func._schema.arguments):
                value = (kwargs.get(arg.name) if arg.kwarg_only or i >= len(args)
                         else args[i])
                for t in _tensors(value):
                    nbytes = _unique_bytes(t)
                    if arg.alias_info is not None and arg.alias_info.is_write:
                        written += nbytes
                        self.writes[StorageWeakRef(t.untyped_storage())] += nbytes
                    elif not metadata_only:
                        read += nbytes
                        name = self._name_of(t)
                        if name is not None:
                            self.reads[name] += nbytes
            results = out if isinstance(out, (list, tuple)) else (out,)
            for ret, value in zip(func._schema.returns, results):
                if ret.alias_info is not None:  # an argument it mutated, counted above
                    continue
                for t in _tensors(value):
                    nbytes = _unique_bytes(t)
                    written += nbytes
                    self.writes[StorageWeakRef(t.untyped_storage())] += nbytes
        self.ops.append(OpTraffic(op, read, written))
        return out


def _returns_an_alias(func, args, kwargs, out) -> bool:
    """Whether an op that mutates nothing returned only views of its inputs' storages (as
    ``_unsafe_view`` does, whose schema does not say so): then it moved nothing."""
    if any(a.alias_info is not None and a.alias_info.is_write for a in func._schema.arguments):
        return False
    outputs = _tensors(out if isinstance(out, (list, tuple)) else (out,))
    inputs = {StorageWeakRef(t.untyped_storage())
              for value in (*args, *kwargs.values()) for t in _tensors(value)}
    return bool(outputs) and all(StorageWeakRef(t.untyped_storage()) in inputs
                                 for t in outputs)


def _holds_element(t: torch.Tensor, address: int) -> bool:
    """Whether ``address`` is the address of one of ``t``'s elements (not merely inside its
    span, which the elements of an interleaved view share with its neighbours'). Assumes
    each stride steps over everything the smaller strides reach, as in a permuted or
    sliced contiguous tensor."""
    offset, rest = divmod(address - t.data_ptr(), t.element_size())
    if rest or offset < 0:
        return False
    try:
        dims = sorted(zip(t.stride(), t.shape), reverse=True)
    except RuntimeError:  # a layout without strides: its span is its own
        return offset < t.numel()
    for stride, n in dims:
        if stride == 0 or n == 1:
            continue
        index, offset = divmod(offset, stride)
        if index >= n:
            return False
    return offset == 0


def count_traffic(fn: Callable[..., torch.Tensor], q: torch.Tensor, k: torch.Tensor,
                  v: torch.Tensor, *args, **kwargs) -> Traffic:
    """Run ``fn(q, k, v, *args, **kwargs)`` without autograd and count the bytes each op
    reads and writes (a view moves nothing; an expanded dimension counts once; an op that
    only allocates moves nothing). Returns a :class:`Traffic`; ``written`` is the bytes
    written into the tensor ``fn`` returns. A read is booked to the input it is (same start,
    shape and strides), else to the input that starts where it starts (a transpose), else to
    the input one of whose elements it starts at (a slice); when two inputs are the same
    tensor, its reads go to the first of q, k, v."""
    mode = _TrafficMode({"q": q, "k": k, "v": v})
    with torch.no_grad(), mode:
        out = fn(q, k, v, *args, **kwargs)
    written = mode.writes.get(StorageWeakRef(out.untyped_storage()), 0)
    return Traffic(tuple(mode.ops), dict(mode.reads), written)


def op_traffic(fn: Callable[..., torch.Tensor], *args, **kwargs) -> Traffic:
    """Like :func:`count_traffic`, for any function of any tensors: the bytes each op reads
    and writes (``read`` is empty: no input is named)."""
    mode = _TrafficMode({})
    with torch.no_grad(), mode:
        out = fn(*args, **kwargs)
    written = mode.writes.get(StorageWeakRef(out.untyped_storage()), 0)
    return Traffic(tuple(mode.ops), {}, written)


# ---------------------------------------------------------------------- SDPA's choice
#: The fused kernels of ``scaled_dot_product_attention`` (aten op names) and the backend
#: each belongs to (as :func:`torch.nn.attention.sdpa_kernel` names them: flash, efficient,
#: cudnn, overrideable). The math backend has no op of its own below autograd: it is
#: composed of ordinary ops (``bmm``, ``_softmax``/``_safe_softmax``).
SDPA_OPS = {
    "_scaled_dot_product_flash_attention_for_cpu": "flash",
    "_scaled_dot_product_flash_attention": "flash",
    "_scaled_dot_product_efficient_attention": "efficient",
    "_scaled_dot_product_cudnn_attention": "cudnn",
    "_scaled_dot_product_fused_attention_overrideable": "overrideable",
    "_scaled_dot_product_attention_math_for_mps": "math",
}


class _OpNames(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func._schema.name.split("::")[-1])
        return func(*args, **(kwargs or {}))


def sdpa_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs) -> str:
    """The aten op that ``F.scaled_dot_product_attention(q, k, v, **kwargs)`` ran for these
    inputs on their device, in the current grad mode and under the current
    ``sdpa_kernel`` restriction: a fused kernel of :data:`SDPA_OPS`, or
    ``"_scaled_dot_product_attention_math"`` when none ran (the math backend)."""
    mode = _OpNames()
    with mode:
        F.scaled_dot_product_attention(q, k, v, **kwargs)
    return next((name for name in mode.names if name in SDPA_OPS),
                "_scaled_dot_product_attention_math")


def sdpa_backend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs) -> str:
    """Which implementation ``F.scaled_dot_product_attention(q, k, v, **kwargs)`` ran:
    ``"flash"`` (on a CPU, PyTorch's flash-style C++ kernel; on a GPU, FlashAttention),
    ``"efficient"`` (memory-efficient attention), ``"cudnn"``, ``"overrideable"`` or
    ``"math"`` (the plain composition that keeps the scores). Raises what SDPA raises when
    ``sdpa_kernel`` leaves no backend that accepts the inputs."""
    op = sdpa_op(q, k, v, **kwargs)
    return SDPA_OPS.get(op, "math")


# ---------------------------------------------------------------------- peak memory
@dataclass(frozen=True)
class AttentionMemory:
    """Bytes allocated by one call, above what existed before it: the peak during the
    forward pass, what stayed allocated after it (the output and what autograd saved), and
    the peak during the backward pass (None when it was not run; it includes the inputs'
    gradients)."""

    forward_peak: int
    kept: int
    backward_peak: int | None = None


def attention_memory(fn: Callable[..., torch.Tensor], q: torch.Tensor, k: torch.Tensor,
                     v: torch.Tensor, *args, backward: bool = False,
                     **kwargs) -> AttentionMemory:
    """Measure ``fn(q, k, v, *args, **kwargs)`` with :class:`d2l_ext.memory.Tracker` on
    q's device: without autograd, or, with ``backward``, recording the graph and running
    the backward pass from a gradient of ones (made before the measurement, like the
    inputs). Run ``fn`` once before, unmeasured, so that what libraries allocate once is
    not counted."""
    if backward:
        q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
        grad = torch.ones(*q.shape[:-1], v.shape[-1], dtype=v.dtype, device=v.device)
    with torch.set_grad_enabled(backward), memory.Tracker(q.device) as tracker:
        out = fn(q, k, v, *args, **kwargs)
        tracker.mark("forward")
        if backward:
            out.backward(grad)
            tracker.mark("backward")
        del out
    readings = tracker.readings
    return AttentionMemory(readings[0].peak, readings[0].allocated,
                           readings[1].peak if backward else None)


def attention_peaks(lengths: Iterable[int],
                    ways: Sequence[str] | Mapping[str, Callable[..., torch.Tensor]] = (
                        "naive", "tiled", "sdpa"),
                    *, batch: int = 1, heads: int = 1, d: int = 64,
                    dtype: torch.dtype = torch.float32, causal: bool = True,
                    backward: bool = False, device: torch.device | str = "cpu",
                    seed: int = 0) -> dict[str, list[AttentionMemory]]:
    """:func:`attention_memory` for each sequence length and each way: a name of
    :func:`d2l_ext.transformer.attention` (``naive``, ``tiled``, ``sdpa``, called with
    ``causal``) or, in a mapping, any function of (q, k, v). Random inputs of shape
    (batch, heads, s, d); each function runs once unmeasured before its measurement."""
    if not isinstance(ways, Mapping):
        ways = {how: (lambda q, k, v, how=how: transformer.attention(q, k, v, how, causal))
                for how in ways}
    generator = torch.Generator().manual_seed(seed)
    found: dict[str, list[AttentionMemory]] = {name: [] for name in ways}
    for s in lengths:
        q, k, v = (torch.randn(batch, heads, s, d, generator=generator).to(device, dtype)
                   for _ in range(3))
        for name, fn in ways.items():
            with torch.no_grad():
                fn(q, k, v)  # warm-up, unmeasured
            found[name].append(attention_memory(fn, q, k, v, backward=backward))
    return found


def cpu_flash_bytes(s: int, d: int = 64, *, batch_heads: int = 1, threads: int | None = None,
                    item: int = 4, s_kv: int | None = None) -> dict[str, int]:
    """The bytes PyTorch's CPU flash attention (``scaled_dot_product_attention``'s
    ``flash`` backend on a CPU, ``cpu_flash_attention`` in
    aten/src/ATen/native/cpu/FlashAttentionKernel.cpp) allocates for a forward pass:
    ``output`` (batch·heads·s·d elements of ``item`` bytes), ``logsumexp`` (one float32 per
    query row) and ``blocks``, each thread's work buffer in float32: a block of scores
    (q × kv), its row maxima and sums (2q) and a block of output (q × d), plus, for 16-bit
    inputs, the block of scores in that type. The query block q is 32 rows, 64 from 192
    queries on and 256 from 768 on (capped at s); the key block kv is 512 (capped at s_kv).
    Without oneDNN's packing, which the pinned kernel uses only for float16 on CPUs that
    support it (AMX-FP16), with 4 heads or more: it pads the blocks, and its reordered K and
    V live outside PyTorch's allocator."""
    if s < 1 or d < 1 or batch_heads < 1 or item not in (2, 4):
        raise ValueError("s, d and batch_heads are positive; item is 4 (float32) or 2 (16-bit)")
    s_kv = s if s_kv is None else s_kv
    threads = torch.get_num_threads() if threads is None else threads
    q = min(s, 256 if s >= 768 else 64 if s >= 192 else 32)
    kv = min(s_kv, 512)
    per_thread = 4 * (q * kv + 2 * q + q * d) + (item * q * kv if item == 2 else 0)
    return {"output": batch_heads * s * d * item, "logsumexp": batch_heads * s * 4,
            "blocks": threads * per_thread, "q_block": q, "kv_block": kv, "threads": threads}


# ---------------------------------------------------------------------- FlexAttention
def causal_mask(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor,
                kv_idx: torch.Tensor) -> torch.Tensor:
    """FlexAttention's ``mask_mod`` for causal attention: query i sees keys 0..i."""
    return q_idx >= kv_idx


def sliding_window(window: int) -> Callable[..., torch.Tensor]:
    """A causal ``mask_mod`` in which query i sees only keys i - window + 1 .. i."""
    if window < 1:
        raise ValueError(f"the window must hold at least 1 key, got {window}")

    def mask(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor,
             kv_idx: torch.Tensor) -> torch.Tensor:
        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)

    return mask


def causal_score(score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor,
                 kv_idx: torch.Tensor) -> torch.Tensor:
    """FlexAttention's ``score_mod`` for causal attention: the scores of later keys at -inf
    (every tile is still computed: a ``mask_mod`` in a block mask lets whole tiles be
    skipped)."""
    return torch.where(q_idx >= kv_idx, score, -float("inf"))


def flex_backward_error(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        **kwargs) -> str | None:
    """Try FlexAttention's forward and backward pass on q's device (eager, tiny sizes are
    enough); return the error's message, or None when both ran."""
    from torch.nn.attention.flex_attention import flex_attention

    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    try:
        flex_attention(q, k, v, **kwargs).sum().backward()
    except (NotImplementedError, RuntimeError) as error:
        return str(error)
    return None
