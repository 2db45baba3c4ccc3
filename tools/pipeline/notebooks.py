"""Stage 2: a chapter -> one unexecuted notebook per framework.

The notebook of one framework keeps the shared cells, its own cells and its own
framework blocks (without their fences), and starts with a cell that installs d2l_ext
where it is missing (Colab, SageMaker Studio Lab); the PyTorch one asks Colab for a GPU
(:data:`COLAB_GPU`). Once executed, it also starts with a cell that says its run time
(:func:`run_time_cell`), and its prose is plain markdown (``plain.py``). Its
``code_hash`` tells whether a committed, executed notebook still matches its source
(:func:`stale`).
"""

from __future__ import annotations

import copy
import hashlib
import re
from datetime import datetime
from pathlib import Path

import nbformat

from d2l_ext import datasheets, gpu_runs
from pipeline import config, runinfo, sources
from pipeline.config import FRAMEWORKS, BookError, repository, shown
from pipeline.sources import PLACEHOLDER, Chapter, chapters, check_values, prose_for

#: The tag of a cell that only formats, plots or prints: its code is collapsed on the page
#: and in the notebooks (a click shows it), its output shown.
HIDE_INPUT = "hide-input"


def install_cell(framework: str, lang: str) -> nbformat.NotebookNode:
    """The first cell: installs d2l_ext where it is missing (Colab, Studio Lab), and sets
    the notebook's language, in which ``d2l.message`` answers (the exercises' checks)."""
    slug, branch = repository()
    extra = "torch" if framework == "torch" else "mxnet"
    comments = {
        "en": ["# Installs what Colab / SageMaker Studio Lab lack; nothing where d2l_ext is there.",
               "# MXNet 1.9.1 needs Python 3.11 and numpy < 1.24 (numpy 1.23.5).",
               "# the language in which the exercises' checks answer"],
        "zh": ["# 安装 Colab / SageMaker Studio Lab 缺少的包；已装有 d2l_ext 时什么也不做。",
               "# MXNet 1.9.1 需要 Python 3.11 和 numpy < 1.24（即 numpy 1.23.5）。",
               "# 练习的检查单元格用这种语言给出反馈"],
    }[lang]
    lines = comments[:1] + (comments[1:2] if framework == "mxnet" else [])
    lines += ["import importlib.util",
              "import os",
              "",
              f"os.environ[\"D2L_LANG\"] = {lang!r}  {comments[2]}",
              "if importlib.util.find_spec('d2l_ext') is None:",
              f"    !pip install -q \"d2l-ext[{extra}] @ git+https://github.com/{slug}@{branch}\""]
    cell = nbformat.v4.new_code_cell("\n".join(lines))
    cell.id = "install"
    cell.metadata["d2l_ext"] = {"role": "install"}
    return cell


#: What Colab stores in a notebook saved with a GPU runtime (Runtime > Change runtime type >
#: T4 GPU), so that it opens on one: ``accelerator`` at the top and the GPU's type under
#: ``colab``, as notebooks saved by Colab hold them (its 2022-23 key ``"gpuClass":
#: "standard"`` it no longer writes).
#: ``toc_visible`` opens Colab's table of contents, for a long chapter.
COLAB_GPU = {"accelerator": "GPU",
             "colab": {"provenance": [], "gpuType": "T4", "toc_visible": True}}


def split(chapter: Chapter, framework: str) -> nbformat.NotebookNode:
    """The unexecuted notebook of one framework (the PyTorch one asks Colab for a GPU)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    if framework == "torch":
        nb.metadata.update(copy.deepcopy(COLAB_GPU))
    title_done = False
    for index, cell in enumerate(chapter.cells):
        if cell.framework not in (None, framework):
            continue
        if cell.kind == "markdown":
            text = prose_for(cell.source, framework)
            if index and chapter.cells[index - 1].framework not in (None, framework):
                text = sources.without_caption(text)  # the other framework's figure: not drawn here
            if text:
                new = nbformat.v4.new_markdown_cell(text)
                new.id = cell_id(index)
                new.metadata["d2l_ext"] = {"source_index": index}
                nb.cells.append(new)
            if not title_done and re.search(r"^# ", cell.source, re.M):
                nb.cells.append(install_cell(framework, chapter.lang))
                title_done = True
        else:
            new = nbformat.v4.new_code_cell(cell.source)
            new.id = cell_id(index)
            new.metadata["d2l_ext"] = {"source_index": index}
            if cell.tags:
                new.metadata["tags"] = [t for t in cell.tags if t not in FRAMEWORKS]
            if HIDE_INPUT in cell.tags:  # presentation only: collapsed, a click shows it
                new.metadata["jupyter"] = {"source_hidden": True}  # JupyterLab, Studio Lab
                new.metadata["cellView"] = "form"  # Colab
            nb.cells.append(new)
    if not title_done:
        raise BookError(f"{chapter.path}: the chapter needs a '# Title' line")
    nb.metadata["d2l_ext"] = {"source": f"chapters/{chapter.lang}/{chapter.name}.md",
                              "framework": framework, "code_hash": code_hash(nb)}
    return nb


#: The first cell of every notebook: its run time on a CPU and on a free T4 GPU.
RUN_TIME = {"en": "**Run time.** On a CPU: {cpu}. On {gpu}: {t4}.",
            "zh": "**运行时间**。在 CPU 上{cpu}。在 {gpu}{t4}。"}
#: In zh a time follows "在 CPU 上" directly ("在 CPU 上约 1 分钟：这是……"); anything else
#: after a colon ("在 CPU 上：未记录……").
ZH_NOT_A_TIME = "："
FREE_GPU = {"torch": {"en": "a free Colab T4 GPU (this notebook asks Colab for a GPU runtime)",
                      "zh": "Colab 的免费 T4 GPU 上（本笔记本会向 Colab 申请 GPU 运行时）"},
            "mxnet": {"en": "a free SageMaker Studio Lab GPU (a T4)",
                      "zh": "SageMaker Studio Lab 的免费 T4 GPU 上"}}
MEASURED = {"en": "{duration}, measured in {which}, from the first cell to the last, without "
                  "the kernel's start or the installation; machine: {machine}, {date}",
            "zh": "{duration}：这是{which}从第一个单元格跑到最后一个单元格的时间，"
                  "不含启动笔记本和安装依赖的时间；{machine}，日期为 {date}"}
#: The machine of a measured run in zh: "那次运行的机器只有 CPU（…）" / "那次运行用的是 1 块 …".
ZH_MACHINE = {"cpu": "那次运行的机器只有 CPU（{cpu}）", "gpu": "那次运行用的是 {machine}"}
THIS_RUN = {"en": "the run whose outputs this notebook shows", "zh": "生成本笔记本输出的那次运行"}
GPU_RECORD = {"en": "the book's GPU run", "zh": "本书在 GPU 上的那次运行"}
NOT_RECORDED = {"en": {"gpu": "not recorded (this notebook's outputs come from a GPU run)",
                       "smoke": "not recorded (this notebook's outputs come from a reduced "
                                "smoke-size run)",
                       "none": "not recorded (the run kept no cell times)"},
                "zh": {"gpu": "未记录（本笔记本的输出来自 GPU 上的运行）",
                       "smoke": "未记录（本笔记本的输出来自缩小规模的冒烟测试运行）",
                       "none": "未记录（这次运行没有保存各单元格的时间）"}}
NOT_MEASURED = {"en": "not measured yet", "zh": "尚未实测"}
#: Why: no full-size GPU run with its time (this notebook's or the chapter's GPU record).
NOT_ON_T4 = {"en": "{not_measured} (the book has not run on a T4)",
             "zh": "{not_measured}，本书还没有在 T4 上运行过"}
#: ... or there is a T4 run, but without a full-size time.
T4_UNTIMED = {"en": "{not_measured} (the book's T4 run kept no full-size run time)",
              "zh": "{not_measured}，本书在 T4 上的那次运行没有留下完整规模的运行时间"}
#: What a full-size run on another GPU tells about a T4: its time and the datasheets' ratios.
OTHER_GPU = {"en": "{not_measured}; the book's run on {machine} ({date}) took {duration}; "
                   "{comparison}",
             "zh": "{not_measured}；本书在 {machine} 上的运行（{date}）用了{duration}；"
                   "{comparison}"}
T4_RATIOS = {"en": "a T4 has {memory} that GPU's memory bandwidth and {fp32} its float32 "
                   "rate (NVIDIA's datasheets, d2l_ext/datasheets.py), so {expect}",
             "zh": "按 NVIDIA 的数据手册（d2l_ext/datasheets.py），T4 的显存带宽约为该 GPU 的 "
                   "{memory}，float32 算力约为其 {fp32}，因此{expect}"}
EXPECT = {"en": {"slower": "expect it to take longer there",
                 "other": "these figures alone do not tell its time there"},
          "zh": {"slower": "预计在 T4 上用时更长", "other": "仅凭这两个数字推断不出 T4 上的用时"}}
NO_SHEET = {"en": "the book's datasheet table has no figures for that GPU to compare a T4 with",
            "zh": "本书的数据手册表中没有该 GPU 的数字，无法与 T4 比较"}


def run_time_cell(cells: list[nbformat.NotebookNode], run: dict, framework: str, lang: str,
                  chapter: str) -> nbformat.NotebookNode:
    """The notebook's first cell: how long it runs on a CPU, as the run whose outputs it holds
    measured it (its cells' own timestamps), and on a free T4 GPU, from a full-size run on a
    T4 (this one, or the chapter's GPU record) where one exists. Otherwise "not recorded" /
    "not measured yet", never a guess: with the time of a full-size run on another GPU and
    how a T4's datasheet figures compare with that GPU's (:func:`on_another_gpu`) where
    there is one, else with the reason (the book has not run on a T4)."""
    seconds = run_seconds(cells, run)
    full = run.get("size") == "full" and seconds is not None

    def measured(duration: float, which: str, on: dict) -> str:
        machine = runinfo.machine_name(on, lang)
        if lang == "zh":
            cpu = runinfo.cpu_name(on.get("cpu") or "", lang)
            machine = (ZH_MACHINE["gpu"].format(machine=machine) if on.get("gpus")
                       else ZH_MACHINE["cpu"].format(cpu=cpu))
        return MEASURED[lang].format(duration=_duration(duration, lang), which=which,
                                     machine=machine, date=on["date"])

    def not_a_time(text: str) -> str:
        return ZH_NOT_A_TIME + text if lang == "zh" else text

    if full and not run.get("gpus"):
        cpu = measured(seconds, THIS_RUN[lang], run)
    else:
        reason = ("gpu" if run.get("gpus") else "smoke" if run.get("size") == "smoke"
                  else "none")
        cpu = not_a_time(NOT_RECORDED[lang][reason])
    record = gpu_runs.load(chapter) if framework == "torch" else None
    timed = record is not None and record.run.get("seconds") and \
        record.run.get("size") == "full" and record.run.get("gpus")
    if full and run.get("gpus") and "T4" in str(run.get("gpu", "")):
        t4 = measured(seconds, THIS_RUN[lang], run)
    elif timed and "T4" in str(record.run.get("gpu", "")):
        t4 = measured(record.run["seconds"], GPU_RECORD[lang], record.run)
    elif full and run.get("gpus"):
        t4 = not_a_time(on_another_gpu(seconds, run, lang))
    elif timed:
        t4 = not_a_time(on_another_gpu(record.run["seconds"], record.run, lang))
    else:
        on_t4 = "T4" in str(run.get("gpu", "")) or (
            record is not None and "T4" in str(record.run.get("gpu", "")))
        t4 = not_a_time((T4_UNTIMED if on_t4 else NOT_ON_T4)[lang].format(
            not_measured=NOT_MEASURED[lang]))
    cell = nbformat.v4.new_markdown_cell(
        RUN_TIME[lang].format(cpu=cpu, gpu=FREE_GPU[framework][lang], t4=t4))
    cell.id = "run-time"
    cell.metadata["d2l_ext"] = {"role": "run-time"}
    return cell


def on_another_gpu(seconds: float, run: dict, lang: str) -> str:
    """The T4 line where only a full-size run on another GPU has a time: not measured on a
    T4, that run's time, and how a T4's datasheet memory bandwidth and float32 rate compare
    with that GPU's (no T4 time is made up from them: a notebook's time is not one rate)."""
    theirs, t4 = datasheets.for_gpu(str(run.get("gpu", ""))), datasheets.SHEETS["T4"]
    if theirs is None:
        comparison = NO_SHEET[lang]
    else:
        memory, fp32 = t4.memory / theirs.memory, t4.fp32 / theirs.fp32
        comparison = T4_RATIOS[lang].format(
            memory=_share(memory, lang), fp32=_share(fp32, lang),
            expect=EXPECT[lang]["slower" if max(memory, fp32) < 0.8 else "other"])
    return OTHER_GPU[lang].format(not_measured=NOT_MEASURED[lang],
                                  machine=runinfo.machine_name(run, lang), date=run["date"],
                                  duration=_duration(seconds, lang), comparison=comparison)


def _share(ratio: float, lang: str) -> str:
    """A T4's figure as a share of another GPU's: ``about 1/10 of`` (``1/10``), ``about 1.2
    times`` (``1.2 倍``)."""
    if ratio < 0.8:
        return f"1/{round(1 / ratio)}" if lang == "zh" else f"about 1/{round(1 / ratio)} of"
    return f"{ratio:.1f} 倍" if lang == "zh" else f"about {ratio:.1f} times"


def merged_streams(outputs: list) -> list:
    """A cell's outputs with each run of adjacent stream outputs of the same name (stdout,
    stderr) joined into one: a loop that prints a line per round shows one block of lines,
    not a box per line (nbclient keeps a stream output per message the kernel sent). Streams
    that a figure or another output stands between stay apart, in their order. nbval
    compares a cell's streams joined (its ``coalesce_streams``), so it sees no change."""
    merged: list = []
    for output in outputs:
        last = merged[-1] if merged else None
        if (last is not None and output.get("output_type") == "stream"
                and last.get("output_type") == "stream"
                and last.get("name") == output.get("name")):
            merged[-1] = copy.deepcopy(last)
            merged[-1]["text"] = last["text"] + output["text"]
        else:
            merged.append(output)
    return merged


def run_seconds(cells: list[nbformat.NotebookNode], run: dict) -> float | None:
    """The seconds from the first executed cell's start to the last one's end, from the
    timestamps nbclient keeps in each cell (``metadata.execution``); else the duration the
    run recorded (``run["seconds"]``); else ``None``."""
    starts, ends = [], []
    for cell in cells:
        stamps = cell.get("metadata", {}).get("execution", {})
        if "iopub.status.busy" in stamps and "iopub.status.idle" in stamps:
            starts.append(datetime.fromisoformat(stamps["iopub.status.busy"]))
            ends.append(datetime.fromisoformat(stamps["iopub.status.idle"]))
    if starts:
        return (max(ends) - min(starts)).total_seconds()
    return run.get("seconds")


def _duration(seconds: float, lang: str) -> str:
    """``about 22 minutes`` (``约 22 分钟``), as a run-time note says it."""
    if seconds < 60:
        return "不到 1 分钟" if lang == "zh" else "under a minute"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"约 {minutes} 分钟" if lang == "zh" else \
            f"about {minutes} minute{'s' if minutes > 1 else ''}"
    hours, minutes = divmod(minutes, 60)
    return f"约 {hours} 小时 {minutes} 分钟" if lang == "zh" else f"about {hours} h {minutes} min"


def cell_id(source_index: int) -> str:
    """A cell's id, from its position in the chapter source: the same in every run, so that
    executing a chapter again changes only what the run changed (nbformat's default ids are
    random, and every run would rewrite them all)."""
    return f"cell-{source_index:03d}"


def code_hash(nb: nbformat.NotebookNode) -> str:
    """A hash of everything in a split notebook that affects its execution or text."""
    parts = [f"{c.cell_type}\n{c.source}" for c in nb.cells]
    return hashlib.sha256("\n\x00".join(parts).encode()).hexdigest()[:16]


def code_version(nb: nbformat.NotebookNode) -> str:
    """A hash of a split notebook's code alone (comments and docstrings left out): the same
    in every language, and unchanged by a change of prose. A GPU record keeps it
    (``d2l_ext.gpu_runs``)."""
    from pipeline.sources import code_only

    code = [code_only(c.source) for c in nb.cells
            if c.cell_type == "code" and c.metadata.get("d2l_ext", {}).get("role") != "install"]
    return hashlib.sha256("\n\x00".join(code).encode()).hexdigest()[:16]


def placeholders(nb: nbformat.NotebookNode) -> dict[str, tuple[str, str]]:
    """``{{expression:format}}`` -> (expression, format), for every value the prose cites."""
    found = {}
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for m in PLACEHOLDER.finditer(cell.source):
                found[m.group(0)] = (m.group(1), m.group(2) or "")
    return found


def title_index(nb: nbformat.NotebookNode) -> int:
    """The index of the cell with the ``# Title``."""
    return next(i for i, c in enumerate(nb.cells)
                if c.cell_type == "markdown" and re.search(r"^# ", c.source, re.M))


def notebook_path(chapter: Chapter, framework: str) -> Path:
    """Where the executed notebook of a chapter and framework is committed."""
    return config.NOTEBOOKS / chapter.lang / framework / f"{chapter.name}.ipynb"


def stale() -> list[str]:
    """Notebooks that are missing or were executed from an older chapter source."""
    problems = []
    for chapter in chapters():
        problems += check_values(chapter) + sources.check_figures(chapter)
        for framework in FRAMEWORKS:
            path = notebook_path(chapter, framework)
            want = split(chapter, framework).metadata["d2l_ext"]["code_hash"]
            if not path.exists():
                problems.append(f"{shown(path)} is missing")
            elif nbformat.read(path, 4).metadata.get("d2l_ext", {}).get("code_hash") != want:
                problems.append(f"{shown(path)} is older than {shown(chapter.path)}")
    return problems
