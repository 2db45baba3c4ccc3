"""Section ids shared by both editions.

Sphinx makes a section's id from its title, so an English heading gets a readable id
(``#barriers-and-blockers``) and a Chinese one a counter (``#id3``). Both editions have
the same headings in the same order, so the reference edition (English) records each page's
section ids, and the other edition gives its section at the same position the same id: a
link to ``#barriers-and-blockers`` works in both editions, and the language switch keeps it.
Pages whose headings differ in number or level stop the build, naming page and heading.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from docutils import nodes
from sphinx.errors import ExtensionError
from sphinx.transforms import SphinxTransform


@dataclass(frozen=True)
class Heading:
    """One section of a page: its depth (0 for the page title), title and id."""

    level: int
    title: str
    id: str


class HeadingMismatch(ExtensionError):
    """The two editions of a page do not have the same headings."""

    category = "The two editions' headings differ"


def headings(document: nodes.document) -> tuple[list[nodes.section], list[Heading]]:
    """The sections of ``document`` in reading order, and their headings."""
    sections = list(document.findall(nodes.section))
    found = []
    for section in sections:
        level = sum(1 for parent in _ancestors(section) if isinstance(parent, nodes.section))
        title = section[0].astext() if section.children and isinstance(
            section[0], nodes.title) else ""
        found.append(Heading(level, title, section["ids"][0] if section["ids"] else ""))
    return sections, found


def _ancestors(node: nodes.Node):
    while node.parent is not None:
        node = node.parent
        yield node


def shared_ids(page: str, ours: list[Heading], reference: list[Heading], lang: str,
               reference_lang: str) -> list[str]:
    """The reference edition's ids for our headings, position by position; raise
    :class:`HeadingMismatch` naming the page and the first heading that differs."""
    for position, (mine, theirs) in enumerate(zip(ours, reference), start=1):
        if mine.level != theirs.level:
            raise HeadingMismatch(
                f"{page}: heading {position} is {mine.title!r} at level {mine.level + 1} in the "
                f"{lang} edition, but {theirs.title!r} at level {theirs.level + 1} in the "
                f"{reference_lang} edition; both editions need the same headings in the same "
                "order (they share their section ids)")
    if len(ours) != len(reference):
        longer, name = (ours, lang) if len(ours) > len(reference) else (reference,
                                                                         reference_lang)
        extra = longer[min(len(ours), len(reference))]
        raise HeadingMismatch(
            f"{page}: the {lang} edition has {len(ours)} headings, the {reference_lang} "
            f"edition {len(reference)}; the first without a counterpart is {extra.title!r} "
            f"in the {name} edition; both editions need the same headings in the same order")
    return [heading.id for heading in reference]


def rename_sections(document: nodes.document, sections: list[nodes.section],
                    new_ids: list[str]) -> None:
    """Give each of ``sections`` its new first id, keeping names and references pointing at
    it (a section's other ids, such as an explicit label, stay)."""
    explicit = {document.nameids[name] for name, is_explicit in document.nametypes.items()
                if is_explicit and name in document.nameids}
    old_ids = [section["ids"][0] for section in sections]
    for old in old_ids:
        if old not in explicit:
            document.ids.pop(old, None)
    for section, new in zip(sections, new_ids):
        if new in document.ids and document.ids[new] is not section:
            raise HeadingMismatch(
                f"{document.get('source', '?')}: section {section[0].astext()!r} cannot take "
                f"the id {new!r}, which another element of the page already has")
        old = section["ids"][0]
        kept = [old] if old in explicit and old != new else []  # a label stays reachable
        rest = kept + [other for other in section["ids"][1:] if other != new]
        section["ids"] = [new, *rest]
        document.ids[new] = section
    moved = {old: new for old, new in zip(old_ids, new_ids) if old != new and old not in explicit}
    for name, target in list(document.nameids.items()):
        if target in moved:
            document.nameids[name] = moved[target]
    for node in document.findall(nodes.Element):
        if node.get("refid") in moved:
            node["refid"] = moved[node["refid"]]


class SharedSectionIds(SphinxTransform):
    """Record the reference edition's section ids, or give the other edition's sections them.

    It runs after docutils has given every section its id and before ``doctree-read``
    (priority 880), where Sphinx builds the page's table of contents from those ids.
    """

    default_priority = 870

    def apply(self, **kwargs) -> None:
        config, docname = self.config, self.env.docname
        sections, found = headings(self.document)
        if config.book_section_ids_write:
            if not hasattr(self.env, "book_headings"):
                self.env.book_headings = {}
            self.env.book_headings[docname] = [asdict(h) for h in found]
        elif config.book_section_ids_read:
            reference = _reference(config.book_section_ids_read)
            if docname not in reference:
                raise HeadingMismatch(f"{docname}: no page of that name in the "
                                      f"{config.book_other_lang} edition")
            ids = shared_ids(docname, found, [Heading(**h) for h in reference[docname]],
                             config.book_lang, config.book_other_lang)
            rename_sections(self.document, sections, ids)


_REFERENCES: dict[tuple[str, float], dict] = {}


def _reference(path: str) -> dict:
    """The headings the reference edition recorded, per page (read once per build)."""
    file = Path(path)
    if not file.is_file():
        raise HeadingMismatch(f"{path} is missing: build the reference edition first "
                              "(tools/book.py build builds it before the other)")
    key = (path, file.stat().st_mtime)
    if key not in _REFERENCES:
        _REFERENCES[key] = json.loads(file.read_text(encoding="utf-8"))
    return _REFERENCES[key]


def _purge(app, env, docname: str) -> None:
    getattr(env, "book_headings", {}).pop(docname, None)


def _merge(app, env, docnames, other) -> None:
    if not hasattr(env, "book_headings"):
        env.book_headings = {}
    env.book_headings.update({d: h for d, h in getattr(other, "book_headings", {}).items()
                              if d in docnames})


def _write(app, env) -> None:
    path = app.config.book_section_ids_write
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(getattr(env, "book_headings", {}), indent=1,
                                         ensure_ascii=False, sort_keys=True), encoding="utf-8")


def setup(app) -> None:
    """Register the transform and its settings (book_ext's setup calls this)."""
    app.add_config_value("book_section_ids_write", "", "env")
    app.add_config_value("book_section_ids_read", "", "env")
    app.add_transform(SharedSectionIds)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    app.connect("env-updated", _write)
