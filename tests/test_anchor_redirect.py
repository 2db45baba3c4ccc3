"""The map that sends a link to a moved section to the page that has it now.

Chapters split into a main page and section pages: an old link such as
``chapters/tuning-tips.html#sec-tuning-tips-amp`` names a section that lives on
``tuning-tips-switches.html`` now. Each edition's pages load the map of every label to its
page (``tools/pipeline/site.py`` ``anchor_pages``), and ``book.js`` follows it. Here: the map
against the chapter sources; tests/test_site.py follows old links in a browser.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("yaml", reason="the book tools need the full environment")
pytest.importorskip("nbformat", reason="the book tools need the full environment")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from pipeline import config, site, toc  # noqa: E402

LANGS = tuple(config.LANGUAGES)
#: A MyST label line, read here independently of the pipeline's parser.
LABEL = re.compile(r"^[ \t]*\(([^()\s]+)\)=[ \t]*$", re.M)


def _labels(lang: str, page: str) -> list[str]:
    return LABEL.findall((config.CHAPTERS / lang / f"{page}.md").read_text(encoding="utf-8"))


@pytest.mark.parametrize("lang", LANGS)
def test_every_label_maps_to_the_page_whose_source_defines_it(lang):
    pages = site.anchor_pages(lang)
    defined = {label: f"chapters/{page}" for page in toc.pages() for label in _labels(lang, page)}
    assert defined and {k: pages.get(k) for k in defined} == defined
    # the rest of the map: figure names, each on a page of the book
    assert set(pages.values()) <= {f"chapters/{page}" for page in toc.pages()}


@pytest.mark.parametrize("lang", LANGS)
def test_every_label_of_a_section_page_is_in_the_map(lang):
    sections = [page for chapter, its_pages in toc.read().items() for page in its_pages
                if page != chapter]
    assert {"tuning-tips-switches", "memory-oom", "host-device-sync-measuring"} <= set(sections)
    pages = site.anchor_pages(lang)
    for page in sections:
        labels = _labels(lang, page)
        assert labels, f"{page} has no label"
        assert all(pages[label] == f"chapters/{page}" for label in labels), page


def test_both_editions_map_the_same_labels_to_the_same_pages():
    assert site.anchor_pages("en") == site.anchor_pages("zh")


def test_the_old_links_of_split_chapters_are_in_the_map():
    pages = site.anchor_pages("en")
    assert pages["sec-tuning-tips-amp"] == "chapters/tuning-tips-switches"
    assert pages["sec-memory-oom"] == "chapters/memory-oom"
