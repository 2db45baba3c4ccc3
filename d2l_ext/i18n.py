"""The reader's language: sentences, table headers and figure labels in English or Chinese.

Each notebook of the book sets ``D2L_LANG`` (``en`` or ``zh``) in its first cell, and the
code answers in that language::

    print(d2l.message(en=f"{n} steps", zh=f"{n} 步"))        # a sentence for the reader
    ax.set_xlabel(d2l.label(en="time (ms)", zh="时间（毫秒）"))  # a label in a figure

A figure label is Chinese only where matplotlib has a Chinese font (:func:`cjk_font`; a bare
Colab has none): elsewhere it stays English rather than drawing empty boxes.

**One run, two editions.** The book executes each notebook once (in English) and fills both
editions from that run. With ``D2L_CAPTURE`` naming a folder, every :func:`message` records
its English and Chinese texts there, with the number of the cell that printed it, and every
figure shown carries, in its output's metadata, a rendering with the Chinese of every
:func:`label` on it. The book's pipeline then writes the Chinese notebook from the same
outputs, each recorded English text replaced by its Chinese and each figure by its Chinese
rendering (``tools/pipeline/execute.py``).
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import os
import unicodedata
from collections.abc import Iterator
from pathlib import Path

LANGUAGES = ("en", "zh")
#: Fonts with Chinese glyphs, the first one matplotlib knows is used.
CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "WenQuanYi Micro Hei",
             "WenQuanYi Zen Hei", "Microsoft YaHei", "SimHei", "PingFang SC",
             "Hiragino Sans GB", "Heiti SC", "Arial Unicode MS")
#: The English of every label so far, with its Chinese (figures are translated through it).
LABELS: dict[str, str] = {}


def reader_language() -> str:
    """The language of the book edition a notebook belongs to: ``en`` or ``zh``.

    Each notebook's first cell sets ``D2L_LANG``; outside the book's notebooks it is ``en``.
    """
    lang = os.environ.get("D2L_LANG", "en")
    return lang if lang in LANGUAGES else "en"


class Text(str):
    """A string in the reader's language that also keeps its English and its Chinese
    (``text.en``, ``text.zh``), so that a table made of such strings can be written in
    either language (:func:`d2l_ext.utils.text_table`)."""

    en: str
    zh: str

    def __new__(cls, en: str, zh: str, lang: str | None = None) -> Text:
        text = super().__new__(cls, zh if (lang or reader_language()) == "zh" else en)
        text.en, text.zh = en, zh
        return text

    def __reduce__(self):
        return (Text, (self.en, self.zh, "zh" if str(self) == self.zh != self.en else "en"))


def message(en: str, zh: str) -> Text:
    """``en`` or ``zh``, whichever is the reader's language (:func:`reader_language`).

    Sentences printed for the reader, the exercises' answers and table headers go through
    it, so that one code cell serves both editions of the book. (While the book captures a
    run, the pair is recorded: see the module's docstring.)
    """
    record(en, zh)
    return Text(en, zh)


def label(en: str, zh: str) -> str:
    """A text drawn in a figure (axis label, title, legend entry, tick label, annotation):
    ``zh`` for a Chinese reader where matplotlib has a Chinese font (:func:`cjk_font`),
    else ``en``. The pair is remembered, so that a figure drawn in English can be redrawn
    in Chinese (:func:`translated`)."""
    LABELS[en] = zh
    if reader_language() == "zh" and capture_dir() is None and cjk_font() is not None:
        from matplotlib import rcParams

        rcParams.update(cjk_rc())
        return zh
    return en


# ---------------------------------------------------------------- widths for tables
def display_width(text: str) -> int:
    """Columns that ``text`` takes in a monospaced font: two for a wide (CJK) character."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def pad(text: str, width: int, left: bool) -> str:
    """``text`` padded with spaces to ``width`` columns (:func:`display_width`)."""
    space = " " * max(0, width - display_width(text))
    return text + space if left else space + text


# ---------------------------------------------------------------- fonts
@functools.lru_cache(maxsize=1)
def cjk_font() -> str | None:
    """The name of a font with Chinese glyphs that matplotlib finds, or ``None``.

    On Debian and Ubuntu ``apt-get install fonts-wqy-microhei`` (5 MB) provides one.
    """
    try:
        from matplotlib import font_manager
    except ImportError:
        return None
    known = {f.name for f in font_manager.fontManager.ttflist}
    return next((name for name in CJK_FONTS if name in known), None)


def cjk_rc() -> dict:
    """matplotlib settings that draw Chinese with :func:`cjk_font` (first in the sans-serif
    list; DejaVu Sans and the others after it for what it lacks); empty without one."""
    font = cjk_font()
    if font is None:
        return {}
    from matplotlib import rcParams

    return {"font.sans-serif": [font, *[f for f in rcParams["font.sans-serif"] if f != font]],
            "axes.unicode_minus": False}  # CJK fonts often lack the minus sign


# ---------------------------------------------------------------- capture (the book's runs)
def capture_dir() -> Path | None:
    """The folder where a run of the book records its texts (``D2L_CAPTURE``), or None."""
    path = os.environ.get("D2L_CAPTURE")
    return Path(path) if path else None


def cell_key(source: str) -> str:
    """The key under which the texts of a notebook cell with this source are recorded."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]


#: The key of the notebook cell that is running (set before each cell while capturing).
_running: str | None = None


def _before_cell(info) -> None:
    global _running
    _running = cell_key(info.raw_cell)


def record(en: str, zh: str) -> None:
    """While the book captures a run: note that the running cell shows ``en``, which the
    Chinese edition shows as ``zh``."""
    folder = capture_dir()
    if folder is None or en == zh:
        return
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "texts.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"cell": _running, "en": en, "zh": zh}, ensure_ascii=False) + "\n")


def recorded(folder: Path) -> dict[str | None, list[tuple[str, str]]]:
    """The pairs that a captured run recorded, per cell: ``{cell_key(source): [(en, zh),
    ...]}``; under ``None`` those recorded outside a cell (a script the cell ran, the cell
    that imported this module)."""
    pairs: dict[str | None, list[tuple[str, str]]] = {}
    path = Path(folder) / "texts.jsonl"
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            pairs.setdefault(entry["cell"], []).append((entry["en"], entry["zh"]))
    return pairs


@contextlib.contextmanager
def translated(fig) -> Iterator[bool]:
    """Within the block, every text of ``fig`` that is the English of a :func:`label` shows
    its Chinese; afterwards the English is back. Yields whether anything was translated."""
    from matplotlib.ticker import FuncFormatter

    # tick labels are made again by the axis's formatter at every draw (a bar chart's
    # category names too): translate what the formatter says
    formatters = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            original = axis.get_major_formatter()
            if any(t.get_text() in LABELS for t in axis.get_ticklabels()) or _names_labels(
                    original):
                formatters.append((axis, original))
                axis.set_major_formatter(FuncFormatter(
                    lambda x, pos, f=original: LABELS.get(f(x, pos), f(x, pos))))
    changed = []
    for text in fig.findobj(lambda artist: hasattr(artist, "get_text")
                            and hasattr(artist, "set_text")):
        english = text.get_text()
        if english in LABELS:
            changed.append((text, english))
            text.set_text(LABELS[english])
    try:
        yield bool(changed or formatters)
    finally:
        for text, english in changed:
            text.set_text(english)
        for axis, original in formatters:
            axis.set_major_formatter(original)


def _names_labels(formatter) -> bool:
    """Whether a categorical axis's formatter names a category that is a :func:`label`."""
    names = getattr(formatter, "_units", None) or {}
    return any(str(name) in LABELS for name in names)


def chinese_rendering(fig, fmt: str = "png") -> str | None:
    """``fig`` drawn with its labels in Chinese, as an IPython display would send it
    (base64 for PNG, text for SVG); None without a Chinese font or anything to translate."""
    if cjk_font() is None:
        return None
    import io

    import matplotlib

    with translated(fig) as any_label, matplotlib.rc_context(cjk_rc()):
        if not any_label:
            return None
        buffer = io.BytesIO()
        fig.savefig(buffer, format=fmt, bbox_inches="tight")
    data = buffer.getvalue()
    return base64.b64encode(data).decode("ascii") if fmt == "png" else data.decode("utf-8")


def figure_metadata(fig, metadata: dict | None, fmt: str = "png") -> dict | None:
    """``metadata`` of a figure's output, with its Chinese rendering added while the book
    captures a run (``{"d2l_ext": {"zh": {mime type: data}}}``)."""
    if capture_dir() is None:
        return metadata
    rendering = chinese_rendering(fig, fmt)
    if rendering is None:
        return metadata
    mime = "image/png" if fmt == "png" else "image/svg+xml"
    return {**(metadata or {}), "d2l_ext": {"zh": {mime: rendering}}}


def install_capture() -> bool:
    """While the book captures a run in a Jupyter kernel: note which cell runs (for
    :func:`record`), and make every figure that the inline backend shows carry its Chinese
    rendering. Returns whether it was installed."""
    if capture_dir() is None:
        return False
    try:
        from IPython import get_ipython
        from matplotlib_inline import backend_inline
    except ImportError:
        return False
    shell = get_ipython()
    if shell is not None and _before_cell not in shell.events.callbacks["pre_run_cell"]:
        shell.events.register("pre_run_cell", _before_cell)
    original = backend_inline._fetch_figure_metadata
    if getattr(original, "d2l_ext", False):
        return True

    def fetch(fig):
        return figure_metadata(fig, original(fig))

    fetch.d2l_ext = True
    backend_inline._fetch_figure_metadata = fetch
    return True


install_capture()
