"""d2l_ext.kernels and the kernels page: Triton's interpreter on a CPU, the bytes a kernel
loads and stores, the tiled product's traffic, and the code torch.compile generates."""

import hashlib
import math
import mmap
import os
import re
import sys
from importlib import resources
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from d2l_ext import attention, gpt_counts, kernels  # noqa: E402

kernels.use_interpreter("cpu")  # before any kernel of this module is defined
triton = pytest.importorskip("triton", reason="the kernels page needs Triton")
import triton.language as tl  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_matmul_traffic_reads_a_once_per_column_of_blocks_and_b_once_per_row():
    # 100 × 70 times 70 × 50, blocks of 32: A read ⌈50/32⌉ = 2 times, B ⌈100/32⌉ = 4 times
    assert kernels.matmul_traffic(100, 50, 70, 32, 32) == 4 * (100 * 70 * 2 + 70 * 50 * 4
                                                               + 100 * 50)
    assert kernels.matmul_traffic(64, 64, 64, 64, 64, item=2) == 2 * 3 * 64 * 64
    # float16 inputs, a float32 output: C's m·n elements at 4 bytes, A and B at 2
    assert kernels.matmul_traffic(64, 64, 64, 64, 64, item=2, item_out=4) == (
        2 * 2 * 64 * 64 + 4 * 64 * 64)
    with pytest.raises(ValueError, match="positive"):
        kernels.matmul_traffic(64, 64, 64, 0, 64)
    with pytest.raises(ValueError, match="positive"):
        kernels.matmul_traffic(64, 64, 64, 64, 64, item_out=0)


@pytest.mark.parametrize("value", ["0", "", "false", "off"])
def test_count_memory_refuses_compiled_kernels(monkeypatch, value):
    monkeypatch.setenv("TRITON_INTERPRET", value)
    with pytest.raises(RuntimeError, match="use_interpreter"):
        with kernels.count_memory():
            pass


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "yes", "on"])
def test_count_memory_reads_the_interpreter_switch_as_triton_does(monkeypatch, value):
    """Every spelling Triton takes for "interpret" is accepted; the block then needs a kernel."""
    monkeypatch.setenv("TRITON_INTERPRET", value)
    with pytest.raises(RuntimeError, match="no Triton kernel|no kernel"):
        with kernels.count_memory():
            pass


def test_count_memory_counts_masked_elements_only_and_restores_the_interpreter():
    from triton.runtime.interpreter import InterpreterBuilder

    @triton.jit
    def copy(src, dst, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(dst + offsets, tl.load(src + offsets, mask=offsets < n), mask=offsets < n)

    load = InterpreterBuilder.create_masked_load
    for n, dtype in ((1, torch.float32), (100, torch.bfloat16), (129, torch.int64)):
        src = torch.arange(n).to(dtype)
        dst = torch.zeros_like(src)
        with kernels.count_memory() as count:
            copy[(triton.cdiv(n, 64),)](src, dst, n, BLOCK=64)
        assert torch.equal(dst, src)
        assert count.loaded == count.stored == n * src.element_size()
        assert count.loads == count.stores == triton.cdiv(n, 64)
    assert InterpreterBuilder.create_masked_load is load


def test_count_memory_counts_nothing_outside_its_block_and_needs_a_kernel_inside():
    @triton.jit
    def fill(dst, n, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        tl.store(dst + offsets, tl.zeros((BLOCK,), tl.float32) + 1.0, mask=offsets < n)

    out = torch.zeros(10)
    fill[(1,)](out, 10, BLOCK=16)  # not counted
    with kernels.count_memory() as count:
        fill[(1,)](out, 3, BLOCK=16)
    assert (count.stored, count.stores, count.loaded) == (12, 1, 0)
    with pytest.raises(RuntimeError, match="no kernel ran"):
        with kernels.count_memory():
            fill[(1,)]  # indexed, never launched


def test_count_memory_counts_each_load_as_requested():
    """A broadcast load counts for every lane: the bytes requested, not the distinct bytes."""
    @triton.jit
    def broadcast(src, dst, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        tl.store(dst + offsets, tl.load(src + offsets * 0))

    out = torch.empty(64)
    with kernels.count_memory() as count:
        broadcast[(1,)](torch.ones(1), out, BLOCK=64)
    assert (count.loaded, count.stored) == (64 * 4, 64 * 4)


def test_page_faults_counts_fresh_memory_per_call():
    faults = kernels.page_faults(lambda: torch.ones(16 * 2**20), calls=3)  # 64 MiB each call
    if faults is None:
        pytest.skip("this platform does not count page faults")
    assert faults >= 1000  # 64 MiB from the system: thousands of fresh pages
    buffer = torch.empty(16 * 2**20)
    assert kernels.page_faults(lambda: buffer.fill_(1.0), calls=3) < 100  # reused memory
    with pytest.raises(ValueError, match="at least 1"):
        kernels.page_faults(lambda: None, calls=0)


def test_generated_kernels_names_cpp_and_triton_kernels():
    code = ("cpp_fused_add_gelu_0 = async_compile.cpp_pybinding(['const float*'], '''\n"
            "triton_poi_fused_add_0 = async_compile.triton('triton_poi_fused_add_0', '''\n"
            "x = cpp_fused_not_a_kernel_line\n")
    assert kernels.generated_kernels(code) == ["cpp_fused_add_gelu_0", "triton_poi_fused_add_0"]


def test_generated_code_fuses_a_bias_and_a_gelu_into_one_cpu_kernel():
    x, bias = torch.randn(8, 64), torch.randn(64)
    out, code = kernels.generated_code(lambda x, b: torch.nn.functional.gelu(x + b), x, bias)
    torch.testing.assert_close(out, torch.nn.functional.gelu(x + bias))
    assert kernels.generated_kernels(code[0]) == ["cpp_fused_add_gelu_0"]


def test_use_interpreter_sets_the_mode_for_kernels_defined_afterwards(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not kernels.use_interpreter("cuda")
    assert os.environ["TRITON_INTERPRET"] == "0"
    assert kernels.use_interpreter("cpu") and kernels.use_interpreter(torch.device("cpu"))
    assert os.environ["TRITON_INTERPRET"] == "1"


# ------------------------------------------------------------ the page's own kernels
def page_names():
    """Run the PyTorch cells of the kernels page (en) that define its kernels, at smoke size,
    and return their names."""
    pytest.importorskip("yaml", reason="reading a page needs the book tools' environment")
    sys.path.insert(0, str(ROOT / "tools"))
    from pipeline import config, sources

    names = {"torch": torch, "F": torch.nn.functional, "math": math, "triton": triton, "tl": tl,
             "kernels": kernels, "attention": attention, "gpt_counts": gpt_counts,
             "device": torch.device("cpu"), "interpreting": True, "smoke": True}
    chapter = sources.parse(config.CHAPTERS / "en" / "transformers-kernels.md")
    for cell in chapter.cells:
        if (cell.kind == "code" and cell.framework == "torch"
                and re.search(r"^@triton\.jit", cell.source, re.M)):
            exec(cell.source, names)
    return names


def test_the_pages_kernels_equal_pytorch_and_load_what_the_formulas_count():
    names = page_names()
    assert torch.equal(names["z"], names["x"] + names["y"])
    assert names["add_count"].loaded == 2 * 4 * 1000 and names["add_count"].stored == 4 * 1000
    rows, cols = names["rows"], names["cols"]
    assert names["softmax_error"] < 1e-6
    assert names["fused_count"].total == 2 * 4 * rows * cols
    assert names["composed"].total == 32 * rows * cols + 24 * rows  # exercise 2's count
    size = names["size"]
    for block, (counted, error) in names["tiled"].items():
        assert counted == kernels.matmul_traffic(size, size, size, block, block)
        assert error < 1e-3
    s = names["s_att"]
    assert names["attention_error"] < 1e-5
    assert names["attention_count"].total == 8 * gpt_counts.causal_attention_traffic(
        s, 64, 64, 64, item=4)


def test_the_pages_attention_kernel_at_odd_lengths_and_one_block():
    triton_attention = page_names()["triton_attention"]
    for s, block in ((1, 16), (17, 16), (64, 64), (70, 32)):
        q, k, v = (torch.randn(1, 2, s, 16) for _ in range(3))
        with kernels.count_memory() as count:
            out = triton_attention(q, k, v, block=block)
        torch.testing.assert_close(out, torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True), atol=1e-5, rtol=1e-5)
        assert count.total == 2 * gpt_counts.causal_attention_traffic(s, 16, block, block, 4)


def test_the_documented_triton_kernel_is_the_file_its_provenance_names():
    code = kernels.documented_triton_kernel()
    provenance = (resources.files("d2l_ext") / "data" / "gpu_kernels" / "PROVENANCE.md").read_text()
    digest = hashlib.sha256(code.encode("utf-8")).hexdigest()
    assert digest in provenance and "inductor_cos_sin_example.txt" in provenance
    assert "BSD-3-Clause" in provenance and "LICENSE-pytorch.txt" in provenance
    assert "@triton.jit" in code and "tl.cos(tmp0)" in code and "tl.sin(tmp1)" in code
    assert kernels.triton_accesses(code) == (1, 1)  # two operations, one pass over memory


def test_triton_accesses_counts_calls_not_comments_and_wants_a_kernel():
    code = ("@triton.jit\n"
            "def k(a, b, out, n, BLOCK: tl.constexpr):\n"
            "    # tl.load(a) in a comment is no call\n"
            "    x = tl.load(a + offs, mask=m)\n"
            "    y = tl.load (b + offs, mask=m)\n"
            "    tl.store(out + offs, x + y, mask=m)\n"
            "    tl.store(out + n + offs, x * y, mask=m)  # tl.store( again\n")
    assert kernels.triton_accesses(code) == (2, 2)
    with pytest.raises(ValueError, match="no Triton kernel"):
        kernels.triton_accesses("extern \"C\" void cpp_fused_add_0(const float* in_ptr0)")
    with pytest.raises(TypeError, match="as a str"):
        kernels.triton_accesses(b"@triton.jit")
    inline = '@triton.jit\ndef k(p, q):\n    s = "#"; tl.load(p)\n    tl.store(q, "a#b", m)\n'
    assert kernels.triton_accesses(inline) == (1, 1)  # a # inside a string is no comment
    module = ("k = async_compile.triton('k', '''\n@triton.jit\ndef k(p, q):\n"
              "    tl.store(q, tl.load(p) + 1)\n''')\n")  # Inductor's module: kernels in strings
    assert kernels.triton_accesses(module) == (1, 1)


def test_fault_counter_counts_the_calls_it_wraps():
    keep = []

    def fresh_pages():  # a new anonymous mapping, written through: it must fault its pages in
        block = mmap.mmap(-1, 8 << 20)
        block.write(b"\1" * (8 << 20))
        keep.append(block)

    counter = kernels.FaultCounter(fresh_pages)
    assert counter.per_call is None  # no call yet
    for _ in range(3):
        counter()
    assert counter.calls == 3
    if counter.counts:  # where the platform counts page faults (huge pages: fewer, not none)
        assert counter.per_call >= 1
    quiet = kernels.FaultCounter(lambda: sum(range(10)))
    assert quiet() == 45 and quiet.calls == 1


def test_triton_accesses_reads_escaped_backslashes_before_a_comment():
    code = '@triton.jit\ndef k(p):\n    s = "a\\\\"; x = tl.load(p)  # tl.store(p, x)\n'
    assert kernels.triton_accesses(code) == (1, 0)
