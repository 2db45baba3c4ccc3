"""The book's reading order and its landing page: no chapter relies on a later one, and the
landing page (chapters/LANG/index.md) lists every chapter in the order of ``_toc.yml``, with
the run times that the committed notebooks recorded."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the book tools need the full environment")
yaml = pytest.importorskip("yaml", reason="the book tools need the full environment")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from pipeline import config, runinfo, sources, toc  # noqa: E402
from pipeline.config import FRAMEWORK_NAMES, FRAMEWORKS  # noqa: E402
from pipeline.notebooks import _duration, run_seconds  # noqa: E402

LANGS = ("en", "zh")


def timed_notebook(root: Path, lang: str, framework: str, run: dict, seconds: int) -> None:
    """Write ``root``'s notebook ``x`` of ``lang`` and ``framework``: one cell that ran for
    ``seconds`` (its execution timestamps), with ``run`` as its run metadata."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("x = 1")
    cell.metadata["execution"] = {"iopub.status.busy": "2026-01-01T10:00:00+00:00",
                                  "iopub.status.idle": f"2026-01-01T10:{seconds // 60:02d}:"
                                                       f"{seconds % 60:02d}+00:00"}
    nb.cells.append(cell)
    nb.metadata["d2l_ext"] = {"run": run}
    path = root / "notebooks" / lang / framework / "x.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)

#: What each chapter takes from earlier ones, as its own text says (with a {ref} to them):
#: the order of _toc.yml must put every chapter named here before the one that relies on it.
RELIES_ON = {
    "gpu-basics": {"async-computation": "asynchronous execution, a barrier before the clock"},
    "multi-gpu-concise": {"async-computation": "an idle GPU waiting for its host",
                          "gpu-basics": "data parallelism from its primitives"},
    "tuning-tips": {"async-computation": "the timing rules and the cost model",
                    "gpu-basics": "the roofline",
                    "multi-gpu-concise": "the ResNet-18 training it speeds up"},
    "host-device-sync": {"async-computation": "queued work and the cost model",
                         "tuning-tips": "torch.compile and the speed ladder"},
    "communication": {"multi-gpu-concise": "data-parallel training, torchrun"},
    "memory": {"multi-gpu-concise": "data-parallel training",
               "tuning-tips": "autocast, CUDA graphs",
               "host-device-sync": "cudaFree synchronises the device",
               "communication": "processes started and communication counted as there"},
}

#: A chapter's line on the landing page: its link, then its run time (the {run-times} role).
CHAPTER_LINE = re.compile(r"^\d+\. \{doc\}`chapters/([\w-]+)`", re.M)


def toc_order() -> list[str]:
    """The chapters in the order of ``_toc.yml`` (without their section pages)."""
    return toc.chapters()


def labels_of(name: str) -> set[str]:
    """The labels (``(sec-...)=``) that chapter ``name`` defines, on all its pages."""
    return set(re.findall(r"^\(([\w-]+)\)=$", chapter_text(name), re.M))


def chapter_text(name: str) -> str:
    """The English sources of chapter ``name``'s pages, its section pages' too."""
    return "\n".join((config.CHAPTERS / "en" / f"{page}.md").read_text(encoding="utf-8")
                     for page in toc.read()[name])


def landing_items(lang: str) -> dict[str, str]:
    """Chapter name -> its item (one line of text) in the landing page's list of chapters."""
    text = (config.CHAPTERS / lang / "index.md").read_text(encoding="utf-8")
    starts = list(CHAPTER_LINE.finditer(text))
    ends = [m.start() for m in starts[1:]] + [len(text)]
    return {m.group(1): " ".join(text[m.start():end].split()) for m, end in zip(starts, ends)}


def recorded_seconds(name: str, framework: str) -> tuple[float, dict] | None:
    """How long the committed notebook of ``name`` ran, first cell to last, and its run's
    record; None unless it is a full-size run on a CPU (the landing page's times are)."""
    nb = nbformat.read(config.NOTEBOOKS / "en" / framework / f"{name}.ipynb", as_version=4)
    run = nb.metadata.get("d2l_ext", {}).get("run", {})
    seconds = run_seconds(nb.cells, run)
    if seconds is None or run.get("size") != "full" or run.get("gpus"):
        return None
    return seconds, run


def test_toc_lists_every_page_once():
    assert sorted(toc.pages()) == sources.chapter_names()
    assert len(set(toc.pages())) == len(toc.pages())


@pytest.mark.parametrize("name", sorted(RELIES_ON))
def test_no_chapter_relies_on_a_later_one(name):
    """Every chapter that ``name`` builds on comes before it, and ``name`` links it."""
    order = toc_order()
    text = chapter_text(name)
    for earlier, what in RELIES_ON[name].items():
        assert order.index(earlier) < order.index(name), \
            f"{name} relies on {earlier} ({what}), which _toc.yml puts after it"
        linked = {label for label in labels_of(earlier) if f"`{label}`" in text}
        assert linked, f"{name} no longer links {earlier}: is RELIES_ON still true?"


@pytest.mark.parametrize("lang", LANGS)
def test_the_landing_page_lists_every_chapter_in_the_book_s_order(lang):
    assert list(landing_items(lang)) == toc_order(), \
        f"{lang}/index.md: list the chapters in the order of _toc.yml"


@pytest.mark.parametrize("lang", LANGS)
def test_the_landing_page_gives_the_run_times_the_notebooks_recorded(lang):
    """Each chapter's run time comes from the committed notebooks (the {run-times} role),
    never typed; the role says what each notebook's cells measured, and where."""
    sys.path.insert(0, str(ROOT / "tools" / "sphinx_ext"))
    import book_runtimes

    checked = 0
    for name, item in landing_items(lang).items():
        assert f"{{run-times}}`{name}`" in item, f"{lang}/index.md: cite {name}'s run time"
        assert "{book-machine}`all`" in (ROOT / "chapters" / lang / "index.md").read_text(
            encoding="utf-8"), f"{lang}/index.md: name the machine once, before the list"
        said = book_runtimes.run_times(ROOT, lang, name)
        for framework in FRAMEWORKS:
            assert FRAMEWORK_NAMES[framework] in said
            records = [recorded_seconds(page, framework) for page in toc.read()[name]]
            if None in records:  # a GPU or smoke run: no CPU time to compare with
                continue
            if len({run["cpu"] for _, run in records}) > 1:  # pages run on different machines
                assert f"{FRAMEWORK_NAMES[framework]} {book_runtimes.NOT_RECORDED[lang]}" \
                    in said, said
                continue
            seconds = sum(seconds for seconds, _ in records)  # the chapter's pages together
            cpu = runinfo.cpu_name(records[0][1]["cpu"], lang)
            named = (said if book_runtimes.book_machine(ROOT, lang) is None
                     else book_runtimes.book_machine_sentence(ROOT, lang))  # once, above
            assert _duration(seconds, lang) in said and cpu in named, (said, named)
            checked += 1
    assert checked, "no notebook recorded a full-size CPU run to check the times against"


def test_the_run_times_role_names_each_machine_and_refuses_a_missing_notebook(tmp_path):
    sys.path.insert(0, str(ROOT / "tools" / "sphinx_ext"))
    import book_runtimes

    def notebook(framework, run, seconds):
        timed_notebook(tmp_path, "en", framework, run, seconds)

    cpu = dict(gpus=0, cpu="Test CPU", size="full", date="2026-01-01")
    notebook("torch", cpu, 1320)
    notebook("mxnet", cpu, 30)
    assert book_runtimes.run_times(tmp_path, "en", "x") == \
        "PyTorch about 22 minutes, MXNet under a minute, on CPU only (Test CPU)"
    notebook("mxnet", dict(cpu, size="smoke"), 30)
    assert book_runtimes.run_times(tmp_path, "en", "x") == \
        "PyTorch about 22 minutes, on CPU only (Test CPU); MXNet not recorded"
    with pytest.raises(FileNotFoundError, match="book.py execute"):
        book_runtimes.run_times(tmp_path, "en", "missing")


def test_run_times_name_each_machine_once_in_each_language(tmp_path):
    """The landing page's run times ({run-times}): one machine for both frameworks is named
    once; a machine per framework goes in brackets after each time (zh without the run
    note's brackets in brackets)."""
    sys.path.insert(0, str(ROOT / "tools" / "sphinx_ext"))
    import book_runtimes

    def notebook(lang, framework, run, seconds):
        timed_notebook(tmp_path, lang, framework, run, seconds)

    intel = dict(gpus=0, cpu="Intel Xeon", size="full", date="2026-01-01")
    amd = dict(intel, cpu="AMD EPYC")
    for lang in LANGS:
        notebook(lang, "torch", intel, 70)
        notebook(lang, "mxnet", intel, 30)
    assert book_runtimes.run_times(tmp_path, "zh", "x") == \
        "PyTorch 约 1 分钟，MXNet 不到 1 分钟，都在只有 CPU 的机器（Intel Xeon）上"
    assert book_runtimes.run_times(tmp_path, "en", "x") == \
        "PyTorch about 1 minute, MXNet under a minute, on CPU only (Intel Xeon)"
    for lang in LANGS:
        notebook(lang, "mxnet", amd, 30)
    assert book_runtimes.run_times(tmp_path, "zh", "x") == \
        "PyTorch 约 1 分钟（仅 CPU，Intel Xeon），MXNet 不到 1 分钟（仅 CPU，AMD EPYC）"
    assert book_runtimes.run_times(tmp_path, "en", "x") == \
        "PyTorch about 1 minute, on CPU only (Intel Xeon); MXNet under a minute, on CPU only " \
        "(AMD EPYC)"
    h100 = dict(intel, gpus=1, gpu="H100")
    for lang in LANGS:
        notebook(lang, "torch", h100, 70)
        notebook(lang, "mxnet", h100, 30)
    assert book_runtimes.run_times(tmp_path, "zh", "x") == \
        "PyTorch 约 1 分钟，MXNet 不到 1 分钟，都在 1 块 H100 上"
