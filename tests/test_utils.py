"""d2l_ext.utils: Timer, Benchmark, Accumulator, Animator, TrainProgress/TrainResult."""

from __future__ import annotations

import re
import sys
import time
import types
import warnings

import numpy as np
import pytest

from d2l_ext import utils
from d2l_ext.utils import (
    Accumulator,
    Animator,
    Benchmark,
    Timer,
    TrainProgress,
    TrainResult,
    in_notebook,
)


class FakeClock:
    """Stands in for the ``time`` module: perf_counter returns the given ticks in turn."""

    def __init__(self, *ticks: float) -> None:
        self._ticks = iter(ticks)

    def perf_counter(self) -> float:
        return next(self._ticks)


# ---------------------------------------------------------------- Timer
def test_timer_records_each_interval(monkeypatch):
    monkeypatch.setattr(utils, "time", FakeClock(10.0, 11.0, 20.0, 23.0, 30.0, 32.0))
    timer = Timer()  # starts itself
    assert timer.stop() == 1.0
    timer.start()
    assert timer.stop() == 3.0
    timer.start()
    timer.stop()
    assert timer.times == [1.0, 3.0, 2.0]
    assert timer.sum() == 6.0
    assert timer.avg() == 2.0
    assert timer.cumsum() == [1.0, 4.0, 6.0]


def test_timer_measures_wall_clock():
    timer = Timer()
    time.sleep(0.02)
    assert timer.stop() >= 0.015


# ---------------------------------------------------------------- Benchmark
def test_benchmark_prints_description_and_time(capsys, monkeypatch):
    monkeypatch.setattr(utils, "time", FakeClock(5.0, 6.23456))
    with Benchmark("matmul") as bench:
        pass
    assert capsys.readouterr().out == "matmul: 1.2346 sec\n"
    assert bench.elapsed == pytest.approx(1.23456)


def test_benchmark_default_description(capsys):
    with Benchmark():
        pass
    assert re.fullmatch(r"Done: \d+\.\d{4} sec\n", capsys.readouterr().out)


def test_benchmark_measures_a_sleep(capsys):
    with Benchmark("sleep") as bench:
        time.sleep(0.05)
    out = capsys.readouterr().out
    assert bench.elapsed >= 0.045
    assert out == f"sleep: {bench.elapsed:.4f} sec\n"


def test_benchmark_speaks_the_reader_language(monkeypatch, capsys):
    monkeypatch.setenv("D2L_LANG", "zh")
    with Benchmark(utils.message(en="numpy", zh="numpy 版")) as bench:
        pass
    assert capsys.readouterr().out == f"numpy 版：{bench.elapsed:.4f} 秒\n"


def test_utils_imports_no_framework_and_no_pyplot(run_python):
    """Benchmark cannot synchronise a device, and Animator opens no pyplot window."""
    code = (
        "import sys, time\n"
        "from d2l_ext.utils import Animator, Benchmark\n"
        "with Benchmark('x'):\n"
        "    time.sleep(0.001)\n"
        "a = Animator(legend=['a', 'b'])\n"
        "a.add(1, (2, 3))\n"
        "assert '<svg' in a.svg()\n"
        "print(sorted(m for m in ('torch', 'mxnet', 'matplotlib.pyplot', 'IPython')"
        " if m in sys.modules))\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "[]"


# ---------------------------------------------------------------- Accumulator
def test_accumulator_add_getitem_reset():
    acc = Accumulator(3)
    assert acc.data == [0.0, 0.0, 0.0]
    acc.add(1, 2, 3)
    acc.add(0.5, np.float32(1.5), np.int64(2))
    assert acc.data == [1.5, 3.5, 5.0]
    assert (acc[0], acc[1], acc[2]) == (1.5, 3.5, 5.0)
    assert all(type(v) is float for v in acc.data)
    acc.reset()
    assert acc.data == [0.0, 0.0, 0.0]


# ---------------------------------------------------------------- Animator
def test_animator_keeps_data_like_d2l():
    animator = Animator(xlabel="epoch", legend=["loss", "train acc", "test acc"])
    animator.add(1, (0.5, 0.6, None))  # None: no point for that line
    animator.add(2, (0.4, 0.7, 0.8))
    assert animator.X == [[1.0, 2.0], [1.0, 2.0], [2.0]]
    assert animator.Y == [[0.5, 0.4], [0.6, 0.7], [0.8]]
    ax = animator.axes[0]
    assert len(ax.get_lines()) == 3
    assert ax.get_xlabel() == "epoch"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["loss", "train acc",
                                                                   "test acc"]


def test_animator_scalar_and_sequence_x():
    animator = Animator()
    animator.add(0, 1)
    animator.add(np.float32(1), np.float64(2))
    assert animator.X == [[0.0, 1.0]]
    assert animator.Y == [[1.0, 2.0]]
    two = Animator()
    two.add((1, 2), (3, 4))
    assert two.X == [[1.0], [2.0]]
    assert two.Y == [[3.0], [4.0]]


def test_animator_subplots():
    animator = Animator(nrows=2, ncols=2)
    assert len(animator.axes) == 4


def test_animator_displays_nothing_outside_a_notebook(capsys):
    assert not in_notebook()
    animator = Animator(xlim=[0, 3], ylim=[0, 1])
    animator.add(1, 0.5)
    animator.add(2, 0.25)
    assert capsys.readouterr() == ("", "")
    assert animator._display is None
    assert tuple(animator.axes[0].get_xlim()) == (0, 3)


def test_animator_add_does_not_warn():
    """matplotlib 3.7 warns on every fig.tight_layout() call after the first."""
    animator = Animator(legend=["a"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for x in range(3):
            animator.add(x, x / 2)
    assert animator.Y == [[0.0, 0.5, 1.0]]


def test_animator_svg():
    animator = Animator()
    animator.add(1, 2)
    svg = animator.svg()
    assert svg.lstrip().startswith("<?xml")
    assert "<svg" in svg and svg.rstrip().endswith("</svg>")


class FakeHandle:
    def __init__(self) -> None:
        self.updates: list = []

    def update(self, obj, metadata=None) -> None:
        self.updates.append(obj)


@pytest.fixture
def fake_notebook(monkeypatch):
    """Pretend to run in a Jupyter kernel; record what is displayed.

    Uses the real IPython when installed (patching ``get_ipython`` and
    ``display``), otherwise stub modules.
    """
    try:
        import IPython
        import IPython.display
    except ImportError:
        IPython = types.ModuleType("IPython")
        IPython.display = types.ModuleType("IPython.display")

        class SVG:
            def __init__(self, data: str) -> None:
                self.data = data

        IPython.display.SVG = SVG
        monkeypatch.setitem(sys.modules, "IPython", IPython)
        monkeypatch.setitem(sys.modules, "IPython.display", IPython.display)
    shown = types.SimpleNamespace(calls=[], handle=FakeHandle())

    def display(obj, display_id=None, metadata=None):
        shown.calls.append((obj, display_id))
        return shown.handle

    monkeypatch.setattr(IPython, "get_ipython", lambda: types.SimpleNamespace(kernel=object()),
                        raising=False)
    monkeypatch.setattr(IPython.display, "display", display, raising=False)
    return shown


def test_in_notebook_needs_a_kernel(fake_notebook, monkeypatch):
    assert in_notebook()
    # terminal IPython: a shell without a kernel
    monkeypatch.setattr(sys.modules["IPython"], "get_ipython", lambda: types.SimpleNamespace())
    assert not in_notebook()
    monkeypatch.setattr(sys.modules["IPython"], "get_ipython", lambda: None)
    assert not in_notebook()


def test_animator_in_notebook_displays_once_then_updates(fake_notebook, capsys):
    animator = Animator()
    animator.add(1, 0.5)
    assert len(fake_notebook.calls) == 1
    image, display_id = fake_notebook.calls[0]
    assert display_id is True
    assert "<svg" in image.data
    assert fake_notebook.handle.updates == []
    animator.add(2, 0.25)
    animator.add(3, 0.125)
    assert len(fake_notebook.calls) == 1
    assert len(fake_notebook.handle.updates) == 2
    assert "<svg" in fake_notebook.handle.updates[-1].data
    assert capsys.readouterr().out == ""


# ---------------------------------------------------------------- TrainResult / TrainProgress
def make_result(**kwargs) -> TrainResult:
    return TrainResult(["cuda:0", "cuda:1"], 256, 0.1, **kwargs)


def test_sec_per_epoch_leaves_out_the_first_epoch():
    assert make_result(epoch_seconds=[10.0, 2.0, 4.0]).sec_per_epoch == 3.0
    assert make_result(epoch_seconds=[5.0]).sec_per_epoch == 5.0


def test_summary():
    result = make_result(test_acc=[0.5, 0.75], epoch_seconds=[10.0, 3.0],
                         images_per_second=[1000.0, 2000.0])
    assert result.summary() == ("test acc 0.750, 3.0 sec/epoch, 1500 images/sec "
                                "on cuda:0, cuda:1")
    assert result.summary().zh == ("测试准确率 0.750，每轮 3.0 秒，每秒 1500 张图像，"
                                   "设备：cuda:0、cuda:1")


def test_train_progress_speaks_the_reader_language(monkeypatch, capsys):
    monkeypatch.setenv("D2L_LANG", "zh")
    result = make_result()
    progress = TrainProgress(result, num_epochs=1)
    progress.epoch(1, 1.5, 0.4, 0.5, 10.0, 6000.0)
    progress.done()
    assert capsys.readouterr().out.splitlines() == [
        "第 1 轮：损失 1.500，训练准确率 0.400，测试准确率 0.500，10.0 秒，每秒 6000 张图像",
        "测试准确率 0.500，每轮 10.0 秒，每秒 6000 张图像，设备：cuda:0、cuda:1",
    ]


def test_device_names_count_repeated_stand_ins():
    assert TrainResult(["cpu", "cpu"], 64, 0.1).device_names() == "2 \u00d7 cpu"
    assert TrainResult(["cuda:0"], 64, 0.1).device_names() == "cuda:0"
    assert TrainResult(["cpu(0)", "cpu(1)"], 64, 0.1).device_names() == "cpu(0), cpu(1)"


def test_train_progress_fills_the_result(capsys):
    result = make_result()
    progress = TrainProgress(result, num_epochs=2)
    assert progress.animator is None
    progress.batch(0.5, 2.0, 0.3)  # outside a notebook: not shown
    assert capsys.readouterr().out == ""
    progress.epoch(1, 1.5, 0.4, 0.5, 10.0, 6000.0)
    progress.epoch(2, 0.5, 0.8, 0.7, 2.0, 30000.0)
    assert result.train_loss == [1.5, 0.5]
    assert result.train_acc == [0.4, 0.8]
    assert result.test_acc == [0.5, 0.7]
    assert result.epoch_seconds == [10.0, 2.0]
    assert result.images_per_second == [6000.0, 30000.0]
    assert capsys.readouterr().out.splitlines() == [
        "epoch 1: loss 1.500, train acc 0.400, test acc 0.500, 10.0 sec, 6000 images/sec",
        "epoch 2: loss 0.500, train acc 0.800, test acc 0.700, 2.0 sec, 30000 images/sec",
    ]
    assert progress.done() is result
    assert capsys.readouterr().out == result.summary() + "\n"
    assert result.sec_per_epoch == 2.0


def test_train_progress_quiet(capsys):
    result = make_result()
    progress = TrainProgress(result, num_epochs=1, verbose=False)
    progress.epoch(1, 1.0, 0.5, 0.5, 1.0, 100.0)
    assert progress.done() is result
    assert result.test_acc == [0.5]
    assert capsys.readouterr().out == ""


def test_train_progress_in_notebook_plots(fake_notebook, capsys):
    result = make_result()
    progress = TrainProgress(result, num_epochs=2)
    assert progress.animator is not None
    progress.batch(0.5, 2.0, 0.3)
    progress.epoch(1, 1.5, 0.4, 0.5, 10.0, 6000.0)
    assert progress.animator.X == [[0.5, 1.0], [0.5, 1.0], [1.0]]
    assert progress.animator.Y == [[2.0, 1.5], [0.3, 0.4], [0.5]]
    assert len(fake_notebook.calls) == 1 and len(fake_notebook.handle.updates) == 1
    assert result.test_acc == [0.5]
    assert capsys.readouterr().out == ""  # the plot replaces the per-epoch line


def test_train_result_summary_without_epochs_and_device_names():
    same = utils.TrainResult(["cpu", "cpu"], 128, 0.2)
    assert same.summary() == "no epochs trained on 2 \u00d7 cpu"
    mixed = utils.TrainResult(["cpu(0)", "cpu(1)"], 128, 0.2)
    assert mixed.device_names() == "cpu(0), cpu(1)"
    assert mixed.device_names("、") == "cpu(0)、cpu(1)"
    assert "cpu(0)、cpu(1)" in mixed.summary().zh and "cpu(0), cpu(1)" in mixed.summary().en


def test_message_answers_in_the_reader_language(monkeypatch):
    from d2l_ext.utils import message, reader_language

    monkeypatch.delenv("D2L_LANG", raising=False)
    assert reader_language() == "en" and message(en="Correct.", zh="正确。") == "Correct."
    monkeypatch.setenv("D2L_LANG", "zh")
    assert reader_language() == "zh" and message(en="Correct.", zh="正确。") == "正确。"
    monkeypatch.setenv("D2L_LANG", "fr")  # not an edition of the book: English
    assert message(en="Correct.", zh="正确。") == "Correct."


def test_train_progress_quiet_in_a_notebook_draws_nothing(fake_notebook, capsys):
    """The speed ladder trains with verbose=False: no plot may be drawn inside its timings."""
    progress = TrainProgress(make_result(), num_epochs=2, verbose=False)
    assert progress.animator is None
    progress.batch(0.5, 2.0, 0.3)
    progress.epoch(1, 1.5, 0.4, 0.5, 10.0, 6000.0)
    progress.done()
    assert fake_notebook.calls == [] and capsys.readouterr().out == ""
    assert TrainProgress(make_result(), num_epochs=2).animator is not None  # verbose: drawn


# ------------------------------------------------------------ Timing and measure
def test_timing_median_range_and_text():
    t = utils.Timing((0.012, 0.010, 0.011))
    assert (t.median, t.min, t.max) == (0.011, 0.010, 0.012)
    assert t.spread == pytest.approx(0.002 / 0.011)
    assert t.text() == "11.00 ms (10.00\u201312.00)"
    assert t.text("s", 3) == "0.011 s (0.010\u20130.012)"
    assert t.text("us", 0).zh == "11,000 微秒（10,000\u201312,000）"  # thousands separated
    assert t.text("us", 0).en == "11,000 \u00b5s (10,000\u201312,000)"  # "us" written µs
    with pytest.raises(ValueError, match="at least one"):
        utils.Timing(())


def test_clearly_faster_needs_ranges_that_do_not_overlap():
    fast, slow, overlapping = (utils.Timing(ts) for ts in
                               ((1.0, 1.1), (1.2, 1.3), (1.05, 1.25)))
    assert fast.clearly_faster(slow) and not slow.clearly_faster(fast)
    assert not fast.clearly_faster(overlapping) and not overlapping.clearly_faster(slow)


def test_measure_times_each_run_between_two_barriers(monkeypatch):
    calls = []
    clock = iter(range(100))
    monkeypatch.setattr(utils.time, "perf_counter", lambda: float(next(clock)))
    timing = utils.measure(lambda: calls.append("f"), lambda: calls.append("barrier"),
                           repeats=2, warmup=1)
    # the warm-up run, then per repeat: drain, start, work, drain, stop
    assert calls == ["f", "barrier", "f", "barrier", "barrier", "f", "barrier"]
    assert timing.times == (1.0, 1.0)
    with pytest.raises(ValueError, match="repeats"):
        utils.measure(lambda: None, lambda: None, repeats=0)


def test_paired_verdict_may_allow_rounds_the_other_way():
    from d2l_ext.utils import paired_verdict
    ratios = [0.8] * 10 + [1.3]
    assert paired_verdict(ratios) == "no clear gain"
    assert paired_verdict(ratios, allow=1) == "faster"
    assert paired_verdict([1.2] * 4 + [0.9], allow=1) == "slower"
    assert paired_verdict([0.8] * 9 + [1.3, 1.0], allow=1) == "no clear gain"
    assert paired_verdict([1.0, 1.0]) == "no clear gain"  # a tie is neither way


# ---------------------------------------------------------------- Table, text_table, show
def _speed_table():
    from d2l_ext.utils import message, text_table

    return text_table([message(en="way", zh="方式"), "ms", message(en="share", zh="占比")],
                      [[message(en="a < b & c", zh="甲小于乙"), 12.345, 0.5],
                       ["plain", 1.0, 0.25]], ["", ".2f", ".0%"], left=1)


def test_a_table_is_still_its_text(capsys):
    """Code that used the text table keeps working: it is a str, printed as before."""
    from d2l_ext.utils import Table

    table = _speed_table()
    text = "way           ms  share\na < b & c  12.35    50%\nplain       1.00    25%"
    assert isinstance(table, Table) and isinstance(table, str)
    assert table == text and str(table) == text and type(str(table)) is str
    assert table.splitlines()[1] == "a < b & c  12.35    50%" and f"{table}" == text
    print(table)
    assert capsys.readouterr().out == text + "\n"
    assert (table.columns, table.cells, table.left) == (
        ("way", "ms", "share"), (("a < b & c", "12.35", "50%"), ("plain", "1.00", "25%")), 1)
    import pickle

    again = pickle.loads(pickle.dumps(table))
    assert again == text and again.cells == table.cells and again.left == 1


def _html_cells(markup: str) -> list[list[tuple[str, str, str]]]:
    """The rows of an HTML table: (tag, alignment, text) of each cell."""
    return [re.findall(r'<(t[hd]) style="text-align: (\w+)">([^<]*)</t[hd]>', row)
            for row in re.findall(r"<tr>(.*?)</tr>", markup)]


def test_a_table_in_html_escapes_and_aligns():
    """The HTML table escapes < and &, puts the headers in <thead>, and aligns the first
    ``left`` columns left, the numbers right."""
    markup = _speed_table()._repr_html_()
    assert markup.startswith('<table class="d2l-table">') and markup.endswith("</table>")
    assert markup.index("<thead>") < markup.index("way") < markup.index("</thead>")
    assert _html_cells(markup) == [
        [("th", "left", "way"), ("th", "right", "ms"), ("th", "right", "share")],
        [("td", "left", "a &lt; b &amp; c"), ("td", "right", "12.35"), ("td", "right", "50%")],
        [("td", "left", "plain"), ("td", "right", "1.00"), ("td", "right", "25%")]]
    assert "a < b" not in markup


def test_a_table_in_html_speaks_the_reader_language(monkeypatch):
    """Text headers and cells show in Chinese for a Chinese reader, in HTML as in text."""
    monkeypatch.setenv("D2L_LANG", "zh")
    table = _speed_table()
    assert table.splitlines()[0].split() == ["方式", "ms", "占比"]
    assert [c[2] for c in _html_cells(table._repr_html_())[0]] == ["方式", "ms", "占比"]
    assert _html_cells(table._repr_html_())[1][0] == ("td", "left", "甲小于乙")


def test_while_capturing_a_table_records_its_html_in_both_languages(tmp_path, monkeypatch):
    from d2l_ext import i18n

    monkeypatch.setenv("D2L_CAPTURE", str(tmp_path))
    english = _speed_table()
    pairs = dict(i18n.recorded(tmp_path)[None])
    monkeypatch.delenv("D2L_CAPTURE")
    monkeypatch.setenv("D2L_LANG", "zh")
    chinese = _speed_table()
    assert pairs[english] == chinese
    assert pairs[english._repr_html_()] == chinese._repr_html_()


def test_ipython_shows_a_table_as_html_with_its_text():
    """What a notebook receives: the HTML table, and the text (not a quoted repr) for a
    reader without HTML."""
    formatters = pytest.importorskip("IPython.core.formatters")
    table = _speed_table()
    data, _ = formatters.DisplayFormatter().format(table)
    assert data["text/html"] == table._repr_html_()
    assert data["text/plain"] == str(table)


def test_show_prints_outside_ipython_and_displays_under_it(capsys, monkeypatch):
    display = pytest.importorskip("IPython.display")
    IPython = sys.modules["IPython"]
    table = _speed_table()
    utils.show(table, 3)
    assert capsys.readouterr().out == f"{table}\n3\n"
    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: types.SimpleNamespace())
    monkeypatch.setattr(display, "display", lambda *objs: shown.extend(objs))
    utils.show(table, 3)
    assert shown == [table, 3] and capsys.readouterr().out == ""


def test_a_table_aligns_left_the_columns_it_is_given():
    """``left`` as a set of columns: words left wherever they sit, numbers right."""
    from d2l_ext.utils import text_table

    table = text_table(["trace", "ms", "call", "n"], [["a", 2.5, "cudaMemcpy", 7],
                                                        ["bbbb", 12.25, "x", 123]],
                       ["", ".2f", "", "d"], left={0, 2})
    assert table.splitlines() == ["trace     ms  call          n",
                                  "a       2.50  cudaMemcpy    7",
                                  "bbbb   12.25  x           123"]
    html = table._repr_html_()
    aligns = re.findall(r'text-align: (\w+)', html.split("<tbody>")[1].split("</tr>")[0])
    assert aligns == ["left", "right", "left", "right"]
    assert text_table(["a", "b"], [[1, 2]], ["d", "d"], left=1).splitlines()[1] == "1  2"


def test_negative_numbers_carry_a_true_minus_sign_in_tables_and_sentences():
    """A negative number in a table cell, and one passed through ``signed``, is written with
    U+2212, as the prose writes it; strings, exponents and positive numbers are left alone."""
    from d2l_ext.utils import signed, text_table

    table = text_table(["what", "miss", "tiny"], [["a", -0.1, -1e-5], ["-b", 0.25, 2e-5]],
                       ["", "+.0%", ".1e"], left=1)
    assert table.cells == (("a", "\u221210%", "\u22121.0e-05"), ("-b", "+25%", "2.0e-05"))
    assert signed(-0.033, "+.1%") == "\u22123.3%" and signed(0.5, "+.1f") == "+0.5"
    assert signed(-2, "d") == "\u22122"


def test_an_exact_zero_in_an_exponent_column_is_written_0():
    """0.0e+00 and 0.00 read as rounded values; an exact zero prints 0, a tiny non-zero one
    in fixed point says it lies below the last digit ("<0.01", ">−0.01"), and the others
    keep their format."""
    from d2l_ext.utils import formatted, text_table

    table = text_table(["a", "b"], [[0.0, 0.0], [0, 1e-300], [-0.0, -1e-300], [1.0, 3.0]],
                       [".1e", ".2f"])
    assert table.cells == (("0", "0"), ("0", "<0.01"), ("0", ">\u22120.01"), ("1.0e+00", "3.00"))
    assert text_table(["a"], [[1e-300]], [".1e"]).cells == (("1.0e-300",),)
    assert [formatted(v, f) for v, f in ((0.004, ".2f"), (0.005001, ".2f"), (0.04, ",.1f"),
                                         (0.4, ".0f"), (-0.0004, "+.3f"), (2e-7, "f"))] == \
        ["<0.01", "0.01", "<0.1", "<1", ">\u22120.001", "<0.000001"]


def test_a_placeholder_string_in_a_column_of_numbers_is_left_as_it_is():
    from d2l_ext.utils import text_table

    table = text_table(["a", "b"], [["–", 1.5], [2.25, "n/a"]], [",.1f", "~3"])
    assert table.cells == (("–", "1.50"), ("2.2", "n/a"))


def test_significant_keeps_three_digits_without_an_exponent():
    from d2l_ext.utils import significant, text_table

    assert [significant(v) for v in (16, 20.1, 1234.5, 0.012345, 9.996, 0.9996, 123456.7)] == \
        ["16.0", "20.1", "1,234", "0.0123", "10.0", "1.00", "123,457"]
    assert significant(5.0, 1) == "5"
    with pytest.raises(ValueError, match="at least 1"):
        significant(1.0, 0)
    table = text_table(["a"], [[16], [0.0], [-0.0001], [-2.5]], ["~3"])
    assert table.cells == (("16.0",), ("0",), ("\u22120.000100",), ("\u22122.50",))


def test_is_whole_takes_python_and_numpy_integers_only():
    is_whole = utils.is_whole
    assert is_whole(3) and is_whole(np.int64(3)) and is_whole(0) and is_whole(-2)
    assert not any(is_whole(v) for v in (True, 3.0, float("nan"), "3", None, np.float32(3)))


def test_whole_numbers_checks_each_and_returns_python_ints():
    s, d = utils.whole_numbers(s=np.int32(7), d=3)
    assert (s, d) == (7, 3) and type(s) is int
    assert utils.whole_numbers(0, rows=0) == [0]
    with pytest.raises(ValueError, match="d must be at least 1, got 0"):
        utils.whole_numbers(s=4, d=0)
    with pytest.raises(TypeError, match="s must be a whole number, got 4.0"):
        utils.whole_numbers(s=4.0)
    with pytest.raises(TypeError, match="flag must be a whole number"):
        utils.whole_numbers(flag=True)
