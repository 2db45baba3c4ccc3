"""Framework-free helpers: timing, accumulating and live plotting (d2l names)."""

from __future__ import annotations

import html
import io
import math
import numbers
import re
import sys
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from d2l_ext.i18n import (  # noqa: F401 - some are re-exported
    LANGUAGES,
    Text,
    display_width,
    figure_metadata,
    label,
    message,
    pad,
    reader_language,
    record,
)


class Timer:
    """Record multiple running times (wall clock)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.start()

    def start(self) -> None:
        """Start the timer."""
        self.tik = time.perf_counter()

    def stop(self) -> float:
        """Stop the timer, record the time in a list and return it."""
        self.times.append(time.perf_counter() - self.tik)
        return self.times[-1]

    def avg(self) -> float:
        """Return the average time."""
        return sum(self.times) / len(self.times)

    def sum(self) -> float:
        """Return the sum of time."""
        return sum(self.times)

    def cumsum(self) -> list[float]:
        """Return the accumulated time."""
        return np.array(self.times).cumsum().tolist()


class Benchmark:
    """Print the wall-clock time spent inside a ``with`` block.

    It does *not* wait for the device: work that a framework has only queued
    when the block ends is not counted. The chapter on asynchronous
    computation relies on this; add an explicit barrier inside the block to
    time the work itself.
    """

    def __init__(self, description: str = "Done") -> None:
        self.description = description

    def __enter__(self) -> Benchmark:
        self.timer = Timer()
        return self

    def __exit__(self, *args: Any) -> None:
        self.elapsed = self.timer.stop()
        what = self.description
        print(message(en=f"{getattr(what, 'en', what)}: {self.elapsed:.4f} sec",
                      zh=f"{getattr(what, 'zh', what)}：{self.elapsed:.4f} 秒"))


@dataclass(frozen=True)
class Timing:
    """Wall times (seconds) of repeated runs of the same work: the median and the spread.

    Compare two timings by their ranges, not their medians alone: :meth:`clearly_faster`
    is true only when every run of one was faster than every run of the other.
    """

    times: tuple[float, ...]
    #: each time is the mean over this many back-to-back runs (1: a single run)
    repetitions: int = 1

    #: a timing whose median lies more than this fraction above its fastest run is disturbed
    DISTURBED = 0.25

    def __post_init__(self) -> None:
        if not self.times:
            raise ValueError("a Timing needs at least one time.")
        if self.repetitions < 1:
            raise ValueError(f"repetitions must be at least 1, got {self.repetitions}.")

    @property
    def median(self) -> float:
        return float(np.median(self.times))

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def max(self) -> float:
        return max(self.times)

    @property
    def spread(self) -> float:
        """(max - min) / median: the relative width of the range."""
        return (self.max - self.min) / self.median if self.median else 0.0

    @property
    def disturbed(self) -> bool:
        """The median lies more than :attr:`DISTURBED` above the fastest run: most runs were
        slowed by something else (another process, a clock change). Each timing says so for
        itself; a tight timing beside a disturbed one keeps its median."""
        return self.median > self.min * (1 + self.DISTURBED)

    @property
    def typical(self) -> float:
        """The median; the fastest run where the timing was :attr:`disturbed`."""
        return self.min if self.disturbed else self.median

    def clearly_faster(self, other: Timing) -> bool:
        """Every run of ``self`` was faster than every run of ``other`` (no overlap)."""
        return self.max < other.min

    def text(self, unit: str = "ms", digits: int = 2) -> Text:
        """``"12.34 ms (11.90–13.01)"``: the median and the range, in ``unit`` (s, ms, us),
        in the reader's language (Chinese: ``"12.34 毫秒（11.90–13.01）"``), with thousands
        separators (``"1,234.50 ms"``)."""
        scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
        zh_unit = {"s": "秒", "ms": "毫秒", "us": "微秒"}[unit]
        median, low, high = (f"{t * scale:,.{digits}f}"
                             for t in (self.median, self.min, self.max))
        en_unit = {"us": "\u00b5s"}.get(unit, unit)  # "us" selects microseconds, shown as µs
        return message(en=f"{median} {en_unit} ({low}\u2013{high})",
                       zh=f"{median} {zh_unit}（{low}\u2013{high}）")


FASTER, NO_GAIN, SLOWER = "faster", "no clear gain", "slower"


def paired_verdict(ratios: Sequence[float], allow: int = 0) -> str:
    """A setting against another from the ratios of their times, one per round in which both
    ran (``this / other``): ``"faster"`` if it was faster in every round, ``"slower"`` if
    slower in every round, else ``"no clear gain"`` (``""`` without rounds); ``allow``
    rounds may go the other way (a disturbed round need not veto a verdict). A drift of the
    machine falls on both members of a pair alike, so pairs survive a drift that makes
    ranges over all rounds overlap."""
    if not ratios:
        return ""
    if sum(r >= 1 for r in ratios) <= allow:
        return FASTER
    if sum(r <= 1 for r in ratios) <= allow:
        return SLOWER
    return NO_GAIN


def false_alarm(rounds: int) -> float:
    """The chance that two equally fast settings get a :func:`paired_verdict` other than
    "no clear gain": each round's ratio on either side of 1 with even odds, independently,
    and all ``rounds`` on the same side."""
    return 2 * 0.5 ** rounds


def measure(f, barrier, repeats: int = 5, warmup: int = 1) -> Timing:
    """Run ``f()`` ``warmup`` times, then time ``repeats`` runs, each between two barriers.

    ``barrier()`` must wait until the device has finished all queued work (a framework's
    ``synchronize``/``waitall``): the timer starts with the queue drained and stops only
    when the work is done, not merely queued.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}.")
    for _ in range(warmup):
        f()
    times = []
    for _ in range(repeats):
        barrier()
        start = time.perf_counter()
        f()
        barrier()
        times.append(time.perf_counter() - start)
    return Timing(tuple(times))


class Accumulator:
    """Accumulate sums over ``n`` variables."""

    def __init__(self, n: int) -> None:
        self.data = [0.0] * n

    def add(self, *args: Any) -> None:
        self.data = [a + float(b) for a, b in zip(self.data, args)]

    def reset(self) -> None:
        self.data = [0.0] * len(self.data)

    def __getitem__(self, idx: int) -> float:
        return self.data[idx]


def check_split(num_x: int, num_y: int, num_devices: int) -> None:
    """Raise ``ValueError`` unless ``num_x`` examples and ``num_y`` labels fit on the devices."""
    if num_x != num_y:
        raise ValueError(f"X has {num_x} examples but y has {num_y}; "
                         "they must have the same length.")
    if num_devices == 0:
        raise ValueError("devices is empty; pass at least one device.")
    if num_x < num_devices:
        examples = "example" if num_x == 1 else "examples"
        raise ValueError(message(
            en=f"cannot split {num_x} {examples} across {num_devices} devices: use a batch "
               "with at least as many examples as devices.",
            zh=f"无法把 {num_x} 个样本分到 {num_devices} 个设备上：每个批量的样本数至少要与设备数"
               "相同。"))




def check_train_args(**args: Any) -> None:
    """Raise a ``ValueError`` naming the argument of a ``train`` function that is out of
    range, in the calling process (before any rank or device starts): ``batch_size``,
    ``lr``, ``num_epochs``, ``num_train`` and ``num_test`` (None: all) must be positive,
    ``warmup_epochs`` and ``num_workers`` 0 or more, ``label_smoothing`` in [0, 1)."""
    for name in ("batch_size", "lr", "num_epochs", "num_train", "num_test"):
        value = args.get(name)
        if value is not None and not value > 0:
            raise ValueError(f"{name}={value!r}: it must be positive"
                             + (" (or None: all examples)." if name.startswith("num_t")
                                else "."))
    for name in ("warmup_epochs", "num_workers"):
        if args.get(name, 0) < 0:
            raise ValueError(f"{name}={args[name]!r}: it must be 0 or more.")
    smoothing = args.get("label_smoothing", 0.0)
    if not 0.0 <= smoothing < 1.0:
        raise ValueError(f"label_smoothing={smoothing!r}: it must be in [0, 1).")


def in_notebook() -> bool:
    """Whether the code runs in a Jupyter kernel (not a script or terminal IPython)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and hasattr(shell, "kernel")


class Animator:
    """Plot data incrementally: live in a notebook, silent in scripts.

    In a Jupyter kernel the figure is shown once and updated in place on
    every :meth:`add`. Elsewhere nothing is displayed and no window opens; the
    data stay in ``X`` and ``Y`` and the figure in ``fig`` (``fig.savefig``).
    """

    def __init__(self, xlabel: str | None = None, ylabel: str | None = None,
                 legend: Sequence[str] | None = None, xlim: Sequence[float] | None = None,
                 ylim: Sequence[float] | None = None, xscale: str = "linear",
                 yscale: str = "linear", fmts: Sequence[str] = ("-", "m--", "g-.", "r:"),
                 nrows: int = 1, ncols: int = 1,
                 figsize: tuple[float, float] = (3.5, 2.5)) -> None:
        from matplotlib.figure import Figure  # no pyplot: never opens a window

        self.fig = Figure(figsize=figsize, layout="tight")
        axes = self.fig.subplots(nrows, ncols)
        self.axes = list(np.ravel(axes)) if nrows * ncols > 1 else [axes]
        self._config = dict(xlabel=xlabel, ylabel=ylabel, xlim=xlim, ylim=ylim,
                            xscale=xscale, yscale=yscale, legend=list(legend or []))
        self.X: list[list[float]] | None = None
        self.Y: list[list[float]] | None = None
        self.fmts = fmts
        self._display = None

    def _config_axes(self) -> None:
        ax, c = self.axes[0], self._config
        ax.set_xlabel(c["xlabel"])
        ax.set_ylabel(c["ylabel"])
        ax.set_xscale(c["xscale"])
        ax.set_yscale(c["yscale"])
        if c["xlim"] is not None:
            ax.set_xlim(c["xlim"])
        if c["ylim"] is not None:
            ax.set_ylim(c["ylim"])
        if c["legend"]:
            ax.legend(c["legend"])
        ax.grid(True)

    def add(self, x: Any, y: Any) -> None:
        """Add one point to each line; ``None`` values are skipped."""
        if not hasattr(y, "__len__"):
            y = [y]
        n = len(y)
        if not hasattr(x, "__len__"):
            x = [x] * n
        if not self.X:
            self.X = [[] for _ in range(n)]
        if not self.Y:
            self.Y = [[] for _ in range(n)]
        for i, (a, b) in enumerate(zip(x, y)):
            if a is not None and b is not None:
                self.X[i].append(float(a))
                self.Y[i].append(float(b))
        self.axes[0].cla()
        for xs, ys, fmt in zip(self.X, self.Y, self.fmts):
            self.axes[0].plot(xs, ys, fmt)
        self._config_axes()
        if in_notebook():
            self._show()

    def svg(self) -> str:
        """The current figure as SVG text."""
        buf = io.StringIO()
        self.fig.savefig(buf, format="svg")
        return buf.getvalue()

    def _show(self) -> None:
        from IPython.display import SVG, display

        image = SVG(self.svg())
        metadata = figure_metadata(self.fig, None, "svg")  # a Chinese copy, when captured
        if self._display is None:
            self._display = display(image, display_id=True, metadata=metadata)
        else:
            self._display.update(image, metadata=metadata)


@dataclass
class TrainResult:
    """What a ``train`` run measured, one entry per epoch."""

    devices: list[str]
    batch_size: int
    lr: float
    train_loss: list[float] = field(default_factory=list)
    train_acc: list[float] = field(default_factory=list)
    test_acc: list[float] = field(default_factory=list)
    epoch_seconds: list[float] = field(default_factory=list)
    images_per_second: list[float] = field(default_factory=list)

    @property
    def sec_per_epoch(self) -> float:
        """Mean seconds per epoch, leaving out the first (warm-up) epoch if there are more."""
        times = self.epoch_seconds[1:] or self.epoch_seconds
        return sum(times) / len(times)

    def summary(self) -> str:
        """One line in the reader's language: accuracy, seconds per epoch, images/s, devices."""
        on, on_zh = self.device_names(), self.device_names("、")
        if not self.test_acc:
            return message(en=f"no epochs trained on {on}", zh=f"在 {on_zh} 上没有训练任何一轮")
        ips = sum(self.images_per_second) / len(self.images_per_second)
        acc, sec = self.test_acc[-1], self.sec_per_epoch
        return message(
            en=f"test acc {acc:.3f}, {sec:.1f} sec/epoch, {ips:.0f} images/sec on {on}",
            zh=f"测试准确率 {acc:.3f}，每轮 {sec:.1f} 秒，每秒 {ips:.0f} 张图像，设备：{on_zh}")

    def device_names(self, sep: str = ", ") -> str:
        """``"cpu"`` for one device, ``"2 × cpu"`` for repeated devices, else the list joined
        by ``sep``: ``"cpu(0), cpu(1)"`` (``"、"`` in Chinese text)."""
        if len(self.devices) == 1:
            return self.devices[0]
        if len(set(self.devices)) == 1:
            return f"{len(self.devices)} \u00d7 {self.devices[0]}"
        return sep.join(self.devices)


class TrainProgress:
    """Fill a :class:`TrainResult`; show a live plot in a notebook, lines elsewhere.

    With ``verbose=False`` nothing is shown or drawn (the speed ladder times runs this way).
    """

    def __init__(self, result: TrainResult, num_epochs: int, verbose: bool = True) -> None:
        self.result, self.verbose = result, verbose
        self.animator = (Animator(xlabel=label(en="epoch", zh="轮次"), xlim=[0, num_epochs],
                                  ylim=[0, 1],
                                  legend=[label(en="train loss", zh="训练损失"),
                                          label(en="train acc", zh="训练准确率"),
                                          label(en="test acc", zh="测试准确率")])
                         if verbose and in_notebook() else None)

    def batch(self, epoch: float, loss: float, train_acc: float) -> None:
        """Progress within an epoch (``epoch`` is fractional)."""
        if self.animator is not None:
            self.animator.add(epoch, (loss, train_acc, None))

    def epoch(self, epoch: int, loss: float, train_acc: float, test_acc: float,
              seconds: float, images_per_second: float) -> None:
        """The end of an epoch."""
        r = self.result
        r.train_loss.append(loss)
        r.train_acc.append(train_acc)
        r.test_acc.append(test_acc)
        r.epoch_seconds.append(seconds)
        r.images_per_second.append(images_per_second)
        if self.animator is not None:
            self.animator.add(epoch, (loss, train_acc, test_acc))
        elif self.verbose:
            ips = images_per_second
            print(message(
                en=f"epoch {epoch}: loss {loss:.3f}, train acc {train_acc:.3f}, "
                   f"test acc {test_acc:.3f}, {seconds:.1f} sec, {ips:.0f} images/sec",
                zh=f"第 {epoch} 轮：损失 {loss:.3f}，训练准确率 {train_acc:.3f}，"
                   f"测试准确率 {test_acc:.3f}，{seconds:.1f} 秒，每秒 {ips:.0f} 张图像"),
                flush=True)

    def done(self) -> TrainResult:
        if self.verbose:
            print(self.result.summary())
        return self.result


class Table(str):
    """A table of results: the text table it reads as (it is that ``str``), and in a
    notebook an HTML table (:meth:`_repr_html_`), which fits a page or scrolls in its box
    where the text could not. Made by :func:`text_table`; shown with :func:`show`.

    ``columns`` are the headers and ``cells`` the rows, each formatted as shown; the columns
    ``left`` names (:func:`aligned_left`) are aligned left, the others right.
    """

    columns: tuple[str, ...]
    cells: tuple[tuple[str, ...], ...]
    left: int | Collection[int]

    def __new__(cls, text: str, columns: Sequence[str] = (),
                cells: Sequence[Sequence[str]] = (), left: int | Collection[int] = 0) -> Table:
        table = super().__new__(cls, text)
        table.columns = tuple(columns)
        table.cells = tuple(tuple(row) for row in cells)
        table.left = left
        return table

    def _repr_html_(self) -> str:
        return html_table(self.columns, self.cells, self.left)

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(str(self))


def aligned_left(i: int, left: int | Collection[int]) -> bool:
    """Whether column ``i`` is aligned left: one of the first ``left`` columns (an int), or
    one of the columns ``left`` lists (names and words; numbers go right)."""
    return i < left if isinstance(left, int) else i in left


def is_whole(value: Any) -> bool:
    """Whether ``value`` is a whole number: a Python or NumPy integer, not a bool or a float."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def whole_numbers(minimum: int = 1, **values: Any) -> list[int]:
    """The ``values`` as Python ints, in order, after checking that each is a whole number
    (:func:`is_whole`) of at least ``minimum``; as Python ints, a NumPy integer's products
    cannot overflow. ``s, d = whole_numbers(s=s, d=d)``."""
    for name, value in values.items():
        if not is_whole(value):
            raise TypeError(f"{name} must be a whole number, got {value!r}")
        if value < minimum:
            raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return [int(value) for value in values.values()]


def signed(value: float, spec: str = "+.1f") -> str:
    """``value`` formatted by ``spec`` (e.g. ``"+.1%"``, or ``"~3"`` for three significant
    digits, as :func:`significant`), a negative one with a true minus sign (U+2212) rather
    than a hyphen: ``signed(-0.033, "+.1%")`` is ``"−3.3%"``. A value that rounds to zero
    carries no sign: ``signed(-0.0004, "+.1%")`` is ``"0.0%"``."""
    if spec.startswith("~"):
        return formatted(value, spec)
    return _unsigned_zero(format(value, spec)).replace("-", "\u2212")


def _unsigned_zero(text: str) -> str:
    """A formatted number without its sign when every digit it prints is 0 ("−0.0" → "0.0")."""
    if not any(c in "123456789" for c in text.split("e")[0].split("E")[0]):
        return text.lstrip("+-")
    return text


def significant(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits in fixed point, with thousands separators:
    ``significant(16)`` is ``"16.0"``, ``significant(1234.5)`` is ``"1,235"`` (a large value
    keeps all its integer digits), ``significant(0.012345)`` is ``"0.0123"``."""
    if digits < 1:
        raise ValueError(f"digits is at least 1, not {digits}")
    if value == 0 or not math.isfinite(value):
        return format(value, f".{digits - 1}f")
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = format(value, f",.{decimals}f")
    if decimals and len(text.lstrip("-").replace(",", "").replace(".", "").lstrip("0")) > digits:
        text = format(value, f",.{decimals - 1}f")  # 9.996 rounded up to 10.00: one fewer
    return text


def text_table(columns: Sequence[str], rows: Sequence[Sequence], formats: Sequence[str],
               left: int | Collection[int] = 0) -> Table:
    """The rows as a table, each column with its format; the first ``left`` columns (or
    the columns ``left`` lists) aligned left, the others right. A format is Python's
    (``",.1f"``) or ``"~3"``: three significant digits, never an exponent (16.0, 20.1, 1,230,
    0.0123; :func:`significant`). It is the text table (a
    ``str``: widths count a Chinese character as two columns) and, shown with :func:`show`
    in a notebook, an HTML table.

    Headers and cells made with :func:`message` (:class:`d2l_ext.i18n.Text`) are in the
    reader's language; while the book captures a run, the table in the other language is
    recorded too, as text and as HTML (aligned for its own widths: a table cannot be
    translated word by word).
    """
    heads, cells = _cells(columns, rows, formats, None)
    if any(isinstance(v, Text) for v in [*columns, *(v for row in rows for v in row)]):
        en, zh = (_cells(columns, rows, formats, lang) for lang in ("en", "zh"))
        record(_text_table(*en, left), _text_table(*zh, left))
        record(html_table(*en, left), html_table(*zh, left))
    return Table(_text_table(heads, cells, left), heads, cells, left)


def formatted(value: Any, fmt: str = "") -> str:
    """``value`` as a table cell or a figure prints it: ``format(value, fmt)``, or three
    significant digits for ``fmt="~3"``; an exact zero as "0" in a fixed-point, exponent or
    significant-digit format, a non-zero value that a fixed-point format would print as
    zero as "<0.01" (">−0.01"), another value that rounds to zero without a sign, a true
    minus sign (U+2212) rather than a hyphen, and a string in a column of numbers ("–") as
    it is."""
    if isinstance(value, str) and fmt:
        try:
            return format(value, fmt)
        except ValueError:  # a placeholder ("–") in a column of numbers
            return value
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return format(value, fmt)
    if value == 0 and (fmt.endswith(("e", "E", "f", "F")) or fmt.startswith("~")):
        return "0"  # an exact zero, not 0.00 or 0.0e+00
    if math.isfinite(value) and fmt.endswith(("f", "F")):
        below = _below_last_digit(value, fmt)
        if below:
            return below
    text = _unsigned_zero(significant(value, int(fmt[1:])) if fmt.startswith("~")
                          else format(value, fmt))
    if text.startswith("-"):
        text = "\u2212" + text[1:]  # a true minus sign, as in the prose
    return text


def _below_last_digit(value: float, fmt: str) -> str:
    """For a fixed-point ``fmt`` with n decimals: "<0.01" (n = 2) for a positive value that
    would print as all zeros, ">−0.01" for such a negative one, and "" otherwise."""
    match = re.search(r"\.(\d+)[fF]$", fmt)
    decimals = int(match.group(1)) if match else 6
    if any(c in "123456789" for c in format(value, fmt).split("e")[0]):
        return ""
    step = format(10.0 ** -decimals, f".{decimals}f")
    return f"<{step}" if value > 0 else f">\u2212{step}"


def _cells(columns, rows, formats, lang: str | None) -> tuple[list[str], list[list[str]]]:
    """The headers and the formatted cells, in ``lang`` (None: the reader's language)."""
    def shown(value, fmt: str = "") -> str:
        if isinstance(value, Text) and lang is not None:
            value = value.zh if lang == "zh" else value.en
        return formatted(value, fmt)

    return ([shown(c) for c in columns],
            [[shown(v, f) for v, f in zip(row, formats)] for row in rows])


def _text_table(heads: Sequence[str], cells: Sequence[Sequence[str]],
                left: int | Collection[int]) -> str:
    widths = [max(display_width(heads[i]), *(display_width(r[i]) for r in cells))
              for i in range(len(heads))]

    def line(row) -> str:
        return "  ".join(pad(c, w, aligned_left(i, left))
                         for i, (c, w) in enumerate(zip(row, widths)))

    return "\n".join([line(heads)] + [line(r) for r in cells])


def html_table(columns: Sequence[str], cells: Sequence[Sequence[str]],
               left: int | Collection[int] = 0) -> str:
    """An HTML ``<table class="d2l-table">`` of formatted cells: the columns ``left`` names
    (:func:`aligned_left`) aligned left, the others (numbers) right, also where no style
    sheet of the book applies (Jupyter, Colab)."""
    def row(values: Sequence[str], tag: str) -> str:
        return "<tr>" + "".join(
            f'<{tag} style="text-align: {"left" if aligned_left(i, left) else "right"}">'
            f"{html.escape(str(v), quote=False)}</{tag}>" for i, v in enumerate(values)) + "</tr>"

    return ('<table class="d2l-table">\n<thead>' + row(columns, "th") + "</thead>\n<tbody>\n"
            + "\n".join(row(r, "td") for r in cells) + "\n</tbody>\n</table>")


def show(*objects: Any) -> None:
    """Show each object to the reader: under IPython (a notebook's kernel) as IPython
    displays it (a :class:`Table` as an HTML table, with its text for a reader without
    HTML), elsewhere printed."""
    if _in_ipython():
        from IPython.display import display

        display(*objects)
    else:
        for obj in objects:
            print(obj)


def _in_ipython() -> bool:
    ipython = sys.modules.get("IPython")
    return ipython is not None and ipython.get_ipython() is not None
