"""Writing kernels, measured: Triton's interpreter on a CPU, the bytes a kernel loads and
stores, and the code ``torch.compile`` generates.

* :func:`use_interpreter` makes Triton run kernels in its interpreter (NumPy, on the CPU)
  where no GPU is there; call it before any ``@triton.jit`` runs.
* :func:`count_memory` counts the bytes a Triton kernel's loads and stores request while it
  runs in the interpreter (masked-off elements excluded; a repeated load counts again): the
  kernel's own traffic to memory, as its code states it.
* :func:`page_faults` counts the fresh memory pages a function touches per call, the cost
  of allocating that a timing includes and a byte count does not; :class:`FaultCounter`
  counts them over the calls a timer makes.
* :func:`matmul_traffic` is the traffic of a tiled matrix product, block by block, to set
  beside that count.
* :func:`generated_code` runs a function under ``torch.compile`` and returns the code that
  Inductor generated for it; :func:`generated_kernels` names the kernels in that code.
* :func:`documented_triton_kernel` is the example of Triton code that Inductor writes for a
  GPU which PyTorch's documentation prints (``data/gpu_kernels/PROVENANCE.md``), for
  machines without one; :func:`triton_accesses` counts the loads and stores written in such
  a kernel.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources

import torch

__all__ = ["FaultCounter", "MemoryCount", "count_memory", "generated_code", "generated_kernels",
           "matmul_traffic", "page_faults", "documented_triton_kernel", "triton_accesses",
           "use_interpreter"]


def use_interpreter(device: torch.device | str) -> bool:
    """Whether Triton must interpret its kernels here: True on a CPU, where it then sets
    ``TRITON_INTERPRET=1``; False on a GPU, where Triton compiles them. Triton reads the
    variable when a kernel is defined with ``@triton.jit``, and each kernel keeps the mode it
    was defined in: call this before defining any kernel."""
    interpret = torch.device(device).type == "cpu"
    os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
    return interpret


@dataclass
class MemoryCount:
    """Bytes a kernel loaded and stored, and how many load and store instructions ran
    (one per program per ``tl.load``/``tl.store``)."""

    loaded: int = 0
    stored: int = 0
    loads: int = 0
    stores: int = 0

    @property
    def total(self) -> int:
        return self.loaded + self.stored


def _interpreting() -> bool:
    """Whether Triton runs kernels in its interpreter: TRITON_INTERPRET read as Triton reads
    it ("1", "true", "yes" or "on")."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in {"1", "true", "yes", "on"}


@contextlib.contextmanager
def count_memory() -> Iterator[MemoryCount]:
    """Count, while the block runs, the bytes that Triton kernels running in the interpreter
    load and store: the elements each ``tl.load``/``tl.store`` requests (its mask's true
    elements) times their size. An element loaded twice, or broadcast to many lanes, counts
    each time (on a GPU, caches may serve the repeats); atomic read-modify-write and
    compare-and-swap are not counted (atomic loads and stores are: the interpreter runs them
    as masked loads and stores).
    Raises where Triton compiles kernels instead (on a GPU, use a profiler), and when no
    kernel ran in the interpreter inside the block."""
    if not _interpreting():
        raise RuntimeError("count_memory counts kernels run in Triton's interpreter; call "
                           "d2l_ext.kernels.use_interpreter('cpu') before defining them.")
    from triton.runtime.interpreter import InterpreterBuilder

    count = MemoryCount()
    load, store = InterpreterBuilder.create_masked_load, InterpreterBuilder.create_masked_store

    def counted_load(self, ptrs, mask, other, cache_policy, is_volatile):
        out = load(self, ptrs, mask, other, cache_policy, is_volatile)
        count.loaded += int(mask.data.sum()) * out.data.dtype.itemsize
        count.loads += 1
        return out

    def counted_store(self, ptrs, value, mask, cache_policy):
        count.stored += int(mask.data.sum()) * value.data.dtype.itemsize
        count.stores += 1
        return store(self, ptrs, value, mask, cache_policy)

    InterpreterBuilder.create_masked_load = counted_load
    InterpreterBuilder.create_masked_store = counted_store
    try:
        yield count
    except RuntimeError as error:
        if "active drivers" in str(error):  # a kernel defined before use_interpreter('cpu')
            raise RuntimeError("a kernel in this block was compiled for a GPU, not interpreted: "
                               "kernels keep the mode they were defined in, so call "
                               "d2l_ext.kernels.use_interpreter('cpu') before defining "
                               "them") from error
        raise
    finally:
        InterpreterBuilder.create_masked_load = load
        InterpreterBuilder.create_masked_store = store
    if count.loads + count.stores == 0:
        raise RuntimeError("no kernel ran in Triton's interpreter inside the block: launch "
                           "the kernel inside `with count_memory():`, and define it after "
                           "d2l_ext.kernels.use_interpreter('cpu')")


def matmul_traffic(m: int, n: int, k: int, block_m: int, block_n: int, item: int = 4,
                   item_out: int | None = None) -> int:
    """Bytes a tiled product C = A B (A: m × k, B: k × n) moves when each program computes one
    ``block_m`` × ``block_n`` block of C: it reads its rows of A and its columns of B in full,
    so A is read once per column of blocks and B once per row of blocks, and C is written
    once. ``item`` is the inputs' element size, ``item_out`` C's (default: ``item``)."""
    item_out = item if item_out is None else item_out
    if min(m, n, k, block_m, block_n, item, item_out) < 1:
        raise ValueError("sizes, blocks and the element sizes must be positive")
    return (item * (m * k * math.ceil(n / block_n) + k * n * math.ceil(m / block_m))
            + item_out * m * n)


def generated_code(fn: Callable, *args, **kwargs) -> tuple[object, list[str]]:
    """``fn(*args, **kwargs)`` compiled with ``torch.compile`` (in a fresh compilation, so
    that the code is generated here): its result and the source code Inductor generated.
    It resets Dynamo first, which discards every function compiled so far in the process."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    return run_and_get_code(torch.compile(fn), *args, **kwargs)


#: How Inductor names the kernels it generates: C++ on a CPU, Triton on a GPU.
KERNEL_NAME = re.compile(r"^(cpp_fused_\w+|triton_\w+)\s*=\s*async_compile\.", re.MULTILINE)


def generated_kernels(code: str) -> list[str]:
    """The names of the kernels in a module that Inductor generated, in order."""
    return KERNEL_NAME.findall(code)


def documented_triton_kernel() -> str:
    """The example of Triton code that PyTorch's documentation ("Getting Started" with
    ``torch.compile``) prints for ``torch.sin(torch.cos(x))`` on a CUDA GPU, ``x`` 10,000
    float32 numbers: "similar to" the kernel Inductor generates, in the documentation's words,
    and edited (its layout is not Inductor's), so an illustration rather than one run's
    output. The text as published; source, commit and BSD-3 licence in
    ``d2l_ext/data/gpu_kernels/PROVENANCE.md``."""
    folder = resources.files("d2l_ext") / "data" / "gpu_kernels"
    return (folder / "inductor_cos_sin_example.txt").read_text(encoding="utf-8")


#: A call of tl.load or tl.store in a Triton kernel's source.
_ACCESS = re.compile(r"\btl\.(load|store)\s*\(")


def _code_of(line: str) -> str:
    """A line of Python without its comment: up to the first ``#`` outside a quoted string."""
    quote, escaped = "", False
    for i, char in enumerate(line):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#":
            return line[:i]
    return line


def triton_accesses(code: str) -> tuple[int, int]:
    """How many ``tl.load`` and ``tl.store`` calls the source of Triton kernels holds (a
    kernel, or a module Inductor generated, whose kernels sit in strings): the passes over
    memory each program makes, as written (a call inside a loop runs once per iteration).
    Comments do not count. Raises if the text holds no ``@triton.jit`` kernel."""
    if not isinstance(code, str):
        raise TypeError(f"pass the kernel's source as a str, got {type(code).__name__}")
    if "@triton.jit" not in code:
        raise ValueError("no Triton kernel in this text (no @triton.jit): pass the source of "
                         "a kernel, e.g. Inductor's output on a GPU")
    calls = _ACCESS.findall("\n".join(_code_of(line) for line in code.splitlines()))
    return calls.count("load"), calls.count("store")


def _minor_faults() -> int | None:
    try:
        import resource
    except ImportError:  # Windows
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class FaultCounter:
    """``fn`` that also counts the process's minor page faults during each of its calls, so
    that a timer calling it counts the fresh pages of the calls it makes, its warm-up and
    calibration included (whether the allocator hands large buffers back to the operating
    system changes from run to run, and a count taken apart from the timing need not match
    it). ``per_call`` is ``None`` where the platform does not count page faults (no
    ``resource`` module) or before any call."""

    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn
        self.faults = 0
        self.calls = 0
        self.counts = _minor_faults() is not None

    def __call__(self) -> object:
        before = _minor_faults() if self.counts else 0
        out = self.fn()
        if self.counts:
            self.faults += _minor_faults() - before
        self.calls += 1
        return out

    @property
    def per_call(self) -> float | None:
        return self.faults / self.calls if self.counts and self.calls else None


def page_faults(fn: Callable[[], object], calls: int = 10) -> float | None:
    """Minor page faults per call of ``fn`` (after one untimed call): fresh pages of memory
    that the operating system hands the process, zeroed, when ``fn`` allocates large buffers
    anew. ``None`` where the platform does not count them (no ``resource`` module)."""
    if calls < 1:
        raise ValueError(f"calls must be at least 1, got {calls}")
    fn()
    counter = FaultCounter(fn)
    for _ in range(calls):
        counter()
    return counter.per_call
