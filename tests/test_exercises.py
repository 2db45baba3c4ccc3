"""The exercises' check cells accept every right answer on every machine the book supports
(CPU only, one GPU, several GPUs), reject wrong ones, and answer in the reader's language.

The cells are taken from the chapter sources and run with the machine simulated: only the
few names a check reads are provided.
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("yaml", reason="the book tools need the full environment")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from pipeline import config, sources  # noqa: E402

from d2l_ext.utils import message  # noqa: E402

D2L = SimpleNamespace(message=message)


def check_cell(chapter: str, marker: str, framework: str | None = None) -> str:
    """The source of the code cell of ``chapter`` (English) that contains ``marker``."""
    parsed = sources.parse(config.CHAPTERS / "en" / f"{chapter}.md")
    found = [c.source for c in parsed.cells if c.kind == "code" and marker in c.source
             and c.framework == framework]
    assert len(found) == 1, f"{chapter}: {len(found)} cells with {marker!r} for {framework}"
    return found[0]


def run(source: str, answer_line: str, lang: str = "en", **names) -> str:
    """Run a check cell with its first line replaced by ``answer_line``; what it prints."""
    lines = source.splitlines()
    lines[0] = answer_line
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("D2L_LANG", lang)
        with contextlib.redirect_stdout(out):
            exec("\n".join(lines), {"d2l": D2L} | names)
    return out.getvalue()


# ------------------------------------------------------------ asynchronous computation
@pytest.mark.parametrize("device, right, wrong", [
    ("cpu", {"a", "b", "c", "d", "e"}, {"b", "c", "e"}),  # CPU operators are synchronous
    ("cuda", {"b", "c", "e"}, {"a", "b", "c", "d", "e"}),
])
def test_async_exercise_2_torch_accepts_the_answer_of_each_device(device, right, wrong):
    cell = check_cell("async-computation", "exercise 2", "torch")
    machine = SimpleNamespace(type=device)
    assert run(cell, f"blocking = {right!r}", device=machine) == "Correct.\n"
    assert "Not quite" in run(cell, f"blocking = {wrong!r}", device=machine)
    assert run(cell, f"blocking = {right!r}", "zh", device=machine) == "正确。\n"


def test_async_exercise_2_mxnet():
    cell = check_cell("async-computation", "exercise 2", "mxnet")
    assert run(cell, "blocking = {'b', 'c', 'e'}") == "Correct.\n"
    assert "Not quite" in run(cell, "blocking = {'a', 'b', 'c', 'd', 'e'}")
    assert run(cell, "blocking = set()", "zh").startswith("练习 2")


@pytest.mark.parametrize("t1, t2, t3, measured_factor", [
    (8e-6, 0.0, 10e-6, 1.0),      # PyTorch on a CPU: t2 is zero
    (5e-6, 2e-6, 30e-6, 1.3),     # a GPU: launches dominate, the model is 30 % off
    (88e-6, 11e-6, 35e-6, 0.97),  # MXNet on a busy CPU
])
def test_async_exercise_1_accepts_the_model_whatever_the_machine(t1, t2, t3, measured_factor):
    cell = check_cell("async-computation", "exercise 1")
    num_ops = 10_000

    def predict_async(count):
        return max(count * t1, count * t2) + min(t1, t2) + t3

    names = dict(num_ops=num_ops, predict_async=predict_async,
                 run_async=lambda count: measured_factor * predict_async(count))
    right = predict_async(4 * num_ops)
    printed = run(cell, f"prediction = {right!r}", **names)
    assert printed.startswith("Right")
    assert "Measured" in printed
    assert run(cell, f"prediction = {right * 0.5!r}", **names).startswith("Not quite")
    assert run(cell, f"prediction = {right!r}", "zh", **names).startswith("正确")


# ------------------------------------------------------------ concise multi-GPU training
def test_multi_gpu_exercise_1():
    cell = check_cell("multi-gpu-concise", "exercise 1")
    assert run(cell, "batch_4, lr_4 = 1024, 0.4") == "Correct.\n"
    assert "Not quite" in run(cell, "batch_4, lr_4 = 256, 0.1")
    assert run(cell, "batch_4, lr_4 = 1024, 0.4", "zh") == "正确。\n"


@pytest.mark.parametrize("framework", ["torch", "mxnet"])
def test_multi_gpu_exercise_2(framework, numpy_too_new):
    if framework == "mxnet" and numpy_too_new:
        pytest.skip("MXNet 1.9.1 needs numpy < 1.24")
    d2l = pytest.importorskip(f"d2l_ext.{framework}")
    cell = check_cell("multi-gpu-concise", "exercise 2", framework)
    names = {"torch": pytest.importorskip("torch")} if framework == "torch" else {
        "np": pytest.importorskip("mxnet").np}
    names["d2l"] = d2l
    assert run(cell, "shard_sizes = [4, 3, 3]", **names) == "Correct.\n"
    assert "Not quite" in run(cell, "shard_sizes = [5, 5, 0]", **names)


# ------------------------------------------------------------ tuning tips
def test_tuning_exercise_1_cost_model():
    cell = check_cell("tuning-tips", "exercise 1")
    assert run(cell, "t_fixed_ms, t_image_ms, overhead_bound = 8, 6 / 192, True").startswith(
        "Correct")
    assert run(cell, "t_fixed_ms, t_image_ms, overhead_bound = 8.0, 0.031, True").startswith(
        "Correct")  # the slope rounded as a reader would write it
    assert "Not quite" in run(cell, "t_fixed_ms, t_image_ms, overhead_bound = 8, 6 / 192, False")
    assert "Not quite" in run(cell, "t_fixed_ms, t_image_ms, overhead_bound = 4, 6 / 256, True")
    assert run(cell, "t_fixed_ms = t_image_ms = overhead_bound = None", "zh").startswith("练习 1")
    assert run(cell, "t_fixed_ms, t_image_ms, overhead_bound = 8, 6 / 192, True",
               "zh").startswith("正确")


def test_tuning_exercise_2_bytes_of_gelu():
    cell = check_cell("tuning-tips", "exercise 2")
    assert run(cell, "unfused_bytes, fused_bytes = 44, 8").startswith("Correct")
    assert "Not quite" in run(cell, "unfused_bytes, fused_bytes = 40, 8")
    assert run(cell, "unfused_bytes, fused_bytes = 44, 8", "zh").startswith("正确")


@pytest.mark.parametrize("framework", ["torch", "mxnet"])
def test_tuning_exercise_3_what_float16_loses(framework, numpy_too_new):
    if framework == "mxnet" and numpy_too_new:
        pytest.skip("MXNet 1.9.1 needs numpy < 1.24")
    cell = check_cell("tuning-tips", "exercise 3", framework)
    names = {"torch": pytest.importorskip("torch")} if framework == "torch" else {
        "np": pytest.importorskip("mxnet").np}
    right = "zero_in_fp16, zero_in_bf16 = {1e-8, 1e-9}, set()"
    assert run(cell, right, **names) == "Correct.\n"
    assert run(cell, "zero_in_fp16, zero_in_bf16 = [1e-9, 1e-8], []", **names) == "Correct.\n"
    wrong = run(cell, "zero_in_fp16, zero_in_bf16 = {1e-6, 1e-8, 1e-9}, set()", **names)
    assert "Not quite" in wrong and "[1e-09, 1e-08]" in wrong
    assert run(cell, right, "zh", **names) == "正确。\n"


# ------------------------------------------------------------ host-device synchronisation
def test_sync_exercise_1_which_operations_wait():
    cell = check_cell("host-device-sync", "exercise 1")
    assert run(cell, "syncing = {'c', 'd', 'f'}").startswith("Correct")
    assert run(cell, "syncing = ['f', 'd', 'c']").startswith("Correct")
    assert "Not quite" in run(cell, "syncing = {'b', 'c', 'd', 'f'}")
    assert run(cell, "syncing = {'c', 'd', 'f'}", "zh").startswith("正确")
    assert run(cell, "syncing = None", "zh").startswith("练习 1")


def test_sync_exercise_2_counting_steps():
    cell = check_cell("host-device-sync", "exercise 2")
    assert run(cell, "num_steps_answer, num_distinct_answer = 3, 4").startswith("Correct")
    assert "Not quite" in run(cell, "num_steps_answer, num_distinct_answer = 7, 8")
    assert run(cell, "num_steps_answer, num_distinct_answer = 3, 4", "zh").startswith("正确")


# ------------------------------------------------------------ GPU basics
def test_gpu_basics_exercise_1_copy_time():
    cell = check_cell("gpu-basics", "exercise 1")
    assert run(cell, "copy_ms = 43").startswith("Correct")
    assert run(cell, "copy_ms = 2**28 * 4 / 25e9 * 1000").startswith("Correct")
    assert "Not quite" in run(cell, "copy_ms = 10.7")  # forgot the 4 bytes
    assert run(cell, "copy_ms = 42.9", "zh").startswith("正确")
    assert run(cell, "copy_ms = None", "zh").startswith("练习 1")


def test_gpu_basics_exercise_2_training_state():
    cell = check_cell("gpu-basics", "exercise 2")
    assert run(cell, "training_state_mb = 120").startswith("Correct")
    assert "Not quite" in run(cell, "training_state_mb = 80")  # forgot the momentum
    assert "Not quite" in run(cell, "training_state_mb = 114.4")  # MiB, not MB
    assert run(cell, "training_state_mb = 120.0", "zh").startswith("正确")


def test_gpu_basics_exercise_3_what_orders_the_streams():
    cell = check_cell("gpu-basics", "exercise 3")
    assert run(cell, "makes_it_right = {'a', 'b'}").startswith("Correct")
    assert run(cell, "makes_it_right = ['b', 'a']").startswith("Correct")
    assert "Not quite" in run(cell, "makes_it_right = {'a', 'c'}")
    assert run(cell, "makes_it_right = {'a', 'b'}", "zh").startswith("正确")
