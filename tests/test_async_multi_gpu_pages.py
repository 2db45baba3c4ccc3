"""The sentences that chapters 1 (async-computation) and 2 (multi-gpu-concise) compute from
their runs: every branch, with scripted inputs (no timing), in both languages."""

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

from d2l_ext import catalogue, exercises, i18n  # noqa: E402
from d2l_ext.utils import Timing, show, text_table  # noqa: E402

D2L = SimpleNamespace(message=i18n.message, label=i18n.label, say=catalogue.say,
                      figure_text=catalogue.figure_text, show=show, listing=catalogue.listing)


def cell(chapter: str, marker: str, framework: str | None = None) -> str:
    """The one code cell of ``chapter`` (English source) of ``framework`` with ``marker``."""
    parsed = sources.parse(config.CHAPTERS / "en" / f"{chapter}.md")
    found = [c.source for c in parsed.cells if c.kind == "code" and marker in c.source
             and c.framework == framework]
    assert len(found) == 1, f"{chapter}: {len(found)} cells with {marker!r}"
    return found[0]


def run(source: str, lang: str, monkeypatch, **names) -> tuple[dict, str]:
    """Run ``source`` in the reader's language ``lang``; its names and what it printed."""
    monkeypatch.setenv("D2L_LANG", lang)
    monkeypatch.delenv("D2L_CAPTURE", raising=False)
    out = io.StringIO()
    names = {"d2l": D2L} | names
    with contextlib.redirect_stdout(out):
        exec(source, names)
    return names, out.getvalue()


# ------------------------------------------------------------ multi-gpu-concise: results
def result(test_acc: float, seconds: float, devices: list[str],
           spread: float = 0.0) -> SimpleNamespace:
    """A run of three epochs whose timed epochs (the last two) took ``seconds`` ± ``spread``."""
    return SimpleNamespace(test_acc=[0.5, test_acc], train_acc=[0.5, 0.9],
                           sec_per_epoch=seconds, images_per_second=[100.0, 100.0],
                           epoch_seconds=[2 * seconds, seconds - spread, seconds + spread],
                           devices=devices)


def accuracy(monkeypatch, lang: str, k: int, gap: float, on_gpus: bool) -> dict:
    sizes = dict(num_epochs=10, num_train=None, batch_per_device=256) if on_gpus else dict(
        num_epochs=3, num_train=2_000, batch_per_device=32)
    results = {1: result(0.90, 10.0, ["cuda:0"]), k: result(0.90 - gap, 6.0, ["cuda:0"] * k)}
    tab, _ = run(cell("multi-gpu-concise", "label-one-process", "torch"), lang, monkeypatch, k=k)
    labels = tab["labels"]  # the PyTorch tab's
    names, _ = run(cell("multi-gpu-concise", "within = acc_gap <= 0.02"), lang, monkeypatch,
                   results=results, k=k, on_gpus=on_gpus, labels=labels, **sizes)
    return names


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_accuracy_sentence_on_cpu_stand_ins(monkeypatch, lang):
    names = accuracy(monkeypatch, lang, 2, 0.10, on_gpus=False)
    assert ("says little" if lang == "en" else "说明不了") in names["acc_lesson"]
    assert names["updates"] == {1: 3 * 63, 2: 3 * 32}  # 2,000 images, 32 per device and step


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_accuracy_sentence_on_two_gpus_within_and_beyond(monkeypatch, lang):
    within = accuracy(monkeypatch, lang, 2, 0.01, on_gpus=True)["acc_lesson"]
    beyond = accuracy(monkeypatch, lang, 2, 0.05, on_gpus=True)["acc_lesson"]
    if lang == "en":
        assert "within the 0.02 we expect for two GPUs" in within
        assert "more than the 0.02 we expect for two GPUs" in beyond and "curves" in beyond
    else:
        assert "没有超出我们对两块 GPU 的预期 0.02" in within
        assert "超出了我们对两块 GPU 的预期 0.02" in beyond and "曲线" in beyond


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_accuracy_sentence_on_more_gpus_names_the_fewer_updates(monkeypatch, lang):
    names = accuracy(monkeypatch, lang, 8, 0.01, on_gpus=True)
    assert names["updates"] == {1: 2_350, 8: 300}  # 60,000 images, 256 per device and step
    small, large = names["acc_lesson"], accuracy(monkeypatch, lang, 8, 0.05, True)["acc_lesson"]
    for sentence in (small, large):
        assert "300" in sentence and "2,350" in sentence
    if lang == "en":
        assert "stayed within 0.02" in small and "curves" in large
    else:
        assert "仍在 0.02 以内" in small and "曲线" in large
    assert names["speed"].startswith("a speed-up of 1.67, larger than the epochs' spread" if
                                     lang == "en" else "加速比为 1.67，超出了各轮用时的波动")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_speed_up_is_read_against_the_epochs_ranges(monkeypatch, lang):
    """Two timed epochs per run: a speed-up outside the ranges is faster or slower, one
    inside them is about as fast; with one timed epoch there is no range to judge by."""
    def speed(one, many, framework="mxnet"):
        results = {1: one, 2: many}
        marker = {"torch": "label-one-process", "mxnet": "label-one-device"}[framework]
        tab, _ = run(cell("multi-gpu-concise", marker, framework), lang, monkeypatch, k=2)
        names, _ = run(cell("multi-gpu-concise", "within = acc_gap <= 0.02"), lang, monkeypatch,
                       results=results, k=2, on_gpus=True, num_epochs=10, num_train=None,
                       batch_per_device=256, labels=tab["labels"])
        return names["speed"]

    slower = speed(result(0.9, 10.0, ["cuda:0"], 0.5), result(0.9, 12.0, ["cuda:0"] * 2, 0.5))
    same = speed(result(0.9, 10.0, ["cuda:0"], 1.0), result(0.9, 10.2, ["cuda:0"] * 2, 1.0))
    assert ("2 devices were slower than 1 device" if lang == "en"
            else "也就是说，2 个设备比 1 个设备还慢") in slower
    assert ("2 devices were about as fast as 1 device" if lang == "en"
            else "2 个设备并不比 1 个设备快") in same
    assert ("9.0–11.0" in same) and ("9.2–11.2" in same)
    # the PyTorch tab, where each device has its process, names processes
    processes = speed(result(0.9, 10.0, ["cuda:0"], 1.0), result(0.9, 10.2, ["cuda:0"] * 2, 1.0),
                      "torch")
    assert ("with 1 process, 9.2–11.2 s with 2 processes), so 2 processes were about as "
            "fast as 1 process" if lang == "en" else
            "1 个进程用了 9.0–11.0 秒，2 个进程用了 9.2–11.2 秒），"
            "也就是说，2 个进程并不比 1 个进程快") in processes
    single = result(0.9, 10.0, ["cuda:0"])
    single.epoch_seconds = [10.0]
    assert speed(single, result(0.9, 5.0, ["cuda:0"] * 2)) == (
        "a speed-up of 2.00" if lang == "en" else "加速比为 2.00")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_results_table_names_devices_in_the_readers_language(monkeypatch, lang):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    monkeypatch.setattr(i18n, "cjk_font", lambda: None)
    results = {1: result(0.9, 10.0, ["cuda:0"]), 2: result(0.9, 6.0, ["cuda:0", "cuda:1"])}
    source = "\n".join(cell("multi-gpu-concise", marker) for marker in (
        "def device_names(", "fig, axes = plt.subplots(1, 2")).replace("plt.show()", "")
    names, printed = run(source, lang, monkeypatch, results=results, num_epochs=10, plt=plt,
                         MaxNLocator=MaxNLocator, text_table=text_table)
    plt.close("all")
    joined = names["names"][2]
    assert (joined.en, joined.zh) == ("cuda:0, cuda:1", "cuda:0、cuda:1")
    assert ("first left out" if lang == "en" else "不计第一轮") in printed
    short, _ = run(source, lang, monkeypatch, results=results, num_epochs=1, plt=plt,
                   MaxNLocator=MaxNLocator, text_table=text_table)
    plt.close("all")
    assert "first" not in short["per_epoch"].en and "第一轮" not in short["per_epoch"].zh


# ------------------------------------------------------------ async-computation: MXNet's model
@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("times, expected", [
    ((1.10, 1.12, 1.15), ("slower than predicted by more than 5 %", "慢 5% 以上")),
    ((0.90, 0.92, 0.94), ("faster than predicted, by 6% to 10%", "快了 6%–10%")),
    ((0.97, 1.01, 1.03), ("came within 3% of the prediction", "相差都不超过 3%")),
    ((1.00, 1.00, 1.00), ("came within 1% of the prediction", "相差都不超过 1%"))])
def test_mxnet_names_competition_for_cores_only_when_the_loop_is_slower(monkeypatch, lang,
                                                                         times, expected):
    names, printed = run(cell("async-computation", "engine_lesson = d2l.say(", "mxnet"),
                         lang, monkeypatch, async_runs=Timing(times), num_ops=10,
                         predict_async=lambda count: 1.0)
    assert expected[lang == "zh"] in names["engine_lesson"]
    compete = "compete for the same cores" if lang == "en" else "争抢同样的核心"
    assert (compete in printed) == (times[0] > 1.05)


# ------------------------------------------------------------ async-computation: exercise 1
@pytest.mark.parametrize("lang, words", [("en", "as the model predicts"), ("zh", "与模型一致")])
def test_exercise_1_says_agreement_instead_of_a_zero_percent_miss(monkeypatch, lang, words):
    source = cell("async-computation", "prediction = None")
    source = source.replace("prediction = None", "prediction = 1.0", 1)
    d2l = SimpleNamespace(check_exercise=exercises.checker("torch"))  # the check, in d2l_ext
    _, printed = run(source, lang, monkeypatch, d2l=d2l, num_ops=10,
                     predict_async=lambda count: 1.0, run_async=lambda count: 1.001)
    assert words in printed and "0%" not in printed
