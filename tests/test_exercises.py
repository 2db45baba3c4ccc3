"""The exercises' check cells accept every right answer on every machine the book supports
(CPU only, one GPU, several GPUs), reject wrong ones, and answer in the reader's language;
the checks live in ``d2l_ext.exercises``, so that no page or notebook shows an answer.

The cells are taken from the chapter sources and run with the machine simulated: only the
few names a check reads are provided (``d2l.check_exercise`` for the cell's framework).
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("yaml", reason="the book tools need the full environment")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from page_cells import cell_with_presentation  # noqa: E402
from pipeline import config, sources  # noqa: E402

from d2l_ext import exercises  # noqa: E402
from d2l_ext.catalogue import figure_text, listing, say  # noqa: E402
from d2l_ext.utils import message, show  # noqa: E402

D2L = SimpleNamespace(message=message, say=say, figure_text=figure_text, show=show)


class CellSource(str):
    """A cell's source that remembers the cell's framework (``None``: both)."""

    framework: str | None


def check_cell(chapter: str, marker: str, framework: str | None = None) -> CellSource:
    """The source of the code cell of ``chapter`` (English) that contains ``marker``, with
    the ``hide-input`` cells right after it (a cell split into the computation and its
    collapsed presentation runs as one)."""
    parsed = sources.parse(config.CHAPTERS / "en" / f"{chapter}.md")
    cell = CellSource(cell_with_presentation(parsed.cells, marker, framework))
    cell.framework = framework
    return cell


def chapter_function(chapter: str, name: str) -> str:
    """The source of the top-level function ``name`` that a code cell of ``chapter`` defines."""
    text = (config.CHAPTERS / "en" / f"{chapter}.md").read_text(encoding="utf-8")
    found = re.search(rf"^def {name}\(.*?(?=^\S)", text, re.M | re.S)
    assert found, f"{chapter}: no function {name}"
    return found.group(0)


def tuning_joined():
    """The tuning chapter's ``joined`` helper (``d2l_ext.turns``, which its pages import)."""
    from d2l_ext import turns

    return turns.joined


SWITCHES_PAGE = "tuning-tips-switches"  # the tuning chapter's section page with the switches


def run(source: str, answer_line: str, lang: str = "en", framework: str | None = None,
        **names) -> str:
    """Run a check cell with its first line replaced by ``answer_line``; what it prints.

    ``d2l.check_exercise`` checks for ``framework``, by default the cell's (``torch`` for a
    cell of both frameworks); ``names`` may hold a real ``d2l`` module instead."""
    framework = framework or getattr(source, "framework", None) or "torch"
    d2l = SimpleNamespace(message=message, say=say, figure_text=figure_text,
                          check_exercise=exercises.checker(framework))
    lines = source.splitlines()
    lines[0] = answer_line
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("D2L_LANG", lang)
        with contextlib.redirect_stdout(out):
            exec("\n".join(lines), {"d2l": d2l} | names)
    return out.getvalue()


# ------------------------------------------------------------ asynchronous computation
@pytest.mark.parametrize("device, right, wrong", [
    ("cpu", {"a", "b", "c", "d", "e"}, {"b", "c", "e"}),  # CPU operators are synchronous
    ("cuda", {"b", "c", "e"}, {"a", "b", "c", "d", "e"}),
])
def test_async_exercise_2_torch_accepts_the_answer_of_each_device(device, right, wrong):
    cell = check_cell("async-computation", "exercise 2", "torch")
    machine = SimpleNamespace(type=device)
    assert run(cell, f"blocking = {right!r}", device=machine).startswith("Correct")
    assert run(cell, f"blocking = {sorted(right)!r}", device=machine).startswith("Correct")
    wrong_says = run(cell, f"blocking = {wrong!r}", device=machine)
    assert wrong_says.startswith("Not quite") and "{" not in wrong_says  # no letters given
    assert run(cell, f"blocking = {right!r}", "zh", device=machine).startswith("正确")
    assert run(cell, "blocking = set()", device=machine).startswith("Exercise 2")


def test_async_exercise_2_mxnet():
    cell = check_cell("async-computation", "exercise 2", "mxnet")
    assert run(cell, "blocking = {'b', 'c', 'e'}").startswith("Correct")
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
    assert printed.startswith("Correct")
    assert "Measured" in printed
    assert run(cell, f"prediction = {right * 0.5!r}", **names).startswith("Not quite")
    assert run(cell, f"prediction = {right!r}", "zh", **names).startswith("正确")
    assert run(cell, "prediction = None", "zh", **names).startswith("练习 1")


# ------------------------------------------------------------ concise multi-GPU training
def test_multi_gpu_exercise_1():
    cell = check_cell("multi-gpu-concise", "exercise 1")
    assert run(cell, "batch_4, lr_4 = 1024, 0.4").startswith("Correct")
    assert run(cell, "batch_4, lr_4 = 1024.0, 0.4").startswith("Correct")
    assert "Not quite" in run(cell, "batch_4, lr_4 = 256, 0.1")
    assert run(cell, "batch_4, lr_4 = 1024, 0.4", "zh").startswith("正确")
    assert run(cell, "batch_4, lr_4 = None, None", "zh").startswith("练习 1")


@pytest.mark.parametrize("framework", ["torch", "mxnet"])
def test_multi_gpu_exercise_2(framework, numpy_too_new):
    if framework == "mxnet" and numpy_too_new:
        pytest.skip("MXNet 1.9.1 needs numpy < 1.24")
    d2l = pytest.importorskip(f"d2l_ext.{framework}")
    cell = check_cell("multi-gpu-concise", "exercise 2")
    names = {"d2l": d2l}  # the real module: its check_exercise knows its framework
    assert run(cell, "shard_sizes = [4, 3, 3]", **names).startswith("Correct")
    assert run(cell, "shard_sizes = (4, 3, 3)", "zh", **names).startswith("正确")
    wrong = run(cell, "shard_sizes = [5, 5, 0]", **names)
    assert wrong.startswith("Not quite") and "4" not in wrong  # the hint, not the sizes
    assert "Not quite" in run(cell, "shard_sizes = [3, 3, 4]", **names)
    assert run(cell, "shard_sizes = None", **names).startswith("Exercise 2")


# ------------------------------------------------------------ tuning tips
def test_tuning_exercise_1_cost_model():
    cell = check_cell("tuning-tips", "exercise 1")
    assert run(cell, "t_fixed_ms, t_image_ms, overhead_bound = 8, 6 / 192, True").startswith(
        "Correct")
    assert run(cell, "t_fixed_ms, t_image_ms, overhead_bound = 8.0, 0.031, True").startswith(
        "Correct")  # the slope rounded as a reader would write it
    assert run(cell, "t_fixed_ms, t_image_ms, overhead_bound = 8, 0.03, True").startswith(
        "Correct")  # rounded to two digits
    assert "Not quite" in run(cell, "t_fixed_ms, t_image_ms, overhead_bound = 8, 6 / 192, False")
    assert "Not quite" in run(cell, "t_fixed_ms, t_image_ms, overhead_bound = 4, 6 / 256, True")
    assert run(cell, "t_fixed_ms = t_image_ms = overhead_bound = None", "zh").startswith("练习 1")
    assert run(cell, "t_fixed_ms, t_image_ms, overhead_bound = 8, 6 / 192, True",
               "zh").startswith("正确")


def test_tuning_switches_exercise_1_bytes_of_gelu():
    cell = check_cell(SWITCHES_PAGE, "exercise 1")
    assert run(cell, "unfused_bytes, fused_bytes = 44, 8").startswith("Correct")
    assert "Not quite" in run(cell, "unfused_bytes, fused_bytes = 40, 8")
    assert run(cell, "unfused_bytes, fused_bytes = 44, 8", "zh").startswith("正确")
    assert run(cell, "unfused_bytes, fused_bytes = 44.0, 8.0").startswith("Correct")
    assert run(cell, "unfused_bytes, fused_bytes = None, None").startswith("Exercise 1")


@pytest.mark.parametrize("framework", ["torch", "mxnet"])
def test_tuning_switches_exercise_2_what_float16_loses(framework, numpy_too_new):
    if framework == "mxnet" and numpy_too_new:
        pytest.skip("MXNet 1.9.1 needs numpy < 1.24")
    if framework == "torch":
        pytest.importorskip("torch")
    cell = check_cell(SWITCHES_PAGE, "exercise 2")  # one cell: the check knows the framework
    right = "zero_in_fp16, zero_in_bf16 = {1e-8, 1e-9}, set()"
    assert run(cell, right, framework=framework).startswith("Correct")
    assert run(cell, "zero_in_fp16, zero_in_bf16 = [1e-9, 1e-8], []",
               framework=framework).startswith("Correct")
    wrong = run(cell, "zero_in_fp16, zero_in_bf16 = {1e-6, 1e-8, 1e-9}, set()",
                framework=framework)
    assert "Not quite" in wrong and "6e-8" in wrong  # a hint, not the answer
    assert "1e-09" not in wrong and "1e-08" not in wrong
    assert run(cell, right, "zh", framework=framework).startswith("正确")
    assert run(cell, "zero_in_fp16, zero_in_bf16 = None, None", "zh",
               framework=framework).startswith("练习 2")


def test_tuning_versus_follows_the_ranges():
    """The page's verdicts: faster or slower only when the ranges do not overlap."""
    from d2l_ext.turns import versus  # the chapter's pages import it
    from d2l_ext.utils import Timing

    fast, slow, between = Timing((1.0, 1.1, 1.2)), Timing((2.0, 2.1, 2.2)), Timing((1.1, 1.6, 2.1))
    assert versus("a", fast, "b", slow).en.startswith("“a” was faster than “b” in every run")
    assert "(by the medians, the first ran 1.91× as fast)" in versus("a", fast, "b", slow).en
    assert versus("a", slow, "b", fast).en.startswith("“a” was slower than “b” in every run")
    # the slower first: how much longer it took, never "0.52× as fast"
    assert "(by the medians, the first took 1.91× as long)" in versus("a", slow, "b", fast).en
    assert "用时是后者的 1.91 倍" in versus("a", slow, "b", fast).zh
    assert "no clear difference" in versus("a", between, "b", slow).en
    assert "no clear difference" in versus("a", fast, "b", between).en
    assert "快" in versus("a", fast, "b", slow).zh
    assert "慢" in versus("a", slow, "b", fast).zh
    assert "看不出差别" in versus("a", between, "b", slow).zh
    name = D2L.message(en="+ AMP, fused", zh="+ 混合精度，融合")  # each language its own name
    assert versus(name, fast, "b", slow).zh.startswith("“+ 混合精度，融合”每一次都比“b”快")


LADDER_PAGE = "tuning-tips-ladder"  # the tuning chapter's section page with the speed ladder


def ladder_cell(marker, lang, **names):
    """A torch cell of the speed ladder's page (the one holding ``marker``) run on made-up
    names."""
    from d2l_ext import tuning_setup, turns
    from d2l_ext.utils import Timing

    d2l = SimpleNamespace(message=message, say=say, figure_text=figure_text, Timing=Timing,
                          show=show, listing=listing)
    names = {"d2l": d2l, "statistics": __import__("statistics"), "joined": turns.joined,
             "both": turns.both, "tuning_setup": tuning_setup, **names}
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("D2L_LANG", lang)
        with contextlib.redirect_stdout(out):
            exec(check_cell(LADDER_PAGE, marker, "torch"), names)
    return out.getvalue(), names


def made_up_ladder(device_type="cpu"):
    """Four measured rungs and a failed one, with splits for a GPU (a host-bound rung, one
    that waits) and verdicts from per-round ratios."""
    from d2l_ext import ladder, timing
    from d2l_ext.i18n import Text
    from d2l_ext.utils import Timing

    def split(device_ms, host_ms, syncs=False):
        t = Timing((device_ms / 1e3,))
        return timing.SplitTime(t, Timing((host_ms / 1e3,)), t, on_cpu=device_type == "cpu",
                                syncs=syncs)

    def result(en, kind, seconds, verdict="", split_=None, options=None, error=""):
        r = ladder.RungResult(Text(en, en + "（中）"), kind, options or {"batch_size": 8}, 10,
                              1e6, 1e9, step_seconds=list(seconds), verdict=verdict,
                              split=split_, error=error, one_off=2.5)
        return r

    return [result("d2l's loop", "reference", [0.020, 0.022, 0.024], split_=split(5, 15, True)),
            result("+ data on the device", "systems", [0.010, 0.011, 0.013], ladder.FASTER,
                   split(5, 8)),
            result("+ channels_last", "systems", [0.011, 0.010, 0.014], ladder.NO_GAIN,
                   split(6, 5)),
            result("+ broken", "systems", [], ladder.FAILED, error="boom"),
            result("+ torch.compile", "systems", [0.008, 0.009, 0.012], ladder.FASTER,
                   split(4, 3), options={"batch_size": 8, "compile": "default"})]


@pytest.mark.parametrize("device_type", ["cpu", "cuda"])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_ladder_summary_follows_the_rounds(device_type, lang):
    """The summary cell on made-up rungs: the verdicts grouped, the top's speed-up paired by
    round, the drift of the first systems rung, which rungs were host-bound (GPU only), the
    one-off costs of compiled rungs, the failed rung named."""
    pytest.importorskip("torch")
    from types import SimpleNamespace

    from d2l_ext import ladder

    results = made_up_ladder(device_type)
    marker = "measured = [r for r in results if not r.error"
    _, names = ladder_cell(marker, lang, results=results, ladder=ladder,
                           device=SimpleNamespace(type=device_type), false_alarm=0.0625,
                           on_gpu=device_type == "cuda", is_mfu=False,
                           ladder_peak_says=message(en="the fastest rate", zh="最快速率"))
    assert names["top"].name.en == "+ torch.compile" and names["first"].name.en == "d2l's loop"
    assert names["speedup_ladder"].median == pytest.approx(0.022 / 0.009)
    # "+ data on the device", 10, 11, 13 ms: its last round against its first
    assert names["trend"] == pytest.approx(0.013 / 0.010 - 1)
    assert "it is not an MFU" in names["peak_sentence"].en
    says = names["verdicts_says"]
    assert "“+ data on the device”; “+ torch.compile”" in says.en and "No clear gain" in says.en
    assert "“+ channels_last（中）”" in says.zh
    bound = names["bound_says"]
    if device_type == "cpu":
        assert "On a CPU the host does the arithmetic itself" in bound.en
    else:
        assert "“d2l's loop”" in bound.en.split("Steps that wait")[1]  # the one that waits
        assert "“+ data on the device”" in bound.en.split("Steps that wait")[0]  # host-bound
        assert "channels_last" not in bound.en.split("Steps that wait")[0]
    assert "“+ torch.compile” 2.5 s" in names["one_off_says"].en
    assert "“+ torch.compile（中）” 2.5 秒" in names["one_off_says"].zh
    assert "“+ broken”" in names["failed_says"].en
    assert "did not move" in names["window_says"].en
    assert names["expected_false"] == 0 and names["fused_check_says"].en == ""  # no ratios


def _fused_check(ratios, verdict, loop, fused) -> dict:
    """The ladder cell's names for a run whose "+ fused SGD" rung took ``ratios`` of the rung
    before it (100 ms per step), with the plain and fused updates timed alone at ``loop``
    and ``fused`` seconds (each a tuple of rounds)."""
    from types import SimpleNamespace

    from d2l_ext import ladder
    from d2l_ext.i18n import Text
    from d2l_ext.utils import Timing

    def result(en, seconds, verdict="", ratios=()):
        return ladder.RungResult(Text(en, en + "（中）"), "systems", {"batch_size": 8}, 10, 1e6,
                                 1e9, step_seconds=list(seconds), verdict=verdict,
                                 ratios=list(ratios), one_off=0.0)

    results = [result("d2l's loop", [0.2] * 3), result("+ bf16 autocast", [0.1] * 3),
               result("+ fused SGD", [0.1 * r for r in ratios], verdict, ratios)]
    _, names = ladder_cell("measured = [r for r in results if not r.error", "en",
                           results=results, ladder=ladder, device=SimpleNamespace(type="cpu"),
                           false_alarm=0.0625, on_gpu=False, is_mfu=True,
                           ladder_update={"loop": Timing(loop), "fused": Timing(fused)},
                           default_update="loop",
                           ladder_peak_says=message(en="the peak", zh="峰值"))
    return names


@pytest.mark.parametrize("ratios, agrees", [([0.99, 0.995, 0.985], True),
                                            ([1.03, 1.05, 1.09], False)])
def test_the_fused_rung_is_checked_against_the_update_timed_alone(ratios, agrees):
    """The ladder's "+ fused SGD" rung against the saving that the update, timed alone, predicts
    (for-loop on a CPU): a slowdown in every round is more than the update accounts for."""
    pytest.importorskip("torch")
    from d2l_ext import ladder

    names = _fused_check(ratios, ladder.NO_GAIN if agrees else ladder.SLOWER,
                         (0.002,), (0.001,))
    assert names["predicted"] == pytest.approx(0.99)  # 1 ms saved of a 100 ms step
    assert names["expected_false"] == pytest.approx(0.0625)  # one rung with ratios
    says = names["fused_check_says"].en
    assert "about ×0.990 (0.990–0.990 by the updates' ranges)" in says
    assert ("The two agree" in says) == agrees
    assert ("an effect of the switch elsewhere in the step" in says) != agrees


# fused: 4.7 ms more per update at the medians (×1.047), up to 6 ms more (×1.06)
SLOWER_LOOP, SLOWER_FUSED = (0.0028, 0.0029, 0.003), (0.0075, 0.0076, 0.0088)


def test_the_fused_rung_agrees_when_the_prediction_s_range_overlaps_the_rung_s():
    """The prediction has a range of its own, from the two updates' timings: a rung whose
    range overlaps it agrees, even when the point prediction falls just outside."""
    pytest.importorskip("torch")
    from d2l_ext import ladder

    names = _fused_check([1.05, 1.07, 1.28], ladder.SLOWER, SLOWER_LOOP, SLOWER_FUSED)
    assert names["predicted"] < 1.05 <= names["pred_high"]
    assert "The two agree" in names["fused_check_says"].en


def test_the_fused_rung_is_too_wide_to_test_when_its_range_holds_1():
    """A rung whose range overlaps the prediction's but also holds 1 cannot tell the update's
    cost from no change, even when the prediction reaches past the rung's top."""
    pytest.importorskip("torch")
    from d2l_ext import ladder

    names = _fused_check([0.89, 1.04, 1.05], ladder.NO_GAIN, SLOWER_LOOP, SLOWER_FUSED)
    assert names["pred_high"] > 1.05  # the prediction reaches past the rung's top
    says = names["fused_check_says"].en
    assert "too wide to test the prediction" in says and "excludes 1" not in says


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("debiased", [0.93, 0.4])
def test_the_race_to_the_target_says_who_reached_it(lang, debiased):
    pytest.importorskip("torch")
    from d2l_ext import ladder
    from d2l_ext.i18n import Text

    def run(name, seed, reached, steady, one_off=1.5, compiled=False, drift=0.0):
        return ladder.TargetRun(Text(name, name + "（中）"), seed, reached, 0.9 if reached else
                                0.6, 2.0, steady, one_off, compiled=compiled, drift=drift)

    runs = [run("d2l's loop", 0, True, 30.0), run("d2l's loop", 1, True, 34.0),
            run("compiled", 0, True, 8.0, 0.0), run("compiled", 1, True, 8.0, 0.0),
            run("again", 0, True, 8.0, 0.5, compiled=True), run("again", 1, True, 8.0, 0.5),
            run("drifty", 0, True, 7.0, 0.3, drift=0.4),
            run("drifty", 1, True, 7.0, 0.3, drift=0.4),
            run("top", 0, True, 6.0), run("top", 1, False, 9.0)]
    big = ladder.TargetRun(Text("batch 128", "批量 128"), 0, False, 0.088, 4.0, 17.0, 0.0,
                           32, 0.95, debiased)  # trained, but its test accuracy lags
    runs.append(big)
    measured = [SimpleNamespace(name=Text(n, n), options=dict(compile="default"), one_off=2.0)
                for n in ("compiled", "again")]  # the ladder's rungs: their first compilation
    _, names = ladder_cell("def reached(name_en):", lang, target_runs=runs, target=0.9,
                           measured=measured)
    says = names["race_says"]
    assert "“d2l's loop” took 32.0 s of training (median), plus 1.5 s one-off." in says.en
    assert ("“compiled” took 8.0 s of training (median) and showed no one-off cost (warm-up "
            "minus as many steady steps: 0.0 s; the steady steps' own variation: 0.0 s), since "
            "it reused the code this process compiled for the ladder above, whose first "
            "compilation cost 2.0 s.") in says.en
    assert ("“drifty” took 7.0 s of training (median); its warm-up took 0.3 s more than as "
            "many steady steps, within the steady steps' own variation (0.4 s), so no one-off "
            "cost showed.") in says.en
    assert "而这些代码首次编译的一次性开销是 2.0 秒" in says.zh
    assert "“again” took 8.0 s of training (median), plus 0.5 s one-off. " in says.en
    assert "“top” reached 0.9 in 1 of 2 runs (best 0.900). “batch 128”" in says.en
    assert "“top（中）”在 2 次运行中只有 1 次达到 0.9" in says.zh
    assert "“batch 128” reached 0.9 in no run (best 0.088)." in says.en
    assert "“d2l's loop（中）”训练了 32.0 秒（中位数）" in says.zh
    assert "training predictions over its last steps reached an accuracy of 0.950 (seed 0)" \
        in says.en
    assert "after its 32 steps the initial statistics (mean 0, variance 1) still weigh 3%" \
        in says.en
    held = debiased >= 0.9
    assert ("the initial statistics are what held the test accuracy back" in says.en) == held
    assert ("the initial statistics are not what held it back" in says.en) != held
    assert f"{debiased:.3f} (seed 0)" in says.en and f"{debiased:.3f}（种子 0）" in says.zh
    assert ("拖住测试准确率的正是初始统计量" in says.zh) == held
    assert "滑动统计量" in says.zh and "；" not in says.zh.split("“批量 128”")[1].split("不过")[0]
    assert "Yet" not in says.en.split("“batch 128”")[0]  # only the rung that trained
    short = names["race_short"]  # the quick answer: a sentence per rung, with the reason
    if held:  # the one-clause reason the body proves
        assert short.en.endswith("“batch 128” reached 0.9 in no run (best 0.088), because "
                                 "after only 32 steps BatchNorm's running statistics still "
                                 "carried 3% of their initial values (variance 1): with that "
                                 f"share removed, the same weights reach {debiased:.3f} "
                                 "(seed 0).")
        assert "原因是只训练了 32 步" in short.zh and "还留着 3% 的初始值（方差为 1）" in short.zh
    else:  # no reason proven: the bare outcome
        assert short.en.endswith("“batch 128” reached 0.9 in no run (best 0.088).")
    assert "Yet" not in short.en and "“d2l's loop（中）”训练了 32.0 秒" in short.zh


def cost_model_verdict(step_medians, probe, spread=1.1, spreads=None, probe_spread=None,
                       batch_size=4, on_gpu=False, probe_parts=(6.0, 2.0, 1.0, 1.0, 12.0)):
    """The cost-model cell on made-up timings: step medians (s) per batch and the probe's;
    each timing's fastest run is its median divided by its spread (``spreads`` per batch,
    ``probe_spread`` for the probe, else ``spread``); ``batch_size`` is the ladder's. The
    profile of the probe: ms in matmul, optimizer, elementwise, other, and its wall time."""
    from d2l_ext import breakdown, tuning_setup
    from d2l_ext.utils import Timing, text_table

    def timing(median, spread):
        return Timing((median / spread, median, median))

    matmul, optimizer, elementwise, other, wall = (x / 1e3 for x in probe_parts)
    spreads = spreads or {}
    names = {"d2l": D2L, "joined": tuning_joined(), "text_table": text_table,
             "batch_size": batch_size, "on_gpu": on_gpu, "tuning_setup": tuning_setup,
             "step_timing": {b: timing(t, spreads.get(b, spread))
                             for b, t in step_medians.items()},
             "overhead": timing(probe, probe_spread or spread),
             "probe_profile": breakdown.Breakdown(
                 {"matmul": matmul, "optimizer": optimizer, "elementwise": elementwise,
                  "other": other}, wall, 3, "cuda" if on_gpu else "cpu")}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(check_cell("tuning-tips", "step_seconds = {b: t.typical"), names)  # + fit_says
    return names


def test_tuning_cost_model_reads_each_timing_by_its_own_disturbance():
    """A timing is read at its median unless it was disturbed (its median more than 1.25
    times its fastest run), and then at its fastest run: the flag is per timing, never
    global, and the verdict names the disturbed ones."""
    steps = {1: 0.011, 2: 0.012, 4: 0.014, 8: 0.018}  # a line with t_fixed = 10 ms
    calm = cost_model_verdict(steps, probe=0.009)
    assert "matches the step without arithmetic" in calm["fit_says"].en
    assert "the fixed part is work that does not grow with the batch" in calm["fit_says"].en
    assert "固定部分确实是不随批量增长的工作" in calm["fit_says"].zh
    assert "most of the fixed part is work sized by the network" in calm["probe_says"].en
    assert "6.0 ms in convolutions and matrix products, 2.0 ms in the optimizer" \
        in calm["probe_says"].en
    gpu = cost_model_verdict(steps, probe=0.009, on_gpu=True, probe_parts=(0.1, 0, 0.1, 0, 9))
    assert "the fixed part is overhead, as the model assumes" in gpu["fit_says"].en
    assert "the rest of the step is the host's work, overhead" in gpu["probe_says"].en
    assert "Disturbed" not in calm["fit_says"].en
    assert calm["step_seconds"] == pytest.approx(steps)  # the medians
    assert calm["ladder_share"] == pytest.approx(0.009 / 0.014)  # at the ladder's batch, 4
    assert calm["overhead_share"] == pytest.approx(0.009 / 0.018)  # at the largest, 8
    assert calm["share_says"].en == (
        "64% of a step at the ladder's batch of 4 (against its 14.0 ms, both at their "
        "medians) and 50% of one at the largest batch, 8 (against its 18.0 ms, both at "
        "their medians)")
    assert "most of it is not fixed work" in cost_model_verdict(steps, probe=0.004)["fit_says"]
    assert "underestimates" in cost_model_verdict(steps, probe=0.025)["fit_says"]
    # one disturbed size: read at its fastest run, the tight ones keep their medians
    one = cost_model_verdict(steps, probe=0.009, spreads={8: 4.0})
    assert one["step_seconds"][8] == pytest.approx(0.018 / 4.0)
    assert one["step_seconds"][1] == pytest.approx(0.011)
    assert one["probe_seconds"] == pytest.approx(0.009)
    assert one["fit_says"].en.startswith("Disturbed, and read at their fastest runs: batch 8;")
    assert "批量 8" in one["fit_says"].zh
    # a share reads its two timings alike, and prints the two times it divides
    assert one["ladder_share"] == pytest.approx(0.009 / 0.014)  # neither disturbed: medians
    assert one["overhead_share"] == pytest.approx((0.009 / 1.1) / (0.018 / 4.0))
    assert "(against its 4.5 ms, both at their fastest runs, since one was disturbed)" \
        in one["share_says"].en
    # a disturbed probe alone
    probe = cost_model_verdict(steps, probe=0.009, probe_spread=2.0)
    assert probe["probe_seconds"] == pytest.approx(0.0045)
    assert probe["step_seconds"] == pytest.approx(steps)
    assert "the step without arithmetic" in probe["fit_says"].en
    assert "几乎不含计算的那一步" in probe["fit_says"].zh
    # everything disturbed: every timing at its fastest run, and the line still judged
    busy = cost_model_verdict(steps, probe=0.009, spread=4.0)
    assert busy["step_seconds"][8] == pytest.approx(0.018 / 4.0)
    assert busy["overhead_share"] == pytest.approx(0.009 / 0.018)  # fastest against fastest
    assert busy["fit_says"].en.startswith("Every timing was disturbed")
    assert "within a factor of 1.5" in busy["fit_says"].en
    # the ladder's batch is the largest (as on a CPU): the share is said once
    same = cost_model_verdict(steps, probe=0.009, batch_size=8)
    assert same["share_says"].en == ("50% of a step at the ladder's batch of 8, the largest "
                                     "timed (against its 18.0 ms, both at their medians)")


@pytest.mark.parametrize("capability, bf16_timed", [((8, 0), True), ((7, 5), False)])
@pytest.mark.parametrize("tf32", [True, False])
def test_tuning_mixed_precision_sentence_without_bf16(monkeypatch, capability, bf16_timed, tf32):
    """On a GPU whose tensor cores lack bf16 (a T4) bf16 is not timed: the sentence says so
    and gives fp16's speed-up, never "nan times as fast". Where TF32 was measured, bf16's
    matrix-product rate is read against TF32's too (the baseline of a float32 that uses it)."""
    import warnings

    torch = pytest.importorskip("torch")
    from d2l_ext import ladder, tuning
    from d2l_ext.utils import Timing

    monkeypatch.setattr(ladder, "amp_candidates",
                        lambda device: ladder.amp_formats("cuda", capability))
    monkeypatch.setattr(ladder, "batchnorm_backend",  # PyTorch's choice (source, 2.11-2.13)
                        lambda device, amp, channels_last=False: "native" if amp == "bf16"
                        else "cudnn")
    speeds = {"fp32": 2.0, "bf16": 1.0, "fp16": 0.8}

    def measure_in_turns(functions, repeats=5):
        return {name: Timing((speeds[name],) * repeats) for name in functions}

    from d2l_ext.turns import versus

    names = {"d2l": D2L, "joined": tuning_joined(), "versus": versus, "torch": torch,
             "ladder": ladder,
             "tuning": tuning,
             "measure_in_turns": measure_in_turns, "random_batch": lambda b: (None, None),
             "device": SimpleNamespace(type="cuda"), "on_gpu": True, "large": 8, "small": 2,
             "rates": {"fp32": 1.0, "bf16": 16.0} | ({"tf32": 8.0} if tf32 else {}),
             "conv_rates": {"fp32": 1.0, "bf16": 3.0}, "kept_all": lambda *keys: None}
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")  # a CUDA GradScaler made without CUDA disables itself
        exec(check_cell(SWITCHES_PAGE, "def amp_step(", "torch"), names)  # + bf16_says
    says = names["bf16_says"].en
    assert "nan" not in says
    if bf16_timed:
        assert "bf16 autocast ran a step 2.00 times as fast" in says
        assert "16 times float32's rate" in says and "3 times a float32 one's" in says
        assert ("and at 2 times TF32's" in says) is tf32
        assert ("TF32 的 2 倍" in names["bf16_says"].zh) is tf32
        assert names["amp_gpu_says"].en == ("On this run's GPU, BatchNorm took the native "
                                            "kernels under bf16 autocast and the cudnn ones "
                                            "under fp16 (the line above).")
    else:
        assert says.startswith("bf16 was not timed here") and "2.50 times" in says
        assert names["amp_gpu_says"].en == ""  # no bf16 to set against fp16


def compiled_gelu_sentences(compiled, eager, split=None, copy=(0.1, 0.1, 0.1),
                            unfused=(1.0, 1.0, 1.0)):
    """The cell after the GELU timings, on made-up timings (ms) and, for a GPU, d2l.split_time
    results {"compiled": (host µs, device µs), "F.gelu": (...)}."""
    from d2l_ext.timing import SplitTime
    from d2l_ext.utils import Timing

    def ms(times):
        return Timing(tuple(t / 1e3 for t in times))

    def us(host, device):
        host, device = Timing((host / 1e6,) * 3), Timing((device / 1e6,) * 3)
        return SplitTime(device, host, device, on_cpu=False)

    names = {"d2l": D2L, "joined": tuning_joined(), "x": SimpleNamespace(numel=lambda: 1_000_000),
             "gelu_timing": {"copy": ms(copy), "clone": ms(copy), "unfused": ms(unfused),
                             "compiled": ms(compiled), "F.gelu": ms(eager)},
             "gelu_split": {k: us(*v) for k, v in (split or {}).items()}}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(check_cell(SWITCHES_PAGE, "fusion_speedup = gelu_timing[", "torch"),
             names)  # + compiled_says
    return names


def test_tuning_compiled_gelu_against_f_gelu_says_what_the_run_measured():
    """The compiled chain against F.gelu (one kernel each): slower because its call is
    host-bound, or because its kernel ran longer (both measured on a GPU), or with no way to
    tell on a CPU; no difference where the ranges overlap. The copy's rate bounds the bytes."""
    slow, fast = (0.30, 0.31, 0.32), (0.20, 0.21, 0.22)
    host = compiled_gelu_sentences(slow, fast, {"compiled": (40, 30), "F.gelu": (8, 200)})
    says = host["compiled_says"]
    assert says.en.startswith("The compiled chain was slower than F.gelu in every run (1.48 ")
    assert "host-bound" in says.en and "40.0 µs per call" in says.en and "受主机限制" in says.zh
    kernel = compiled_gelu_sentences(slow, fast, {"compiled": (10, 300), "F.gelu": (8, 200)})
    assert "generated kernel ran longer on the device (300.0 µs against F.gelu's 200.0 µs)" \
        in kernel["compiled_says"].en
    cpu = compiled_gelu_sentences(slow, fast)
    assert "does not tell apart" in cpu["compiled_says"].en
    same = compiled_gelu_sentences((0.2, 0.21, 0.3), fast)
    assert "did not clearly differ" in same["compiled_says"].en
    assert "看不出明显差别" in same["compiled_says"].zh
    # 44 bytes per element at 0.8 GB per 0.1 ms (the copy's 8 bytes): 1 ms takes 0.44 ms of it
    assert "at only 55% of the copy's rate" in same["bytes_say"].en
    memory = compiled_gelu_sentences(slow, fast, unfused=(0.68, 0.6875, 0.69))
    assert "at 80% of the copy's rate: it is memory-bound" in memory["bytes_say"].en


def _key_figure_names(device_type):
    """Made-up values of what the tuning pages' key-figure cells read, and a ``d2l`` whose
    ``gpu_runs.table`` records the labels it was given (in ``shown``)."""
    from d2l_ext import datasheets, gpu_runs, tuning_setup
    from d2l_ext.turns import both, joined
    from d2l_ext.utils import Timing, text_table

    shown = {}

    def table(chapter, on_gpu, figures):
        shown.update(chapter=chapter, on_gpu=on_gpu, labels=[f[0].en for f in figures])
        with contextlib.redirect_stdout(io.StringIO()):
            return gpu_runs.table(chapter, False, figures)  # checks labels and formats

    def alike(*timings):
        return tuple(t.median for t in timings)

    d2l = SimpleNamespace(message=message, say=say, figure_text=figure_text, show=show,
                          gpu_runs=SimpleNamespace(table=table, load=gpu_runs.load))
    on_gpu = device_type == "cuda"
    rates = {"fp32": 50e12, "bf16": 700e12} | ({"tf32": 350e12} if on_gpu else {})
    sheet = datasheets.for_gpu("NVIDIA H100 80GB HBM3") if on_gpu else None
    names = {"d2l": d2l, "text_table": text_table, "datasheets": datasheets,
             "tuning_setup": tuning_setup, "joined": joined, "both": both,
             "device": SimpleNamespace(type=device_type), "on_gpu": on_gpu,
             "flops_per_image": 2.7e9, "large": 1024, "batch_size": 256,
             "step_timing": {16: Timing((0.012,) * 3), 256: Timing((0.015,) * 3)},
             "overhead": Timing((0.011,) * 3), "alike": alike, "rates": rates,
             "conv_rates": {"fp32": 20e12, "bf16": 40e12}, "peak": 350e12,
             "achieved": 66e12, "arithmetic_share": 0.19, "sheet": sheet,
             "mfu_datasheet": {"tf32": 0.133, "bf16": 0.067} if on_gpu else {},
             "peak_names": {"fp32": "float32", "tf32": "TF32", "bf16": "bf16", "fp16": "fp16"},
             "conv_rate": 1.2e14, "profiled_ms": 50.0, "inside_ms": 40.0,
             "unprofiled_ms": 42.0, "ladder_ms": 15.0, "host_ms": 11.0, "ladder_share": 0.7,
             "device_ms": 10.0, "step_ips": 24_000.0, "slowest_loader": 57_000.0,
             "amp_batch": 1024, "batchnorm": {"fp32": "cudnn", "bf16": "native"},
             "channels_last_speedup": 1.5, "bandwidth": 3e12, "fusion_speedup": 4.0,
             "compiled_ratio": 1.0, "fused_speedup": 6.0,
             "speedup": {"fp32": 1.0, "bf16": 1.1} | ({"fp16": 1.3} if on_gpu else {})}
    return names, shown


@pytest.mark.parametrize("device_type", ["cuda", "cpu"])
def test_tuning_key_figures_line_up_with_the_books_gpu_run(device_type):
    """The main page's key-figure table on made-up values: on a GPU it names every figure the
    book's GPU record of the page keeps (so the two columns line up), a CPU run leaves out
    only what a CPU cannot measure; the sentences citing the record quote its machine, date
    and values, and a GPU run is never told that the book's GPU run is the only one."""
    pytest.importorskip("torch")
    from d2l_ext import gpu_runs

    names, shown = _key_figure_names(device_type)
    on_gpu = device_type == "cuda"
    with contextlib.redirect_stdout(io.StringIO()):
        for marker in ("datasheet_rows = [", "gpu_loader_says = d2l.say(", "growth_pair = alike("):
            exec(check_cell("tuning-tips", marker, "torch"), names)
    kept_labels = {f.en for f in gpu_runs.load("tuning-tips").figures}
    assert shown["chapter"] == "tuning-tips" and shown["on_gpu"] is on_gpu
    if on_gpu:
        assert kept_labels <= set(shown["labels"])
        assert names["gpu_mfu_says"].en.startswith("This run measured it on its own GPU (H100 SXM")
        assert "on this run's gpu" in names["gpu_loader_says"].en.lower()
        assert "This run is on a GPU" in names["gpu_fixed_says"].en
        assert names["gpu_bound_says"].en.startswith("This run's own verdict")
    else:
        assert kept_labels - set(shown["labels"]) == {
            "TF32 matrix product (TFLOP/s)", "bf16 / TF32 matrix-product rate",
            "MFU at the largest batch, against the datasheet's TF32 peak",
            "MFU at the largest batch, against the datasheet's bf16 peak"}
        assert "kernels per step at the ladder's batch (ms)" not in shown["labels"]
        mfu_says = names["gpu_mfu_says"]
        assert "(1 × NVIDIA H100 80GB HBM3, 2026-11-24) counted 65.9 TFLOP/s at a batch of " \
               "1,024, an MFU of 13.3% against its datasheet's TF32 peak and 6.7% against " \
               "its datasheet's bf16 peak" in mfu_says.en
        assert "1 块 NVIDIA H100 80GB HBM3，2026-11-24" in mfu_says.zh
        assert "24,111 images per second" in names["gpu_loader_says"].en
        fixed = names["gpu_fixed_says"].en  # finding 3: the record's fixed part, read alike
        assert "on its GPU: the step without arithmetic took 7.8 ms (its runs: 7.8–13.5 ms), " \
               "63% of a step at the ladder's batch of 256 (12.3 ms), against 70% in this run" \
               in fixed
        assert "16 times as many, its step took only 1.45 times as long: up to the ladder's " \
               "batch that GPU's step was overhead-bound, its time set by its fixed part" in fixed
        assert "marks an overhead-bound step" in names["gpu_bound_says"].en
    says = names["gpu_says"]
    assert says.en.startswith("In the book's GPU run (1 × NVIDIA H100 80GB HBM3, 2026-11-24, "
                              "PyTorch 2.11.0+cu130), a bf16 matrix product ran at 13.8 "
                              "times float32's rate with TF32 off, but at 2.05 times TF32's")
    assert "at its largest batch, 1,024, a step took 42.5 ms without the profiler and its " \
           "kernels 42.0 ms: the device was busy for nearly all of it" in says.en
    assert "（1 块 NVIDIA H100 80GB HBM3，2026-11-24，PyTorch 2.11.0+cu130）" in says.zh
    assert "1 x " not in says.zh + says.en  # the multiplication sign, not an x


@pytest.mark.parametrize("device_type", ["cuda", "cpu"])
def test_tuning_switches_key_figures_line_up_with_the_books_gpu_run(device_type):
    """The switches page's key-figure table: on a GPU it names every figure the book keeps
    from its GPU run of that page; a CPU leaves out fp16 (a CPU times no fp16 autocast). The
    page's sentence on the record quotes the record's machine, date and values."""
    pytest.importorskip("torch")
    from d2l_ext import gpu_runs, tuning_setup

    names, shown = _key_figure_names(device_type)
    on_gpu = device_type == "cuda"
    setup = check_cell(SWITCHES_PAGE, "figure_names = {", "torch")
    start = setup.index("figure_names = {")
    end = setup.find("\nprint(", start)
    block = setup[start:end if end != -1 else None]  # the names and the GPU record
    with contextlib.redirect_stdout(io.StringIO()):
        exec(block, names)
        exec(check_cell(SWITCHES_PAGE, 'figures = {"amp batch"', "torch"), names)
    kept_labels = {f.en for f in gpu_runs.load(SWITCHES_PAGE).figures}
    assert shown["chapter"] == SWITCHES_PAGE and shown["on_gpu"] is on_gpu
    if on_gpu:
        assert kept_labels <= set(shown["labels"])
    else:
        assert kept_labels - set(shown["labels"]) == {
            "fp16 autocast step at that batch, speed-up over fp32"}
    kept = names["kept_all"]("amp batch", "bf16 step", "fp16 step")
    assert kept is not None and kept[0] == 1024
    where = names["record_where"]()
    assert where.en == "1 × NVIDIA H100 80GB HBM3, 2026-11-24"
    assert "1 块 NVIDIA H100 80GB HBM3" in where.zh
    assert tuning_setup.KeptRun(None, names["figure_names"]).all("amp batch") is None


def profile_cells() -> str:
    """The tuning page's profile cell and the cell right after it, which reads the profiles
    into sentences (a cell of its own, not a collapsed one)."""
    return "\n".join(check_cell("tuning-tips", marker, "torch") for marker in (
        "profiles = {b: breakdown.torch_step(",
        'outside_says = d2l.say("tuning-tips/ms-of-the-ms-step-ran"'))


@pytest.mark.parametrize("device_type, probe_ms, kernels_ms, verdict", [
    ("cuda", 11.0, 5.0, "the step is host-bound"),
    ("cuda", 2.0, 10.0, "the step is device-bound"),
    ("cuda", 10.0, 9.5, "the two sides are close"),
    ("cpu", 10.0, 9.5, "On a CPU the host does the arithmetic itself"),
])
def test_tuning_host_or_device_bound_at_the_ladders_batch(device_type, probe_ms, kernels_ms,
                                                          verdict):
    """The profile cell on made-up profiles: at the ladder's batch the host's work per step
    (the step without arithmetic) is set against the device's (its kernels); the profiled
    step is read against the same step without the profiler."""
    from d2l_ext import breakdown

    def profile(kernels_ms, wall_ms):
        seconds = {"matmul": kernels_ms / 2e3, "elementwise": kernels_ms / 2e3,
                   "optimizer": 0.0, "other": 0.0}
        return breakdown.Breakdown(seconds, wall_ms / 1e3, 1, device_type)

    made = iter([profile(kernels_ms, 16.0), profile(42.0, 53.6)])  # batch 256, then 1024
    names = {"d2l": D2L, "joined": tuning_joined(), "device": SimpleNamespace(type=device_type),
             "batch_size": 256,
             "large": 1024, "inputs": {}, "train_step": None, "flops_per_image": 2.7e9,
             "peak": 350e12, "probe_seconds": probe_ms / 1e3, "ladder_share": 0.7,
             "ladder_pair": (probe_ms / 1e3, 0.015), "step_seconds": {256: 0.015, 1024: 0.0425},
             "breakdown": SimpleNamespace(torch_step=lambda step, device, steps: next(made))}
    exec(profile_cells(), names)
    assert verdict in names["bound_says"].en
    assert "The profiler made the step 11.1 ms slower" in names["profiler_says"].en
    assert "the convolutions themselves run below that rate" in names["conv_says"].en
    names["peak"] = 50e12  # a reference that the convolutions outran: no ceiling
    made = iter([profile(kernels_ms, 16.0), profile(42.0, 53.6)])
    exec(profile_cells(), names)
    assert "which is therefore no ceiling" in names["conv_says"].en
    if device_type == "cuda":
        assert "the same step took 42.5 ms against 42.0 ms of kernels, so the device was idle " \
               "for about 0.5 ms of it" in names["outside_says"].en


# ------------------------------------------------------------ host-device synchronisation
@pytest.mark.parametrize("framework", ["torch", "mxnet"])
def test_sync_measuring_exercise_1_which_operations_wait(framework):
    """The same letters on every machine: the question is about a CUDA device (PyTorch) or
    about MXNet's engine, which queues on a CPU too."""
    cell = check_cell("host-device-sync-measuring", "exercise 1")  # one cell for both frameworks
    say = {"torch": "a size", "mxnet": "on a CPU too"}[framework]  # each framework's reason
    assert say in run(cell, "syncing = {'c', 'd', 'f'}", framework=framework)
    assert run(cell, "syncing = ['f', 'd', 'c']", framework=framework).startswith("Correct")
    assert "Not quite" in run(cell, "syncing = {'b', 'c', 'd', 'f'}", framework=framework)
    assert "Not quite" in run(cell, "syncing = set()", framework=framework)  # none
    assert run(cell, "syncing = {'c', 'd', 'f'}", "zh", framework=framework).startswith("正确")
    assert run(cell, "syncing = None", "zh", framework=framework).startswith("练习 1")


def test_sync_exercise_1_counting_steps():
    cell = check_cell("host-device-sync", "exercise 1")
    assert run(cell, "num_steps_answer, num_distinct_answer = 3, 4").startswith("Correct")
    assert "Not quite" in run(cell, "num_steps_answer, num_distinct_answer = 7, 8")
    assert run(cell, "num_steps_answer, num_distinct_answer = 3, 4", "zh").startswith("正确")
    assert run(cell, "num_steps_answer, num_distinct_answer = None, None").startswith(
        "Exercise 1")


@pytest.mark.parametrize("framework, counts, right, forgot", [
    ("torch", (6, 0), (7, 1), (6, 0)),  # a CPU, or a CUDA or ROCm GPU
    ("torch", (5, 0), (6, 1), (5, 0)),  # MPS or XPU: the index assignment copies nothing
    ("mxnet", (3, 0), (4, 1), (3, 0))])
def test_sync_exercise_2_one_more_read(framework, counts, right, forgot):
    """The answer is the run's own counts plus the read: PyTorch's index assignment waits on
    a CUDA or ROCm GPU (and sync_points counts it on a CPU, where the host runs the same
    operators) but not on MPS or XPU; MXNet's step_costs counts the waits, float(...)'s
    MXNDArraySyncCopyToCPU among them. The hint gives no numbers; the answer states what the
    cost model expects, not a GPU outcome."""
    cell = check_cell("host-device-sync", "exercise 2", framework)
    final = "ignore_index" if framework == "torch" else "no_blocking"
    ran = {"costs": {"original": {"syncs": float(counts[0])}, final: {"syncs": float(counts[1])}},
           "final": final}
    assert run(cell, f"syncs_with_item = {right}", **ran).startswith("Correct")
    assert run(cell, f"syncs_with_item = {list(right)}", **ran).startswith("Correct")
    assert "cost model expects" in run(cell, f"syncs_with_item = {right}", **ran)
    wrong = run(cell, f"syncs_with_item = {forgot}", **ran)  # forgot the read
    assert "Not quite" in wrong and not any(str(n) in wrong for n in (*counts, *right))
    assert "Not quite" in run(cell, f"syncs_with_item = {right[::-1]}", **ran)
    assert run(cell, f"syncs_with_item = {right}", "zh", **ran).startswith("正确")
    assert "按成本模型" in run(cell, f"syncs_with_item = {right}", "zh", **ran)
    assert run(cell, "syncs_with_item = None", "zh", **ran).startswith("练习 2")


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
    assert run(cell, "training_state_mb = None").startswith("Exercise 2")


def test_gpu_basics_exercise_3_arithmetic_intensity_of_a_batch():
    """The exact intensity and the usual approximations (the weights alone, b/2) are right;
    the page's own matrix-vector intensity (b = 1) and forgetting the 4 bytes are not."""
    cell = check_cell("gpu-basics", "exercise 3")
    assert run(cell, "intensity_batch = 4").startswith("Correct")
    assert run(cell, "intensity_batch = 2 * 8192**2 * 8 / (4 * (8192**2 + 2 * 8192 * 8))"
               ).startswith("Correct")
    assert run(cell, "intensity_batch = 3.99").startswith("Correct")
    assert "Not quite" in run(cell, "intensity_batch = 0.5")  # one vector, not eight
    assert "Not quite" in run(cell, "intensity_batch = 16")  # forgot the 4 bytes per float32
    assert "Not quite" in run(cell, "intensity_batch = 20")  # the ridge point
    assert run(cell, "intensity_batch = 4.0", "zh").startswith("正确")
    assert "1/5" in run(cell, "intensity_batch = 4.0", "zh")
    assert run(cell, "intensity_batch = None", "zh").startswith("练习 3")


def test_gpu_basics_streams_exercise_1_torch_what_orders_the_streams():
    cell = check_cell("gpu-basics-streams", "exercise 1", "torch")
    assert run(cell, "makes_it_right = {'a', 'b'}").startswith("Correct")
    assert run(cell, "makes_it_right = ['b', 'a']").startswith("Correct")
    assert run(cell, "makes_it_right = {'A', '(b)'}").startswith("Correct")  # any case, any form
    assert run(cell, "makes_it_right = 'a, b'").startswith("Correct")
    assert "Not quite" in run(cell, "makes_it_right = {'a', 'c'}")
    assert "Not quite" in run(cell, "makes_it_right = {'a', 'b', 'c'}")
    assert "Not quite" in run(cell, "makes_it_right = {'A'}")
    assert run(cell, "makes_it_right = {'a', 'b'}", "zh").startswith("正确")
    assert run(cell, "makes_it_right = None").startswith("Exercise 1")


def test_gpu_basics_streams_exercise_1_mxnet_what_the_engine_orders():
    cell = check_cell("gpu-basics-streams", "exercise 1", "mxnet")
    assert run(cell, "makes_it_wrong = {'d'}").startswith("Correct")
    assert run(cell, "makes_it_wrong = ['d']").startswith("Correct")
    assert run(cell, "makes_it_wrong = {'D'}").startswith("Correct")
    assert "Not quite" in run(cell, "makes_it_wrong = {'b'}")
    assert "Not quite" in run(cell, "makes_it_wrong = {'b', 'd'}")
    assert run(cell, "makes_it_wrong = {'d'}", "zh").startswith("正确")
    assert run(cell, "makes_it_wrong = None", "zh").startswith("练习 1")


@pytest.mark.parametrize("framework", ["torch", "mxnet"])
def test_gpu_basics_streams_exercise_2_batchnorm_over_two_devices(framework):
    """The data-parallel check always runs on at least two devices (every GPU when there are
    two or more, else two CPU stand-ins), so on every machine the slices' statistics differ:
    the answer is False, however it is written."""
    cell = check_cell("gpu-basics-streams", "exercise 2")  # one cell for both frameworks
    says = run(cell, "bn_outputs_match = False", framework=framework)
    assert says.startswith("Correct")
    assert ("nn.SyncBatchNorm would not help" in says) == (framework == "torch")
    for other_form in ("0", "'False'", "'false'"):  # the same answer, written otherwise
        assert run(cell, f"bn_outputs_match = {other_form}",
                   framework=framework).startswith("Correct")
    for wrong in ("True", "1", "'True'"):
        assert "Not quite" in run(cell, f"bn_outputs_match = {wrong}", framework=framework)
    if framework == "torch":  # a right answer computed from the outputs is a tensor
        for computed in ("torch.tensor(False)", "(torch.zeros(3) == torch.ones(3)).all()",
                         "torch.tensor([0.0])", "np.bool_(False)", "0.0"):
            assert run(cell, f"import torch, numpy as np; bn_outputs_match = {computed}",
                       framework=framework).startswith("Correct"), computed
        for not_false in ("torch.tensor(True)", "torch.tensor([False, False])", "[]", "''"):
            assert "Not quite" in run(cell, f"import torch; bn_outputs_match = {not_false}",
                                      framework=framework), not_false
    assert run(cell, "bn_outputs_match = False", "zh", framework=framework).startswith("正确")
    assert run(cell, "bn_outputs_match = None", "zh", framework=framework).startswith("练习 2")


# ------------------------------------------------------------ communication
def test_communication_exercise_1_bytes_a_ring_sends():
    cell = check_cell("communication", "exercise 1")
    assert run(cell, "megabytes_sent = 175").startswith("Correct")
    assert run(cell, "megabytes_sent = 2 * 7 / 8 * 100").startswith("Correct")
    assert "count the chunks" in run(cell, "megabytes_sent = 100")
    assert "Not quite" in run(cell, "megabytes_sent = 87.5")  # one half only
    assert run(cell, "megabytes_sent = 175.0", "zh").startswith("正确")
    assert run(cell, "megabytes_sent = None", "zh").startswith("练习 1")


def test_communication_exercise_2_ring_and_server_times():
    cell = check_cell("communication", "exercise 2")
    assert run(cell, "ring_ms, server_ms = 15.3, 60.3").startswith("Correct")
    assert run(cell, "ring_ms, server_ms = 15.30, 60.30", "zh").startswith("正确")
    assert "Not quite" in run(cell, "ring_ms, server_ms = 15.0, 60.0")  # no latencies
    assert "Not quite" in run(cell, "ring_ms, server_ms = 60.3, 15.3")  # swapped
    assert "15.3" not in run(cell, "ring_ms, server_ms = 15.0, 60.0")  # the hint, no answer
    assert run(cell, "ring_ms, server_ms = None, None").startswith("Exercise 2")


def test_communication_exercise_3_mxnet_checks_recursive_doubling(numpy_too_new):
    """The reader's recursive doubling over contexts, checked against the device kvstore: a
    right one passes, one that adds a partner's array already summed in this step fails, the
    unwritten stub is named by its error; no message shows the answer."""
    if numpy_too_new:
        pytest.skip("MXNet 1.9.1 needs numpy < 1.24")
    mx = pytest.importorskip("mxnet")
    from mxnet import np, npx

    npx.set_np()
    cell = check_cell("communication", "# exercise 3: True once", "mxnet")

    def integer_data(n, contexts, seed=0):
        return [np.random.randint(-100, 100, size=n, ctx=c).astype("float32") for c in contexts]

    def doubling(data, copy_first=True):
        step = 1
        while step < len(data):
            if copy_first:
                partners = [data[i ^ step].copyto(x.ctx) for i, x in enumerate(data)]
                for x, partner in zip(data, partners):
                    x[:] += partner
            else:  # adds what the partner may already have changed in this step
                for i, x in enumerate(data):
                    x[:] += data[i ^ step].copyto(x.ctx)
            step *= 2

    def stub(data):
        raise NotImplementedError("exercise 3: write this function")

    names = {"mx": mx, "np": np, "npx": npx, "integer_data": integer_data}
    right = run(cell, "written = True", allreduce_doubling=doubling, **names)
    assert right.startswith("Correct")
    assert run(cell, "written = True", "zh", allreduce_doubling=doubling, **names
               ).startswith("正确")
    wrong = run(cell, "written = True",
                allreduce_doubling=lambda d: doubling(d, copy_first=False), **names)
    assert wrong.startswith("Not quite") and "context(s)" in wrong and "copyto" not in wrong
    assert "NotImplementedError" in run(cell, "written = True", allreduce_doubling=stub, **names)
    assert run(cell, "written = False", "zh", **names).startswith("练习 3")


def test_communication_scale_exercise_1_scaling_model_with_twice_the_batch():
    """Up to 32 GPUs nothing is exposed; at 64, 39.4 - 20.5 = 18.9 ms. The check needs no
    run (the model's inputs are the example's), accepts any rounding within 0.15 ms (whole
    milliseconds too), and says which half is right without printing the answer."""
    cell = check_cell("communication-scale", "exercise 1")
    assert run(cell, "largest_k, exposed_ms_64 = 32, 18.9").startswith("Correct")
    assert run(cell, "largest_k, exposed_ms_64 = 32, 18.895", "zh").startswith("正确")
    assert run(cell, "largest_k, exposed_ms_64 = 32, 19").startswith("Correct")  # whole ms
    seconds = run(cell, "largest_k, exposed_ms_64 = 32, 0.0189")
    assert seconds.startswith("Almost") and "milliseconds" in seconds and "18.9" not in seconds
    assert run(cell, "largest_k, exposed_ms_64 = 32, 19.2").startswith("Half right")
    half = run(cell, "largest_k, exposed_ms_64 = 32, 39.4")  # forgot the overlap
    assert half.startswith("Half right") and "18.9" not in half
    wrong = run(cell, "largest_k, exposed_ms_64 = 16, 18.9")  # the example's own batch
    assert wrong.startswith("Not quite") and "32" not in wrong
    assert run(cell, "largest_k, exposed_ms_64 = None, None", "zh").startswith("练习 1")


# ------------------------------------------------------------ tuning-tips-ladder
def test_tuning_ladder_exercise_1_false_alarms_of_six_rounds():
    """2 x 2^-6 = 1/32 per verdict, 9/32 over 9 verdicts; one side only is named."""
    cell = check_cell("tuning-tips-ladder", "exercise 1")
    correct = "chance_per_verdict, expected_false_alarms = 2 * 2**-6, 9 * 2 * 2**-6"
    assert run(cell, correct).startswith("Correct")
    assert run(cell, "chance_per_verdict, expected_false_alarms = 0.031, 0.28",
               "zh").startswith("正确")
    one_side = run(cell, "chance_per_verdict, expected_false_alarms = 1 / 64, 9 / 64")
    assert one_side.startswith("Close") and "one side" in one_side
    wrong = run(cell, "chance_per_verdict, expected_false_alarms = 0.05, 0.45")
    assert wrong.startswith("Not quite") and "1/32" not in wrong
    assert run(cell, "chance_per_verdict, expected_false_alarms = None, None",
               "zh").startswith("练习 1")


def test_tuning_ladder_exercise_2_steps_and_epochs_to_pay_for_a_compilation():
    cell = check_cell("tuning-tips-ladder", "exercise 2")
    assert run(cell, "steps_to_pay, epochs_to_pay = 20_000, 20_000 / 234").startswith("Correct")
    assert run(cell, "steps_to_pay, epochs_to_pay = 20000, 86", "zh").startswith("正确")
    assert "0.002 s" in run(cell, "steps_to_pay, epochs_to_pay = 20, 20 / 234")  # ms for s
    wrong = run(cell, "steps_to_pay, epochs_to_pay = 20_000, 20")  # epochs of 1,000 steps
    assert wrong.startswith("Not quite") and "85.5" not in wrong
    assert run(cell, "steps_to_pay, epochs_to_pay = None, None").startswith("Exercise 2")


@pytest.mark.parametrize("device_type", ["cpu", "cuda"])
@pytest.mark.parametrize("with_ladder", [False, True])
def test_the_ladder_pages_gpu_figures_and_sentence(device_type, with_ladder, monkeypatch,
                                                    tmp_path):
    """The ladder page's GPU cell on made-up rungs: the ladder's figures beside the book's
    record (its own file), the host-bound count on a GPU only, and a sentence that quotes the
    record's ladder figures where it has them and says that it lacks them where not."""
    pytest.importorskip("torch")
    import json

    from d2l_ext import gpu_runs, ladder
    from d2l_ext.i18n import Text
    from d2l_ext.utils import Timing

    monkeypatch.delenv("D2L_CAPTURE", raising=False)
    monkeypatch.delenv("D2L_CODE_VERSION", raising=False)
    record = json.loads(gpu_runs.path(LADDER_PAGE).read_text(encoding="utf-8"))
    assert record["chapter"] == LADDER_PAGE
    assert [f["en"] for f in record["figures"]] == ["the ladder's batch"]
    if with_ladder:  # a later GPU run of this page's code, made up
        record["figures"] += [
            {"en": "ladder: d2l's loop (ms per step)", "zh": "x", "value": 20.0, "format": ".2f"},
            {"en": "ladder: top of the systems stack (ms per step)", "zh": "x", "value": 5.0,
             "format": ".2f"},
            {"en": "ladder: top over d2l's loop (per-round speed-up, median)", "zh": "x",
             "value": 3.9, "format": ".2f"}]
    (tmp_path / f"{LADDER_PAGE}.json").write_text(json.dumps(record), encoding="utf-8")
    monkeypatch.setattr(gpu_runs, "RECORDS", tmp_path)
    results = made_up_ladder(device_type)
    measured = [r for r in results if not r.error]
    top = measured[-1]
    runs = [ladder.TargetRun(Text(top.name.en, top.name.zh), s, True, 0.91, 3.0, 10.0 + s, 4.0)
            for s in (0, 1)]
    d2l_names = dict(device=SimpleNamespace(type=device_type), batch_size=8, first=results[0],
                     top=top, measured=measured, speedup_ladder=Timing((2.4, 2.2, 2.6)),
                     target=0.9, target_runs=runs)
    d2l = SimpleNamespace(message=message, say=say, figure_text=figure_text, show=show,
                          gpu_runs=gpu_runs)
    out, names = ladder_cell('d2l.gpu_runs.table("tuning-tips-ladder"', "en", d2l=d2l,
                             **d2l_names)
    assert "ladder: top of the systems stack (ms per step)" in out
    assert ("ladder: rungs whose host took longer than their device" in out) == \
        (device_type == "cuda")
    assert "time to it, top of the stack (training s, median of seeds)" in out
    says = names["gpu_says"]
    if with_ladder:
        assert says.en.startswith("In the book's GPU run (1 × NVIDIA H100 80GB HBM3, "
                                  "2026-11-24), d2l's loop took 20.00 ms per step")
        assert "3.90 times as fast" in says.en and "3.90 倍" in says.zh
    else:
        assert "came before the page's code recorded the ladder's own figures" in says.en
        assert "1 块 NVIDIA H100 80GB HBM3，2026-11-24" in says.zh


# ------------------------------------------------------------ memory
def test_memory_sharding_exercise_1_state_in_gb_and_per_process():
    cell = check_cell("memory-sharding", "exercise 1")
    assert run(cell, "state_gb, per_process_gb = 24, 3").startswith("Correct")
    assert run(cell, "state_gb, per_process_gb = 16 * 1.5, 16 * 1.5 / 8").startswith("Correct")
    assert run(cell, "state_gb, per_process_gb = 24.0, 3.0", "zh").startswith("正确")
    assert "GiB" in run(cell, "state_gb, per_process_gb = 22.35, 2.79")  # 2^30 bytes
    assert "Not quite" in run(cell, "state_gb, per_process_gb = 24, 24")  # no sharding
    assert "Not quite" in run(cell, "state_gb, per_process_gb = 6, 0.75")  # 4 bytes only
    assert run(cell, "state_gb, per_process_gb = None, None", "zh").startswith("练习 1")


def test_memory_exercise_1_best_number_of_segments():
    cell = check_cell("memory", "exercise 1")
    assert run(cell, "best_segments = 8").startswith("Correct")
    assert run(cell, "best_segments = 8", "zh").startswith("正确")
    for wrong in (7, 9, 1, 64, 16):
        assert "Not quite" in run(cell, f"best_segments = {wrong}")
    assert run(cell, "best_segments = None").startswith("Exercise 1")


def test_memory_sharding_exercise_2_zero_stage_2_in_gb():
    """2 x 13 + (2 + 12) x 13 / 16 = 37.375 GB; the other stages are named as such."""
    cell = check_cell("memory-sharding", "exercise 2")
    assert run(cell, "zero2_gb = 37.375").startswith("Correct")
    assert run(cell, "zero2_gb = 37.4", "zh").startswith("正确")
    for other_stage in (61.75, 13):
        assert "another stage" in run(cell, f"zero2_gb = {other_stage}")
    wrong = run(cell, "zero2_gb = 208")  # no sharding
    assert wrong.startswith("Not quite") and "37" not in wrong
    assert run(cell, "zero2_gb = None", "zh").startswith("练习 2")


def test_memory_exercise_2_factored_second_moment_in_bytes():
    cell = check_cell("memory", "exercise 2")
    assert run(cell, "factored_bytes = (4096 + 11008) * 4").startswith("Correct")
    assert run(cell, "factored_bytes = 60416", "zh").startswith("正确")
    assert "step counter" in run(cell, "factored_bytes = 60420")
    assert "numbers, not bytes" in run(cell, "factored_bytes = 15104")
    wrong = run(cell, "factored_bytes = 8 * 4096 * 11008")  # Adam's two moments
    assert wrong.startswith("Not quite") and "60416" not in wrong
    assert run(cell, "factored_bytes = None").startswith("Exercise 2")


def test_memory_oom_exercise_1_sequences_that_fit_under_zero_3():
    """(72 - 16 x 13 / 8) / 6 = 7.67: 7 whole sequences."""
    cell = check_cell("memory-oom", "exercise 1")
    assert run(cell, "sequences_per_gpu = 7").startswith("Correct")
    assert run(cell, "sequences_per_gpu = 7", "zh").startswith("正确")
    assert "round down" in run(cell, "sequences_per_gpu = 8")
    for unrounded in ("7.67", "7.7", "(72 - 16 * 13 / 8) / 6"):  # right, not yet rounded
        says = run(cell, f"sequences_per_gpu = {unrounded}")
        assert says.startswith("Close") and "round down" in says and "7" not in says
    for wrong in (0, 3, 12):  # unsharded; sharded weights only; ...
        assert run(cell, f"sequences_per_gpu = {wrong}").startswith("Not quite")
    assert run(cell, "sequences_per_gpu = None", "zh").startswith("练习 1")


def test_transformers_exercise_1_the_length_at_which_attention_is_half_the_flops():
    """12·L·s·d = 6·(12·L·d² + vocab·d): s = 6d + vocab/(2L) ≈ 73,990 for GPT-3's shape."""
    cell = check_cell("transformers", "exercise 1")
    assert run(cell, "seq_half = 73990").startswith("Correct")
    assert run(cell, "seq_half = 6 * 12288 + 50257 / 192", "zh").startswith("正确")
    assert "output layer" in run(cell, "seq_half = 73728")  # close: the blocks alone, s = 6d
    for wrong in (36864, 2048):  # 6·d / 2; GPT-3's length
        out = run(cell, f"seq_half = {wrong}")
        assert out.startswith("Not quite") and "73,990" not in out
    assert run(cell, "seq_half = None").startswith("Exercise 1")


def test_transformers_exercise_2_the_length_at_which_the_attention_term_equals_the_rest():
    """5·a·s = 34·h: s = 34 × 4096 / 160 = 870.4."""
    cell = check_cell("transformers", "exercise 2")
    assert run(cell, "seq_equal = 870").startswith("Correct")
    assert run(cell, "seq_equal = 34 * 4096 / (5 * 32)", "zh").startswith("正确")
    for wrong in (4352, 174, 1024):  # 34·h/a; 34·h/(5·a·...)-like slips; a round guess
        out = run(cell, f"seq_equal = {wrong}")
        assert out.startswith("Not quite") and "870" not in out
    assert run(cell, "seq_equal = None", "zh").startswith("练习 2")


def test_transformers_attention_exercise_1_the_bytes_of_a_tiled_attention():
    """2·(2sd + 2sd·⌈s/B⌉) = 272,629,760 bytes for s = 8,192, d = 128, B = 128, bfloat16."""
    cell = check_cell("transformers-attention", "exercise 1")
    assert run(cell, "tiled_bytes = 272_629_760").startswith("Correct")
    assert run(cell, "tiled_bytes = 2 * (2 * 8192 * 128 * 65)", "zh").startswith("正确")
    assert "2 bytes" in run(cell, "tiled_bytes = 136_314_880")  # close: numbers, not bytes
    assert "both" in run(cell, "tiled_bytes = 2 * (2 * 8192 * 128 + 8192 * 128 * 64)")
    out = run(cell, "tiled_bytes = 2.6e8")  # "about 260 MiB" read as 260 million bytes
    assert out.startswith("Close") and "mebibytes" in out and "272,629,760" not in out
    for wrong in (545_259_520, 2 * 8192 * 8192):  # the naive attention's; the scores alone
        out = run(cell, f"tiled_bytes = {wrong}")
        assert out.startswith("Not quite") and "272,629,760" not in out
    assert run(cell, "tiled_bytes = None").startswith("Exercise 1")


def test_transformers_attention_exercise_2_a_probability_from_the_running_sum():
    """p = 1 / (e⁻⁴ + e⁻² + e⁻³ + 1) ≈ 0.8310."""
    cell = check_cell("transformers-attention", "exercise 2")
    assert run(cell, "p_five = 0.831").startswith("Correct")
    assert run(cell, "import math; p_five = 1 / (math.exp(-4) + math.exp(-2) + math.exp(-3) + 1)",
               "zh").startswith("正确")
    for wrong in (0.5, 1.0, 0.8488):  # a guess; the exponential alone; another sum
        out = run(cell, f"p_five = {wrong}")
        assert out.startswith("Not quite") and "0.8310" not in out
    assert run(cell, "p_five = None", "zh").startswith("练习 2")


def test_transformers_kernels_exercise_1_the_bytes_of_a_tiled_product():
    """4·(2·1024²·16 + 1024²) = 138,412,032 bytes for blocks of 64."""
    cell = check_cell("transformers-kernels", "exercise 1")
    assert run(cell, "matmul_bytes = 138_412_032").startswith("Correct")
    assert run(cell, "matmul_bytes = 4 * (2 * 1024**2 * 16 + 1024**2)", "zh").startswith("正确")
    assert "stores of C" in run(cell, "matmul_bytes = 4 * 2 * 1024**2 * 16")  # loads only
    assert "4 bytes" in run(cell, "matmul_bytes = 2 * 1024**2 * 16 + 1024**2")  # numbers
    for wrong in (3 * 4 * 1024**2, 2 * 1024**3):  # every input once; the FLOPs
        out = run(cell, f"matmul_bytes = {wrong}")
        assert out.startswith("Not quite") and "138,412,032" not in out
    assert run(cell, "matmul_bytes = None").startswith("Exercise 1")


def test_transformers_kernels_exercise_2_the_bytes_of_a_composed_softmax():
    """32rc + 24r = 134,242,304 bytes for r = 1024, c = 4096, as the page's count gives."""
    cell = check_cell("transformers-kernels", "exercise 2")
    r, c = 1024, 4096
    assert run(cell, "composed_bytes = 134_242_304").startswith("Correct")
    assert run(cell, f"composed_bytes = 32 * {r} * {c} + 24 * {r}", "zh").startswith("正确")
    assert "int64 index" in run(cell, f"composed_bytes = 32 * {r} * {c} + 16 * {r}")
    assert "per-row numbers" in run(cell, f"composed_bytes = 32 * {r} * {c}")
    for wrong in (8 * r * c, 20 * r * c, 32 * 512 * 1000 + 24 * 512):  # fused; reads; old size
        out = run(cell, f"composed_bytes = {wrong}")
        assert out.startswith("Not quite") and "134,242,304" not in out
    assert run(cell, "composed_bytes = None", "zh").startswith("练习 2")


def test_transformers_kernels_exercise_2_mxnet_counts_no_indices():
    """MXNet's max returns no indices: 32rc + 16r = 134,234,112 bytes; PyTorch's count is close."""
    cell = check_cell("transformers-kernels", "exercise 2")
    r, c = 1024, 4096
    assert run(cell, "composed_bytes = 134_234_112", framework="mxnet").startswith("Correct")
    assert run(cell, f"composed_bytes = 32 * {r} * {c} + 16 * {r}", "zh",
               framework="mxnet").startswith("正确")
    assert "no int64" in run(cell, "composed_bytes = 134_242_304", framework="mxnet")
    assert "per-row numbers" in run(cell, f"composed_bytes = 32 * {r} * {c}", framework="mxnet")
    out = run(cell, f"composed_bytes = {8 * r * c}", framework="mxnet")
    assert out.startswith("Not quite") and "134,234,112" not in out


def test_transformers_precision_exercise_1_the_smallest_update_of_a_bfloat16_one():
    """2^-7: 1 + 2^-8 is a tie and rounds to the even neighbour, 1."""
    cell = check_cell("transformers-precision", "exercise 1")
    assert run(cell, "smallest_update = 2**-7").startswith("Correct")
    assert run(cell, "smallest_update = 0.0078125", "zh").startswith("正确")
    assert "halfway" in run(cell, "smallest_update = 2**-8")
    assert "float16" in run(cell, "smallest_update = 2**-10")
    assert "exactly" in run(cell, "smallest_update = 0.0078")
    for exponent in (-7, -8):  # the exponent, not the number
        out = run(cell, f"smallest_update = {exponent}")
        assert out.startswith("Close") and "not its exponent" in out and "0.0078125" not in out
    for wrong in (1e-3, 2**-6):
        out = run(cell, f"smallest_update = {wrong}")
        assert out.startswith("Not quite") and "0.0078125" not in out
    assert run(cell, "smallest_update = None").startswith("Exercise 1")


def test_transformers_precision_exercise_2_an_e4m3_scale_and_its_power_of_two():
    """448 / 3 for the scale, 128 for the largest power of 2 that keeps 3 within 448."""
    cell = check_cell("transformers-precision", "exercise 2")
    assert run(cell, "e4m3_scale, e4m3_power_of_two = 448 / 3, 128").startswith("Correct")
    assert run(cell, "e4m3_scale, e4m3_power_of_two = 149.33, 2**7", "zh").startswith("正确")
    assert run(cell, "e4m3_scale, e4m3_power_of_two = 149.3, 128").startswith("Correct")
    assert "768" in run(cell, "e4m3_scale, e4m3_power_of_two = 448 / 3, 256")
    assert "exponent" in run(cell, "e4m3_scale, e4m3_power_of_two = 448 / 3, 7")
    assert "keep the fraction" in run(cell, "e4m3_scale, e4m3_power_of_two = 149, 128")
    assert "power of 2" in run(cell, "e4m3_scale, e4m3_power_of_two = 448 / 3, 100")
    assert "E5M2" in run(cell, "e4m3_scale, e4m3_power_of_two = 57344 / 3, 16384")
    out = run(cell, "e4m3_scale, e4m3_power_of_two = 3 / 448, 128")
    assert out.startswith("Not quite") and "149.3" not in out
    assert run(cell, "e4m3_scale, e4m3_power_of_two = None, 128").startswith("Exercise 2")


def test_parallelism_exercise_1_the_bytes_a_gpu_sends_for_a_block():
    """Four all-reduces of b·s·d bfloat16 elements, 7/4 of the payload sent on a ring of 8."""
    cell = check_cell("parallelism", "exercise 1")
    assert run(cell, "sent_per_gpu = 469_762_048").startswith("Correct")
    assert run(cell, "sent_per_gpu = 4 * 4096 * 8192 * 2 * 7 / 4", "zh").startswith("正确")
    assert "handed" in run(cell, "sent_per_gpu = 268_435_456")
    assert "backward pass" in run(cell, "sent_per_gpu = 234_881_024")
    assert "2 bytes" in run(cell, "sent_per_gpu = 939_524_096")
    assert "not MiB" in run(cell, "sent_per_gpu = 448")
    assert "exactly" in run(cell, "sent_per_gpu = 4.7e8")
    for wrong in (33_554_432, 1e9):
        out = run(cell, f"sent_per_gpu = {wrong}")
        assert out.startswith("Not quite") and "469,762,048" not in out
    assert run(cell, "sent_per_gpu = None").startswith("Exercise 1")


def test_parallelism_exercise_2_what_sequence_parallelism_leaves():
    """(34 + 80)/8 over 10 + 24/8 + 80/8: 14.25/23, about 0.62."""
    cell = check_cell("parallelism", "exercise 2")
    assert run(cell, "sequence_share = 14.25 / 23").startswith("Correct")
    assert run(cell, "sequence_share = 0.62", "zh").startswith("正确")
    assert "upside down" in run(cell, "sequence_share = 23 / 14.25")
    assert "saves" in run(cell, "sequence_share = 1 - 14.25 / 23")
    assert "percentage" in run(cell, "sequence_share = 62")
    assert "whole layer" in run(cell, "sequence_share = 1 / 8")
    assert "whole layer" in run(cell, "sequence_share = 23 / 114")
    out = run(cell, "sequence_share = 0.9")
    assert out.startswith("Not quite") and "0.62" not in out
    assert run(cell, "sequence_share = None").startswith("Exercise 2")


def test_parallelism_pipeline_exercise_1_the_bubble_of_8_stages_and_32_micro_batches():
    """(p − 1)/(m + p − 1) = 7/39."""
    cell = check_cell("parallelism-pipeline", "exercise 1")
    assert run(cell, "idle_share = 7 / 39").startswith("Correct")
    assert run(cell, "idle_share = 0.18", "zh").startswith("正确")
    assert "m + p − 1" in run(cell, "idle_share = 7 / 32")
    assert "idle share" in run(cell, "idle_share = 32 / 39")
    assert "percentage" in run(cell, "idle_share = 17.95")
    out = run(cell, "idle_share = 0.5")
    assert out.startswith("Not quite") and "7/39" not in out
    assert run(cell, "idle_share = None").startswith("Exercise 1")


def test_parallelism_pipeline_exercise_2_enough_micro_batches_for_a_5_percent_bubble():
    """7/(m + 7) ≤ 0.05 needs m ≥ 133."""
    cell = check_cell("parallelism-pipeline", "exercise 2")
    assert run(cell, "fewest_micro_batches = 133").startswith("Correct")
    assert run(cell, "fewest_micro_batches = 133", "zh").startswith("正确")
    assert "not m" in run(cell, "fewest_micro_batches = 140")
    out = run(cell, "fewest_micro_batches = 132")
    assert "at most 5%" in out and "133" not in out
    assert "whole number" in run(cell, "fewest_micro_batches = 133.4")
    out = run(cell, "fewest_micro_batches = 64")
    assert out.startswith("Not quite") and "133" not in out
    assert run(cell, "fewest_micro_batches = None").startswith("Exercise 2")


def test_parallelism_context_expert_exercise_1_the_ring_s_bytes():
    """15 sends of 2 · 8 · 8,192 · 128 bfloat16 numbers: 503,316,480 bytes."""
    cell = check_cell("parallelism-context-expert", "exercise 1")
    assert run(cell, "ring_bytes = 503_316_480").startswith("Correct")
    assert run(cell, "ring_bytes = 15 * 2 * 8 * 8192 * 128 * 2", "zh").startswith("正确")
    assert "k − 1 times" in run(cell, "ring_bytes = 536_870_912")
    assert "8 heads" in run(cell, "ring_bytes = 2_013_265_920")
    assert "both the keys and the values" in run(cell, "ring_bytes = 251_658_240")
    assert "not MiB" in run(cell, "ring_bytes = 480")
    assert "exactly" in run(cell, "ring_bytes = 5.03e8")
    out = run(cell, "ring_bytes = 1e6")
    assert out.startswith("Not quite") and "503,316,480" not in out
    assert run(cell, "ring_bytes = None").startswith("Exercise 1")


def test_parallelism_context_expert_exercise_2_the_last_process_s_share():
    """Blocks 1 to 8, a mean of 4.5: the last process computes 16/9 of the mean."""
    cell = check_cell("parallelism-context-expert", "exercise 2")
    assert run(cell, "last_over_mean = 16 / 9").startswith("Correct")
    assert run(cell, "last_over_mean = 1.78", "zh").startswith("正确")
    assert "half" in run(cell, "last_over_mean = 7.5 / 4")
    assert "mean over the 8" in run(cell, "last_over_mean = 8")
    assert "zigzag" in run(cell, "last_over_mean = 1")
    assert "4 processes" in run(cell, "last_over_mean = 1.6")
    out = run(cell, "last_over_mean = 3")
    assert out.startswith("Not quite") and "16/9" not in out
    assert run(cell, "last_over_mean = None").startswith("Exercise 2")


def test_parallelism_context_expert_exercise_3_the_all_to_all_s_bytes():
    """14,336 rows out and 14,336 back, 4,096 bfloat16 numbers each: 234,881,024 bytes."""
    cell = check_cell("parallelism-context-expert", "exercise 3")
    assert run(cell, "dispatch_bytes_per_process = 234_881_024").startswith("Correct")
    assert run(cell, "dispatch_bytes_per_process = 2 * 14336 * 4096 * 2",
               "zh").startswith("正确")
    assert "second all-to-all" in run(cell, "dispatch_bytes_per_process = 117_440_512")
    assert "do not leave it" in run(cell, "dispatch_bytes_per_process = 268_435_456")
    assert "one forward pass" in run(cell, "dispatch_bytes_per_process = 469_762_048")
    assert "need not travel" in run(cell, "dispatch_bytes_per_process = 117_469_184")
    out = run(cell, "dispatch_bytes_per_process = 1000")
    assert out.startswith("Not quite") and "234,881,024" not in out
    assert run(cell, "dispatch_bytes_per_process = None").startswith("Exercise 3")


def test_parallelism_planner_exercise_1_state_under_zero_3():
    """16 bytes of each of 8,029,995,008 parameters, over 8 GPUs: 16,059,990,016 bytes."""
    cell = check_cell("parallelism-planner", "exercise 1")
    assert run(cell, "state_bytes_per_gpu = 16_059_990_016").startswith("Correct")
    assert run(cell, "state_bytes_per_gpu = 16 * 8_029_995_008 // 8", "zh").startswith("正确")
    assert "all 16 bytes" in run(cell, "state_bytes_per_gpu = 16 * 8_029_995_008")
    assert "ZeRO-1 or ZeRO-2" in run(cell, "state_bytes_per_gpu = 5.5 * 8_029_995_008")
    assert "count all three" in run(cell, "state_bytes_per_gpu = 12 * 8_029_995_008 / 8")
    assert "exactly" in run(cell, "state_bytes_per_gpu = 1.606e10")
    assert "not GiB" in run(cell, "state_bytes_per_gpu = 14.96")
    assert "not GiB" in run(cell, "state_bytes_per_gpu = 15")
    out = run(cell, "state_bytes_per_gpu = 1e6")
    assert out.startswith("Not quite") and "16,059,990,016" not in out
    assert run(cell, "state_bytes_per_gpu = None").startswith("Exercise 1")


def test_parallelism_planner_exercise_2_the_loss_s_peak():
    """Three float32 tensors of 2 · 8,192 · 128,256 logits: 25,216,155,648 bytes."""
    cell = check_cell("parallelism-planner", "exercise 2")
    assert run(cell, "loss_bytes = 25_216_155_648").startswith("Correct")
    assert run(cell, "loss_bytes = 12 * 8192 * 2 * 128256", "zh").startswith("正确")
    assert "Korthikanti" in run(cell, "loss_bytes = 4 * 8192 * 2 * 128256")
    assert "float32" in run(cell, "loss_bytes = 2 * 8192 * 2 * 128256")
    assert "both sequences" in run(cell, "loss_bytes = 12 * 8192 * 128256")
    assert "not GiB" in run(cell, "loss_bytes = 23.5")
    out = run(cell, "loss_bytes = 1000")
    assert out.startswith("Not quite") and "25,216,155,648" not in out
    assert run(cell, "loss_bytes = None").startswith("Exercise 2")


def test_parallelism_planner_exercise_3_the_bubble_stretches_the_step():
    """An idle share of 7/39: the step is 39/32 of the arithmetic."""
    cell = check_cell("parallelism-planner", "exercise 3")
    assert run(cell, "step_over_compute = 39 / 32").startswith("Correct")
    assert run(cell, "step_over_compute = 1.219", "zh").startswith("正确")
    assert "idle share of the step" in run(cell, "step_over_compute = 1 + 7 / 39")
    assert "not 8" in run(cell, "step_over_compute = 1.25")
    out = run(cell, "step_over_compute = 2")
    assert out.startswith("Not quite") and "39/32" not in out
    assert run(cell, "step_over_compute = None").startswith("Exercise 3")


# ------------------------------------------------------------ the checks in d2l_ext.exercises
CALL = re.compile(r'd2l\.check_exercise\(\s*"(?P<chapter>[\w-]+)",\s*(?P<number>\d+)')
EXERCISES_HEADING = {"en": "## Exercises", "zh": "## 练习"}


def exercise_cells(chapter: sources.Chapter) -> list[sources.Cell]:
    """The code cells from the chapter's Exercises heading to its end."""
    heading = EXERCISES_HEADING[chapter.lang]
    start = next((i for i, c in enumerate(chapter.cells) if c.kind == "markdown"
                  and heading in c.source.split("\n")), None)
    return [] if start is None else [c for c in chapter.cells[start:] if c.kind == "code"]


def page_calls() -> set[tuple[str, str, int, str | None]]:
    """Every (language, chapter, number, framework) that a page's check cell calls."""
    calls = set()
    for chapter in sources.chapters():
        for cell in exercise_cells(chapter):
            for match in CALL.finditer(cell.source):
                assert match["chapter"] == chapter.name, (chapter.path, match.group(0))
                calls.add((chapter.lang, chapter.name, int(match["number"]), cell.framework))
    return calls


def test_every_check_a_page_calls_exists_for_its_frameworks():
    calls = page_calls()
    assert {lang for lang, *_ in calls} == {"en", "zh"}
    assert {(c, n, f) for lang, c, n, f in calls if lang == "en"} == {
        (c, n, f) for lang, c, n, f in calls if lang == "zh"}
    for _, chapter, number, framework in calls:
        for each in [framework] if framework else list(exercises.FRAMEWORKS):
            exercises.check(chapter, number, None, framework=each)  # raises if unknown
    called = {(c, n) for _, c, n, _ in calls}
    assert {(c, n) for c, n, _ in exercises.exercises()} == called  # none left unused
    assert len(called) >= 25


def test_no_exercise_cell_shows_an_answer():
    """The pages hold no condition and no verdict: no ``==``, no "Correct" (nor its
    Chinese) in any code cell from the Exercises heading on, in either language."""
    checked = 0
    for chapter in sources.chapters():
        cells = exercise_cells(chapter)
        assert cells, f"{chapter.path}: no exercise cells found"
        for cell in cells:
            checked += 1
            for shown in ("==", "Correct", "正确"):
                assert shown not in cell.source, f"{chapter.path}: {shown!r} in\n{cell.source}"
    assert checked >= 2 * 25


@pytest.mark.parametrize("lang, start", [("en", "Exercise {n}: "), ("zh", "练习 {n}：")])
def test_an_unset_answer_gets_the_prompt_in_the_readers_language(monkeypatch, lang, start):
    monkeypatch.setenv("D2L_LANG", lang)
    for chapter, number, framework in exercises.exercises():
        said = exercises.check(chapter, number, None, framework=framework or "mxnet")
        assert said.startswith(start.format(n=number)), (chapter, number, said)
        assert isinstance(said, exercises.Text) and said.en != said.zh
    assert exercises.check("memory-sharding", 1, (24, None)).startswith(  # half set
        start.format(n=1))


def test_unknown_exercises_and_missing_run_variables_raise_clear_errors():
    with pytest.raises(exercises.ExerciseError, match="no exercises are checked for chapter "
                       "'memroy'; known chapters: async-computation"):
        exercises.check("memroy", 1, 24)
    with pytest.raises(exercises.ExerciseError, match="'memory' has no checked exercise 3; "
                       "checked: 1, 2"):
        exercises.check("memory", 3, 1)
    with pytest.raises(exercises.ExerciseError, match="differs between torch and mxnet"):
        exercises.check("gpu-basics-streams", 1, {"a"})
    with pytest.raises(exercises.ExerciseError, match="no checked exercise 3 for torch"):
        exercises.check("communication", 3, None, framework="torch")
    with pytest.raises(ValueError, match="framework must be one of"):
        exercises.checker("jax")
    with pytest.raises(exercises.ExerciseError, match="pass costs=costs, final=final"):
        exercises.check("host-device-sync", 2, (7, 1), framework="torch")


def test_the_frameworks_d2l_export_their_check(numpy_too_new):
    d2l = pytest.importorskip("d2l_ext.torch")
    assert d2l.check_exercise("gpu-basics-streams", 1, {"a", "b"}).startswith("Correct")
    assert d2l.check_exercise("gpu-basics-streams", 1, {"d"}).startswith("Not quite")
    assert "check_exercise" in d2l.__all__
    if not numpy_too_new:
        mx_d2l = pytest.importorskip("d2l_ext.mxnet")
        assert mx_d2l.check_exercise("gpu-basics-streams", 1, {"d"}).startswith("Correct")


@pytest.mark.parametrize("outcome, starts", [("agree", "Correct"), ("rank 1 wrong", "Not quite"),
                                             ("a rank failed", "Not quite")])
def test_communication_exercise_4_torch_reports_each_rank(monkeypatch, outcome, starts):
    """The reader's all-reduce is run by comm.spawn on 2 and 4 processes (simulated here):
    every rank's checks passed, one rank's result wrong, or a rank that raised."""
    from d2l_ext import comm

    def spawn(fn, k, function, lengths, timeout):
        assert fn is matches and function is reader and timeout == 60
        if outcome == "a rank failed":
            raise RuntimeError("rank 1 of 2 failed:\nTraceback ...\nNotImplementedError: "
                               "exercise 4: write this function")
        return [[outcome == "agree" or rank != 1] * len(lengths) for rank in range(k)]

    def matches(*args):
        raise AssertionError("runs in the ranks only")

    def reader(x):
        return x

    monkeypatch.setattr(comm, "spawn", spawn)
    cell = check_cell("communication", "# exercise 4: True once", "torch")
    said = run(cell, "written = False", comm_lab=SimpleNamespace(matches_all_reduce=matches))
    assert said.startswith("Exercise 4: write recursive_doubling_all_reduce")
    exercise_4 = exercises.checker("torch")
    said = exercise_4("communication", 4, reader, matches=matches)
    assert said.startswith(starts)
    if outcome == "rank 1 wrong":
        assert "with 2 processes, rank(s) [1] did not end" in said
    if outcome == "a rank failed":
        assert "(NotImplementedError: exercise 4: write this function)" in said


def test_a_dropdown_becomes_a_collapsed_block_in_the_notebooks():
    """Worked solutions sit in a ``{dropdown}`` (sphinx-design, folded on the site); the
    notebooks' plain markdown folds them too, in an HTML <details> block."""
    from pipeline import plain

    ctx = plain.Context("en", {}, "https://example.org/en/")
    text = plain.plain(":::{dropdown} Worked solutions\nExercise 1: $2 \\times 3$ = **6**.\n:::",
                       ctx)
    assert text.startswith("<details>\n<summary>Worked solutions</summary>\n\n")
    assert "Exercise 1: $2 \\times 3$ = **6**." in text and text.endswith("</details>")
    admonition = plain.plain(":::{admonition} Solution\n:class: dropdown\nSix.\n:::", ctx)
    assert admonition.startswith("<details>\n<summary>Solution</summary>")
    assert plain.plain(":::{note}\nOpen.\n:::", ctx).startswith(">")  # others stay quotes


@pytest.mark.parametrize("framework", ["torch", "mxnet"])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_exercise_cell_runs_as_committed_and_prompts(monkeypatch, numpy_too_new,
                                                           framework, lang):
    """Each edition's exercise cells, as a notebook runs them (answers unset), with the real
    ``d2l`` of the framework and stand-ins for the run's variables: every check cell prints
    its exercise's prompt in the edition's language, and nothing else."""
    if framework == "mxnet" and numpy_too_new:
        pytest.skip("MXNet 1.9.1 needs numpy < 1.24")
    import importlib

    d2l = pytest.importorskip(f"d2l_ext.{framework}")
    monkeypatch.setenv("D2L_LANG", lang)
    start = {"en": "Exercise ", "zh": "练习 "}[lang]
    prompted = 0
    for chapter in sources.chapters(lang):
        names = {"d2l": d2l, "importlib": importlib, "num_ops": 10,
                 "predict_async": lambda count: 1.0, "run_async": lambda count: 1.0,
                 "device": SimpleNamespace(type="cpu"), "costs": {}, "final": "",
                 "comm_lab": SimpleNamespace(matches_all_reduce=None), "integer_data": None}
        for cell in exercise_cells(chapter):
            if cell.framework not in (None, framework) or cell.source.startswith("%%"):
                continue
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(cell.source, names)
            if "check_exercise" in cell.source:
                said = out.getvalue()
                assert said.startswith(start) and said.count("\n") == 1, (chapter.path, said)
                prompted += 1
    assert prompted >= 20


def test_letters_reads_the_ways_a_reader_writes_a_choice():
    read = exercises.letters
    for written in ({"a", "b"}, ["B", "a"], "a, b", "a and b", "ab", {"(a)", "(b)"}, "a 和 b",
                    ("a", "or b"), "both a and b", "(a) and (b) only"):
        assert read(written) == {"a", "b"}, written
    assert read("(d) none of them") == {"d"} and read("cdf") == {"c", "d", "f"}
    assert read("cd and f") == {"c", "d", "f"} and read("I think a") == {"a"}
    assert read("") == set() and read(set()) == set()
