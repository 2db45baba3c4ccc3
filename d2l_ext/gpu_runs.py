"""The book's own GPU runs, kept as data.

A GPU runner is lent to the book rarely and briefly, and a chapter's code keeps changing after
it ran. So when a chapter runs on a GPU, its key figures are kept in
``d2l_ext/data/gpu_runs/<chapter>.json`` with the machine, the framework version, the date
and the version of the code that measured them, and every later run shows them beside its
own figures (:func:`table`): re-executing a chapter on a CPU never erases the book's GPU
evidence, and a figure measured by an earlier version of the chapter's code says so.

A chapter's code names its key figures once, with the texts that label them::

    d2l.gpu_runs.table("async-computation", device, [
        (d2l.message(en="issue one operation (µs)", zh="发出一个操作（微秒）"), t1 * 1e6, ".2f"),
        ...
    ])

While the book executes a chapter (``D2L_CAPTURE`` set) on a CUDA GPU, the figures are also
written to the capture folder, and the book's pipeline stores them as the chapter's record
(``tools/pipeline/execute.py``). The pipeline also tells the kernel the version of the code
being run (``D2L_CODE_VERSION``), so that the table can say whether the record came from it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from d2l_ext.i18n import Text, capture_dir, message
from d2l_ext.utils import formatted, show, text_table

#: Where the records live, one JSON file per chapter.
RECORDS = Path(__file__).resolve().parent / "data" / "gpu_runs"
#: The file a capturing run writes its figures to (read by the book's pipeline).
CAPTURED = "gpu_figures.json"


@dataclass(frozen=True)
class Figure:
    """One key figure: its label in both languages, its value and its format."""

    en: str
    zh: str
    value: float | int | str
    format: str = ""

    def shown(self) -> str:
        return formatted(self.value, self.format)


@dataclass(frozen=True)
class GpuRun:
    """A chapter's key figures from the book's last GPU run of it."""

    chapter: str
    run: dict  # d2l_ext.machine.describe() of the run: machine, framework, date, ...
    commit: str  # the repository's commit when it ran ("-dirty": with changes not committed)
    code_version: str  # a hash of the chapter's code cells (tools/pipeline/notebooks.py)
    figures: tuple[Figure, ...]
    source: str = ""  # where the figures were read from, when not recorded by the run itself

    def value(self, en: str) -> float | int | str:
        """The value of the figure labelled ``en`` (its English label)."""
        for figure in self.figures:
            if figure.en == en:
                return figure.value
        raise KeyError(f"the GPU run of {self.chapter} has no figure {en!r}; it has: "
                       + "; ".join(f.en for f in self.figures))

    def from_this_code(self) -> bool | None:
        """Whether the running code is the code that measured the record (``None``: unknown,
        outside the book's pipeline)."""
        running = os.environ.get("D2L_CODE_VERSION")
        return None if not running else running == self.code_version

    def describe(self) -> Text:
        """One sentence: which machine, framework, date and code version."""
        run, same = self.run, self.from_this_code()
        gpu_en = (f"{run['gpus']} \u00d7 {run['gpu']}" if run.get("gpus")
                  else run.get("machine", "?"))
        gpu_zh = f"{run['gpus']} 块 {run['gpu']}" if run.get("gpus") else gpu_en
        code_en = {True: "the code on this page",
                   False: "an earlier version of this chapter's code, so a figure may differ "
                          "from what this page's code measures",
                   None: "the chapter's code"}[same]
        code_zh = {True: "即本页的代码",
                   False: "这是本章代码的较早版本，其中的数字可能与本页代码测得的不同",
                   None: "本章的代码"}[same]
        return message(
            en=f"The book's GPU run: {gpu_en}, {run['framework']}, {run['date']}, commit "
               f"{self.commit} ({code_en}).",
            zh=f"本书在 GPU 上的运行：{gpu_zh}，{run['framework']}，{run['date']}，"
               f"提交 {self.commit}（{code_zh}）。")


def path(chapter: str) -> Path:
    return RECORDS / f"{chapter}.json"


def load(chapter: str) -> GpuRun | None:
    """The record of ``chapter``'s last GPU run, or ``None`` if it never ran on a GPU."""
    file = path(chapter)
    if not file.exists():
        return None
    data = json.loads(file.read_text(encoding="utf-8"))
    return GpuRun(chapter=data["chapter"], run=data["run"], commit=data["commit"],
                  code_version=data["code_version"],
                  figures=tuple(Figure(**f) for f in data["figures"]),
                  source=data.get("source", ""))


def to_json(record: GpuRun) -> str:
    """The record as its file holds it."""
    data = {"chapter": record.chapter, "run": record.run, "commit": record.commit,
            "code_version": record.code_version,
            "figures": [vars(f) for f in record.figures]}
    if record.source:
        data["source"] = record.source
    return json.dumps(data, ensure_ascii=False, indent=1) + "\n"


def _figures(figures: Sequence[tuple]) -> list[Figure]:
    kept = []
    for item in figures:
        if len(item) not in (2, 3):
            raise ValueError(f"a figure is (label, value) or (label, value, format), got {item!r}")
        text, value, fmt = (*item, "") if len(item) == 2 else item
        if not isinstance(text, Text):
            raise TypeError(f"label a figure with d2l.message(en=..., zh=...), not {text!r}")
        if fmt.startswith("~"):  # a wrong format fails here, not in a later run's table
            formatted(float(value), fmt)
        else:
            format(value, fmt)
        kept.append(Figure(text.en, text.zh, value, fmt))
    labels = [f.en for f in kept]
    if len(set(labels)) != len(labels):
        raise ValueError("two figures have the same label: "
                         + ", ".join(sorted({x for x in labels if labels.count(x) > 1})))
    return kept


def table(chapter: str, on_gpu: bool | str, figures: Sequence[tuple]) -> GpuRun | None:
    """Print this run's key ``figures`` beside those of the book's GPU run of ``chapter``.

    ``figures``: ``(label, value)`` or ``(label, value, format)``, each label made with
    :func:`d2l_ext.i18n.message`. ``on_gpu``: whether this run's device is a CUDA GPU, or the
    type of this run's device (``"cpu"``, ``"cuda"``, ``"mps"``, ...: a device other than a
    CPU or a CUDA GPU is named as it is). While the book captures a run on a CUDA GPU, the
    figures are handed to the pipeline, which keeps them as the chapter's new record. Returns
    the record shown (``None`` if there is none yet).
    """
    kind = (on_gpu if isinstance(on_gpu, str) else "cuda" if on_gpu else "cpu").lower()
    on_gpu = kind == "cuda"
    mine = _figures(figures)
    folder = capture_dir()
    if on_gpu and folder is not None:
        captured = {"chapter": chapter, "figures": [vars(f) for f in mine]}
        (folder / CAPTURED).write_text(json.dumps(captured, ensure_ascii=False),
                                       encoding="utf-8")
    record = load(chapter)
    shown = {"cuda": "GPU", "cpu": "CPU"}.get(kind, kind.upper())
    here = message(en=f"this run ({shown})", zh=f"本次运行（{shown}）")
    columns = [message(en="figure", zh="指标"), here]
    rows = [[Text(f.en, f.zh), f.shown()] for f in mine]
    if record is not None:
        date = record.run["date"]
        columns.append(message(en=f"the book's GPU run, {date}",
                               zh=f"本书在 GPU 上的运行（{date}）"))
        theirs = {f.en: f for f in record.figures}
        for row, f in zip(rows, mine):
            row.append(theirs[f.en].shown() if f.en in theirs else "\u2013")
        rows += [[Text(f.en, f.zh), "\u2013", f.shown()] for f in record.figures
                 if f.en not in {m.en for m in mine}]
    show(text_table(columns, rows, [""] * len(columns), left=1))
    print(record.describe() if record is not None else message(
        en="The book keeps no GPU run of this chapter yet.",
        zh="本书还没有保存这一章在 GPU 上的运行结果。"))
    return record
