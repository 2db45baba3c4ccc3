"""Writing kernels, measured: Triton's interpreter on a CPU, the bytes a kernel loads and
stores, and the code ``torch.compile`` generates.

* :func:`use_interpreter` makes Triton run kernels in its interpreter (NumPy, on the CPU)
  where no GPU is there; call it before any ``@triton.jit`` runs.
* :func:`count_memory` counts the bytes a Triton kernel's loads and stores touch while it
  runs in the interpreter (masked-off elements excluded): the kernel's own traffic to
  memory, as its code states it.
* :func:`matmul_traffic` is the traffic of a tiled matrix product, block by block, to set
  beside that count.
* :func:`generated_code` runs a function under ``torch.compile`` and returns the code that
  Inductor generated for it; :func:`generated_kernels` names the kernels in that code.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

__all__ = ["MemoryCount", "count_memory", "generated_code", "generated_kernels",
           "matmul_traffic", "use_interpreter"]


def use_interpreter(device: torch.device | str) -> bool:
    """Whether Triton must interpret its kernels here: True on a CPU, where it then sets
    ``TRITON_INTERPRET=1`` (read when a kernel is defined with ``@triton.jit``, so call this
    first); False on a GPU, where Triton compiles them. Raises if kernels defined earlier
    in this process were compiled and now would be interpreted, or the other way round."""
    interpret = torch.device(device).type == "cpu"
    wanted = "1" if interpret else "0"
    if os.environ.get("TRITON_INTERPRET", wanted) != wanted and "triton" in _imported():
        raise RuntimeError("Triton was imported with TRITON_INTERPRET="
                           f"{os.environ['TRITON_INTERPRET']!r}; restart the kernel and call "
                           "use_interpreter before defining any kernel.")
    os.environ["TRITON_INTERPRET"] = wanted
    return interpret


def _imported() -> set[str]:
    import sys

    return {name.split(".")[0] for name in sys.modules}


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


@contextlib.contextmanager
def count_memory() -> Iterator[MemoryCount]:
    """Count, while the block runs, the bytes that Triton kernels running in the interpreter
    load and store: the elements each ``tl.load``/``tl.store`` touches (its mask's true
    elements) times their size. Raises where Triton compiles kernels instead (on a GPU, use
    a profiler)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
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
    finally:
        InterpreterBuilder.create_masked_load = load
        InterpreterBuilder.create_masked_store = store


def matmul_traffic(m: int, n: int, k: int, block_m: int, block_n: int, item: int = 4) -> int:
    """Bytes a tiled product C = A B (A: m × k, B: k × n) moves when each program computes one
    ``block_m`` × ``block_n`` block of C: it reads its rows of A and its columns of B in full,
    so A is read once per column of blocks and B once per row of blocks, and C is written
    once."""
    if min(m, n, k, block_m, block_n, item) < 1:
        raise ValueError("sizes, blocks and the item size must be positive")
    return item * (m * k * math.ceil(n / block_n) + k * n * math.ceil(m / block_m) + m * n)


def generated_code(fn: Callable, *args, **kwargs) -> tuple[object, list[str]]:
    """``fn(*args, **kwargs)`` compiled with ``torch.compile`` (in a fresh compilation, so
    that the code is generated here): its result and the source code Inductor generated."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    return run_and_get_code(torch.compile(fn), *args, **kwargs)


#: How Inductor names the kernels it generates: C++ on a CPU, Triton on a GPU.
KERNEL_NAME = re.compile(r"^(cpp_fused_\w+|triton_\w+)\s*=\s*async_compile\.", re.MULTILINE)


def generated_kernels(code: str) -> list[str]:
    """The names of the kernels in a module that Inductor generated, in order."""
    return KERNEL_NAME.findall(code)
