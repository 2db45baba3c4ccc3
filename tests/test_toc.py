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
