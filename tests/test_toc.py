"""tools/pipeline/toc.py: chapters, their section pages, and their numbers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("yaml", reason="the book tools need the full environment")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from pipeline import toc  # noqa: E402
from pipeline.config import BookError  # noqa: E402

WITH_SECTIONS = """
format: jb-book
root: index
chapters:
  - file: chapters/alpha
  - file: chapters/beta  # a long chapter split into pages
    sections:
      - file: chapters/beta-second
      - file: chapters/beta-third
  - file: chapters/gamma
"""


def test_sections_are_pages_of_their_chapter_and_share_its_number(monkeypatch):
    assert toc.read(WITH_SECTIONS) == {"alpha": ["alpha"],
                                       "beta": ["beta", "beta-second", "beta-third"],
                                       "gamma": ["gamma"]}
    monkeypatch.setattr(toc, "read", lambda text=None, real=toc.read: real(WITH_SECTIONS))
    assert toc.chapters() == ["alpha", "beta", "gamma"]
    assert toc.pages() == ["alpha", "beta", "beta-second", "beta-third", "gamma"]
    assert toc.chapter_of("beta-third") == "beta" and toc.chapter_of("beta") == "beta"
    assert toc.chapter_numbers() == {"alpha": 1, "beta": 2, "beta-second": 2,
                                     "beta-third": 2, "gamma": 3}
    with pytest.raises(BookError, match="delta is not in _toc.yml"):
        toc.chapter_of("delta")


def test_parts_are_read_and_a_page_listed_twice_is_refused():
    parts = ("format: jb-book\nroot: index\nparts:\n  - caption: One\n    chapters:\n"
             "      - file: chapters/a\n  - caption: Two\n    chapters:\n"
             "      - file: chapters/b\n        sections:\n          - file: chapters/c\n")
    assert toc.read(parts) == {"a": ["a"], "b": ["b", "c"]}
    with pytest.raises(BookError, match="lists a more than once"):
        toc.read("chapters:\n  - file: chapters/a\n  - file: chapters/a\n")


def test_the_books_toc_lists_every_chapter_source_once():
    from pipeline.sources import chapter_names

    assert sorted(toc.pages()) == chapter_names()
    assert toc.chapters()[0] == "async-computation"


def test_a_chapter_named_to_execute_or_validate_is_all_of_its_pages(monkeypatch):
    from pipeline import execute

    monkeypatch.setattr(toc, "read", lambda text=None, real=toc.read: real(WITH_SECTIONS))
    pages = ["alpha", "beta", "beta-second", "beta-third", "gamma"]
    monkeypatch.setattr(execute, "chapter_names", lambda: sorted(pages))
    assert execute._chapters(["beta"]) == ["beta", "beta-second", "beta-third"]
    assert execute._chapters(["beta-third", "beta"]) == ["beta-third", "beta", "beta-second"]
    assert execute._chapters(["gamma", "beta-second"]) == ["gamma", "beta-second"]
    assert execute._chapters([]) == pages  # every page, each once
    with pytest.raises(BookError, match="no chapter named delta"):
        execute._chapters(["delta"])
    # --page: the pages named alone, a chapter's name its main page; none named: every page
    assert execute._chapters(["beta", "gamma", "beta"], pages_only=True) == ["beta", "gamma"]
    assert execute._chapters([], pages_only=True) == pages
    with pytest.raises(BookError, match="no chapter named delta"):
        execute._chapters(["delta"], pages_only=True)
    assert toc.with_section_pages(["beta", "alpha", "beta-second"]) == \
        ["beta", "beta-second", "beta-third", "alpha"]


def test_a_chapters_run_time_adds_up_its_pages_on_one_machine(tmp_path):
    """The landing page's {run-times} of a chapter with section pages: the pages' times
    added up, on the one machine they all ran on; a page without a full-size run, or pages
    that ran on different machines, leave the chapter's time 'not recorded'."""
    import nbformat

    sys.path.insert(0, str(ROOT / "tools" / "sphinx_ext"))
    import book_runtimes

    (tmp_path / "_toc.yml").write_text(WITH_SECTIONS, encoding="utf-8")

    def notebook(page, seconds, cpu="Test CPU", size="full"):
        nb = nbformat.v4.new_notebook()
        cell = nbformat.v4.new_code_cell("x = 1")
        cell.metadata["execution"] = {
            "iopub.status.busy": "2026-01-01T10:00:00+00:00",
            "iopub.status.idle": f"2026-01-01T10:{seconds // 60:02d}:{seconds % 60:02d}+00:00"}
        nb.cells.append(cell)
        nb.metadata["d2l_ext"] = {"run": dict(gpus=0, cpu=cpu, size=size, date="2026-01-01")}
        for framework in ("torch", "mxnet"):
            path = tmp_path / "notebooks" / "en" / framework / f"{page}.ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, path)

    notebook("beta", 600)
    notebook("beta-second", 420)
    notebook("beta-third", 300)
    assert book_runtimes.framework_time(tmp_path, "en", "beta", "torch") == \
        ("about 22 minutes", "CPU only (Test CPU)")
    notebook("beta-third", 300, cpu="Other CPU")
    assert book_runtimes.framework_time(tmp_path, "en", "beta", "torch") == ("not recorded", None)
    notebook("beta-third", 300, size="smoke")
    assert book_runtimes.framework_time(tmp_path, "en", "beta", "torch") == ("not recorded", None)
    notebook("alpha", 59)
    assert book_runtimes.framework_time(tmp_path, "en", "alpha", "torch")[0] == "under a minute"


def test_one_machine_for_the_whole_book_is_named_once_before_the_list(tmp_path):
    """Every chapter on one machine: {book-machine} names it, and each {run-times} gives
    only the times; a chapter elsewhere brings each chapter's machine back."""
    import nbformat

    sys.path.insert(0, str(ROOT / "tools" / "sphinx_ext"))
    import book_runtimes

    (tmp_path / "_toc.yml").write_text(WITH_SECTIONS, encoding="utf-8")

    def notebook(page, cpu="Intel Xeon"):
        nb = nbformat.v4.new_notebook()
        cell = nbformat.v4.new_code_cell("x = 1")
        cell.metadata["execution"] = {"iopub.status.busy": "2026-01-01T10:00:00+00:00",
                                      "iopub.status.idle": "2026-01-01T10:01:10+00:00"}
        nb.cells.append(cell)
        nb.metadata["d2l_ext"] = {"run": dict(gpus=0, cpu=cpu, size="full", date="2026-01-01")}
        for lang in ("en", "zh"):
            for framework in ("torch", "mxnet"):
                path = tmp_path / "notebooks" / lang / framework / f"{page}.ipynb"
                path.parent.mkdir(parents=True, exist_ok=True)
                nbformat.write(nb, path)

    for page in ("alpha", "beta", "beta-second", "beta-third"):
        notebook(page)
    # gamma not executed yet: no machine for the book, and gamma's own role says why
    assert book_runtimes.book_machine(tmp_path, "en") is None
    assert book_runtimes.run_times(tmp_path, "en", "alpha") == \
        "PyTorch about 1 minute, MXNet about 1 minute, on CPU only (Intel Xeon)"
    notebook("gamma")
    assert book_runtimes.book_machine_sentence(tmp_path, "en") == \
        "All of them ran on CPU only (Intel Xeon)."
    assert book_runtimes.book_machine_sentence(tmp_path, "zh") == \
        "以下用时都在只有 CPU 的机器（Intel Xeon）上测得。"
    assert book_runtimes.run_times(tmp_path, "en", "alpha") == \
        "PyTorch about 1 minute, MXNet about 1 minute"
    # 3 × 70 s
    assert book_runtimes.run_times(tmp_path, "zh", "beta") == "PyTorch 约 4 分钟，MXNet 约 4 分钟"
    notebook("gamma", cpu="AMD EPYC")
    assert book_runtimes.book_machine_sentence(tmp_path, "en") == \
        "Each chapter names the machine its notebooks ran on."
    assert book_runtimes.run_times(tmp_path, "en", "alpha") == \
        "PyTorch about 1 minute, MXNet about 1 minute, on CPU only (Intel Xeon)"
