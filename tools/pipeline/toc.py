"""The book's reading order, from ``_toc.yml``: its chapters, and the pages of each.

A chapter is a top-level entry under ``chapters:``; a long chapter may list section pages
under ``sections:``, each a source of its own (``chapters/LANG/NAME.md``) with notebooks of
its own. A chapter's number (Figure 3.2, the sidebar's 3.) is its place among the chapters;
its section pages share it.
"""

from __future__ import annotations

from pathlib import PurePosixPath

import yaml

from pipeline import config
from pipeline.config import BookError


def _page(entry: dict) -> str | None:
    file = str(entry.get("file", ""))
    return PurePosixPath(file).name if file.startswith("chapters/") else None


def read(text: str | None = None) -> dict[str, list[str]]:
    """Each chapter (in the book's order) with its pages in reading order, itself first.
    ``text``: a ``_toc.yml``'s text (default: the book's)."""
    if text is None:
        text = (config.ROOT / "_toc.yml").read_text(encoding="utf-8")
    toc = yaml.safe_load(text) or {}
    found: dict[str, list[str]] = {}
    listed: list[str] = []

    def sections(entries: list[dict]) -> list[str]:
        pages = []
        for entry in entries:
            if _page(entry):
                pages.append(_page(entry))
            pages += sections(entry.get("sections", []))
        return pages

    def walk(entries: list[dict]) -> None:
        for entry in entries:
            name = _page(entry)
            if name:
                found[name] = [name, *sections(entry.get("sections", []))]
                listed.extend(found[name])
            else:
                walk(entry.get("sections", []))
            walk(entry.get("chapters", []))
            for part in entry.get("parts", []):
                walk(part.get("chapters", []))

    walk(toc.get("chapters", []) + [{"parts": toc.get("parts", [])}])
    twice = sorted({page for page in listed if listed.count(page) > 1})
    if twice:
        raise BookError(f"_toc.yml lists {', '.join(twice)} more than once")
    return found


def chapters() -> list[str]:
    """The chapters in the book's order."""
    return list(read())


def pages() -> list[str]:
    """Every page in reading order: each chapter, then its section pages."""
    return [page for chapter in read().values() for page in chapter]


def with_section_pages(names: list[str]) -> list[str]:
    """``names`` with each chapter's section pages right after it (a chapter named is all of
    its pages), each page once, in the order given."""
    chapters = read()
    return list(dict.fromkeys(page for name in names for page in chapters.get(name, [name])))


def chapter_of(page: str) -> str:
    """The chapter that ``page`` belongs to (a chapter's main page belongs to itself)."""
    for chapter, its_pages in read().items():
        if page in its_pages:
            return chapter
    raise BookError(f"{page} is not in _toc.yml: list it under `chapters:` (a chapter) or "
                    "under a chapter's `sections:` (a section page)")


def chapter_numbers() -> dict[str, int]:
    """Each page's chapter number: the chapter's place in the reading order, shared by its
    section pages."""
    return {page: number for number, its_pages in enumerate(read().values(), 1)
            for page in its_pages}
