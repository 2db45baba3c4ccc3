"""Figure numbers per framework tab.

A page shows some figures under one framework's tab only: a static figure in a framework
block (``fw fw-torch`` container, ``fig-x-torch``), a figure that a framework's code cell
draws (a ``tag_torch`` cell), or the other framework's copy of a figure that a shared cell
draws differently in each run (``fig-x`` and ``fig-x-mxnet``, tools/pipeline/pages.py);
the other figures show under both tabs. The reader of one tab sees that framework's
figures and the shared ones, so each tab numbers those in turn, per chapter, over the
chapter's pages (Figure 3.1, 3.2, ...: no gap where the other tab has a figure).

Sphinx numbers every figure of a chapter in reading order (``toc_fignumbers``); here the
numbers are made again per framework (:func:`numbers_per_framework`). A figure keeps, as
the number Sphinx writes, its own framework's number, PyTorch's where it is shared (the
default tab: the page reads right without JavaScript); the number in its caption is a
``<span class="fig-number" data-torch="3.2" data-mxnet="3.1">``, which book.js sets to the
selected tab's number. A ``{numref}`` to a figure shows the number that the reader of the
framework block it stands in sees (the number of that framework's copy of the figure,
:func:`reader_numbers`); outside a framework block it switches with the tab.
tools/pipeline/plain.py numbers the notebooks' captions alike (``figure_numbers``).
"""

from __future__ import annotations

import html
import types
from collections import defaultdict

from docutils import nodes
from sphinx import addnodes

FRAMEWORKS = ("torch", "mxnet")  # the first: the default tab
#: The suffixes that make a framework copy of a figure (plain.py's TWIN_SUFFIXES).
TWIN_SUFFIXES = ("-torch", "-mxnet")

Number = tuple[int, ...]


def twin_key(figure_id: str) -> str:
    """The figure that ``figure_id`` is a framework copy of."""
    for suffix in TWIN_SUFFIXES:
        if figure_id.endswith(suffix):
            return figure_id[:-len(suffix)]
    return figure_id


def framework_of(node: nodes.Node) -> str | None:
    """The framework whose tab shows ``node`` (a framework block or a framework's code cell
    holds it), or ``None``: both tabs."""
    while node is not None:
        classes = node.get("classes", []) if isinstance(node, nodes.Element) else []
        for fw in FRAMEWORKS:
            if f"tag_{fw}" in classes or f"fw-{fw}" in classes:
                return fw
        node = node.parent
    return None


def numbers_per_framework(figures: dict) -> dict:
    """Each figure's number under each tab that shows it. ``figures``: key -> (Sphinx's
    number, its framework or ``None``), Sphinx's numbers running over a chapter's pages in
    reading order (``(3, 1)``, ``(3, 2)``, ...). Returns key -> {framework: number}: per
    chapter and framework, its figures and the shared ones counted in turn."""
    chapters = defaultdict(list)
    for key, (number, framework) in figures.items():
        chapters[number[:-1]].append((number[-1], key, framework))
    numbers: dict = {}
    for prefix, found in chapters.items():
        counts = dict.fromkeys(FRAMEWORKS, 0)
        for _, key, framework in sorted(found, key=lambda item: item[0]):
            numbers[key] = {}
            for fw in [framework] if framework else FRAMEWORKS:
                counts[fw] += 1
                numbers[key][fw] = (*prefix, counts[fw])
    return numbers


def shown_number(numbers: dict[str, Number]) -> Number:
    """The number a figure's label shows without JavaScript: the default tab's, else its
    own framework's."""
    return numbers.get(FRAMEWORKS[0]) or next(iter(numbers.values()))


def reader_numbers(page: dict[str, dict[str, Number]], figure_id: str) -> dict[str, Number]:
    """The numbers a ``{numref}`` to ``figure_id`` shows under each tab: the figure's own,
    and for a tab that does not show it, the number of that tab's copy of the figure on the
    same page (:func:`twin_key`)."""
    found = dict(page[figure_id])
    for other, numbers in page.items():
        if twin_key(other) == twin_key(figure_id):
            for fw, number in numbers.items():
                found.setdefault(fw, number)
    return found


def dotted(number: Number) -> str:
    return ".".join(map(str, number))


def number_html(numbers: dict[str, Number], shown: Number) -> str:
    """The number ``shown`` as a span that carries each tab's number (book.js)."""
    data = "".join(f' data-{fw}="{dotted(numbers[fw])}"' for fw in FRAMEWORKS if fw in numbers)
    return f'<span class="fig-number"{data}>{html.escape(dotted(shown))}</span>'


# ---- Sphinx: each figure's framework (read), the numbers (env), captions and numrefs ----

def _record_frameworks(app, doctree) -> None:
    """The framework of each figure of the page just read (``doctree-read``)."""
    env = app.env
    if not hasattr(env, "book_figure_frameworks"):
        env.book_figure_frameworks = {}
    env.book_figure_frameworks[env.docname] = {
        figure["ids"][0]: framework_of(figure.parent)
        for figure in doctree.findall(nodes.figure) if figure["ids"]}


def _purge(app, env, docname) -> None:
    getattr(env, "book_figure_frameworks", {}).pop(docname, None)


def _merge(app, env, docnames, other) -> None:
    if not hasattr(env, "book_figure_frameworks"):
        env.book_figure_frameworks = {}
    for docname in docnames:
        if docname in getattr(other, "book_figure_frameworks", {}):
            env.book_figure_frameworks[docname] = other.book_figure_frameworks[docname]


def _number_per_framework(app, env) -> list[str]:
    """After Sphinx has numbered the figures (``env-get-updated``, TocTreeCollector): the
    numbers per framework (``env.book_figure_numbers``: page -> figure id -> {framework:
    number}); Sphinx's own number becomes :func:`shown_number`."""
    frameworks = getattr(env, "book_figure_frameworks", {})
    figures = {(docname, figure_id): (number, frameworks.get(docname, {}).get(figure_id))
               for docname, kinds in env.toc_fignumbers.items()
               for figure_id, number in kinds.get("figure", {}).items()}
    env.book_figure_numbers = {}
    for (docname, figure_id), numbers in numbers_per_framework(figures).items():
        env.toc_fignumbers[docname]["figure"][figure_id] = shown_number(numbers)
        env.book_figure_numbers.setdefault(docname, {})[figure_id] = numbers
    return []


def _target(reference: nodes.Element, docname: str, pages: dict) -> tuple[str, str] | None:
    """(page, figure id) that a resolved ``{numref}`` points at, if a numbered figure."""
    if reference.get("refid"):
        found = [(docname, reference["refid"])]
    else:
        anchor = str(reference.get("refuri", "")).partition("#")[2]
        found = [(page, anchor) for page, figures in pages.items() if anchor in figures]
    found = [(page, figure) for page, figure in found if figure in pages.get(page, {})]
    return found[0] if len(found) == 1 else None


def _numrefs_per_framework(app, doctree, docname) -> None:
    """Each ``{numref}`` to a figure shows the number its reader sees (``doctree-resolved``):
    in a framework block, that framework's; elsewhere the default tab's, switching with
    the tab (:func:`number_html`)."""
    pages = getattr(app.env, "book_figure_numbers", {})
    for reference in list(doctree.findall(addnodes.number_reference)):
        target = _target(reference, docname, pages)
        if target is None:
            continue
        page, figure_id = target
        numbers = reader_numbers(pages[page], figure_id)
        static = dotted(shown_number(pages[page][figure_id]))
        framework = framework_of(reference)
        if framework in numbers:
            numbers = {framework: numbers[framework]}
        shown = numbers.get(framework) or shown_number(numbers)
        for text in list(reference.findall(nodes.Text)):
            if static not in text:
                continue
            before, _, after = str(text).partition(static)
            parts = [nodes.Text(before), nodes.raw("", number_html(numbers, shown),
                                                   format="html"), nodes.Text(after)]
            text.parent.replace(text, [p for p in parts if p.astext()])
            break


class FigureNumbersMixin:
    """A translator whose figure captions carry each tab's number (:func:`number_html`)."""

    def add_fignumber(self, node) -> None:
        start = len(self.body)
        super().add_fignumber(node)
        pages = getattr(self.builder.env, "book_figure_numbers", {})
        figures = pages.get(self.builder.current_docname, {})
        numbers = figures.get(node["ids"][0]) if node.get("ids") else None
        if not numbers:
            return
        static = dotted(shown_number(numbers))
        for i in range(start, len(self.body) - 1):
            if self.body[i] == '<span class="caption-number">' and static in self.body[i + 1]:
                self.body[i + 1] = self.body[i + 1].replace(
                    static, number_html(numbers, shown_number(numbers)), 1)
                return


def _caption_translator(app) -> None:
    """Mix :class:`FigureNumbersMixin` into the HTML translator (``builder-inited``, after
    the theme has set its own, as pydata-sphinx-theme does)."""
    if app.builder.format != "html":
        return
    base = app.registry.translators.get(app.builder.name)
    if base is None:
        base = getattr(app.builder, "default_translator_class", None)
    if base is None:
        return
    translator = types.new_class("BookFiguresTranslator", (FigureNumbersMixin, base), {})
    app.set_translator(app.builder.name, translator, override=True)


def setup(app):
    app.connect("doctree-read", _record_frameworks)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    app.connect("env-get-updated", _number_per_framework, priority=900)
    app.connect("doctree-resolved", _numrefs_per_framework)
    app.connect("builder-inited", _caption_translator, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
