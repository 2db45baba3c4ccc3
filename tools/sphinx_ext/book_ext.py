"""Sphinx extension of the book: framework tabs, language switch, notebook links, search.

Its parts: ``book_sections`` (section ids shared by both editions), ``book_meta`` (meta
description, OpenGraph, hreflang, the footer's "report a problem" link) and ``book_ui`` (the
themes' interface strings in the edition's language); ``book_figures`` numbers each
framework tab's figures per chapter, without gaps.

It tells each page, in ``<meta name="book-...">`` tags, where the same page is in
the other language and where its notebooks are; ``book.js`` builds the interface.
It also makes the Chinese edition's search find in-text terms (:class:`ChineseSearch`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import book_figures
import book_meta
import book_runtimes
import book_sections
import book_ui
from docutils import nodes
from sphinx import search
from sphinx.search.zh import SearchChinese

FRAMEWORKS = ("torch", "mxnet")
HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")

# The browser splits a query the same way the index was split: runs of Chinese characters
# into overlapping pairs, everything else into words.
_SPLIT_QUERY = r"""
function splitQuery(query) {
  const terms = [];
  for (const term of query.split(/[^\p{Letter}\p{Number}_]+/u)) {
    const han = term.match(/\p{Script=Han}+/gu);
    if (!han) {
      if (term) terms.push(term);
      continue;
    }
    term.split(/\p{Script=Han}+/u).filter((rest) => rest).forEach((rest) => terms.push(rest));
    for (const run of han) {
      if (run.length === 1) terms.push(run);
      for (let i = 2; i <= run.length; i++) terms.push(run.slice(i - 2, i));
    }
  }
  return terms;
}
"""


class ChineseSearch(SearchChinese):
    """Chinese search that finds any in-text term of two or more characters.

    jieba (Sphinx's Chinese word segmenter) cuts 学习率 into 学习 + 率, so a search for
    学习率 finds nothing. Here every run of Chinese characters is also indexed as its
    overlapping character pairs (学习, 习率), and the browser splits the query the same
    way: a page matches when it holds every pair of the query.
    """

    js_splitter_code = _SPLIT_QUERY

    def split(self, input: str) -> list[str]:
        words = super().split(input)
        for run in HAN.findall(input):
            words += [run[i - 2:i] for i in range(2, len(run) + 1)]
        return words


def _page_context(app, pagename: str, templatename: str, context: dict, doctree) -> None:
    cfg = app.config
    up = "../" * pagename.count("/")
    meta = {"lang": cfg.book_lang, "other-lang": cfg.book_other_lang,
            "page": pagename, "root": up,
            "other-lang-url": f"{up}../{cfg.book_other_lang}/{pagename}.html"}
    slug = cfg.html_theme_options.get("repository_url", "").rstrip("/").split("github.com/")[-1]
    branch = cfg.html_theme_options.get("repository_branch", "main")
    name = pagename.rsplit("/", 1)[-1]
    for fw in FRAMEWORKS:
        rel = f"notebooks/{cfg.book_lang}/{fw}/{name}.ipynb"
        if (Path(cfg.book_root) / rel).exists():
            meta[f"{fw}-notebook"] = rel
            meta[f"{fw}-download"] = f"{up}notebooks/{fw}/{name}.ipynb"
            host = ("https://colab.research.google.com/github" if fw == "torch"
                    else "https://studiolab.sagemaker.aws/import/github")
            meta[f"{fw}-launch"] = f"{host}/{slug}/blob/{branch}/{rel}"
    # sphinx-thebe registers its inline configuration script twice under Jupyter Book 1,
    # which makes browsers report a redeclared constant: keep one copy of each script.
    if "script_files" in context:
        seen, unique = set(), []
        for js in context["script_files"]:
            key = (str(getattr(js, "filename", js) or ""),
                   tuple(sorted(getattr(js, "attributes", {}).items())))
            if key not in seen:
                seen.add(key)
                unique.append(js)
        context["script_files"] = unique
    # pydata-sphinx-theme reads its light/dark mode from the template's ``default_mode``;
    # left empty, its script logs "Got invalid theme mode" as an error on a first visit.
    context["default_mode"] = context.get("default_mode") or "auto"
    tags = "".join(f'<meta name="book-{k}" content="{v}">\n' for k, v in meta.items())
    context["metatags"] = context.get("metatags", "") + tags


FRAMEWORK_NAMES = {"torch": "PyTorch", "mxnet": "MXNet"}
NOTEBOOK_TIP = {"en": "{} notebook", "zh": "{} 笔记本"}


def _download_notebooks_only(app, pagename: str, templatename: str, context: dict,
                             doctree) -> None:
    """The header's download menu offers the page's per-framework notebooks (as the book bar
    does), not the page's source: an interleaved two-framework notebook that cannot run top
    to bottom. Runs after sphinx-book-theme has made the menu (priority 501)."""
    cfg = app.config
    up = "../" * pagename.count("/")
    name = pagename.rsplit("/", 1)[-1]
    notebooks = [{"type": "link", "url": f"{up}notebooks/{fw}/{name}.ipynb",
                  "text": f"{FRAMEWORK_NAMES[fw]} .ipynb", "icon": "fas fa-code",
                  "tooltip": NOTEBOOK_TIP.get(cfg.book_lang, "{}").format(FRAMEWORK_NAMES[fw]),
                  "label": f"download-{fw}-notebook-button"}
                 for fw in FRAMEWORKS
                 if (Path(cfg.book_root) / f"notebooks/{cfg.book_lang}/{fw}/{name}.ipynb").exists()]
    for group in context.get("header_buttons", []):
        if group.get("label") == "download-buttons":
            group["buttons"] = notebooks + [
                b for b in group["buttons"]
                if b.get("label") not in ("download-notebook-button", "download-source-button")]


def not_searched(doctree: nodes.Node) -> list[nodes.Node]:
    """What every chapter page starts with and search leaves out: the run note under the
    title (a framework container per framework that holds only a block quote, right after
    the title, before any other text), the quick answers' heading and their lead-in
    sentence (the box's first paragraph, or each framework container's in the box: "What
    to try, and what each did in this page's run…"). Indexed, they made every page a hit
    for the machine's name, and every snippet start with them."""
    found: list[nodes.Node] = []
    top = next(iter(doctree.findall(nodes.section)), None)
    if top is not None and top.children and isinstance(top[0], nodes.title):
        for child in top.children[1:]:
            if isinstance(child, nodes.target):
                continue
            if not (isinstance(child, nodes.container) and "fw" in child["classes"]
                    and len(child) == 1 and isinstance(child[0], nodes.block_quote)):
                break
            found.append(child)
    for box in doctree.findall(lambda n: isinstance(n, nodes.Element)
                               and "quick-answers" in n.get("classes", [])):
        found += [child for child in box.children if isinstance(child, nodes.title)]
        body = [child for child in box.children if not isinstance(child, nodes.title)]
        if body and isinstance(body[0], nodes.paragraph):
            found.append(body[0])
        for child in body:
            if (isinstance(child, nodes.container) and "fw" in child["classes"]
                    and child.children and isinstance(child[0], nodes.paragraph)):
                found.append(child[0])
    return found


def _index_without_formulas(app) -> None:
    """Search finds the words of the text, not of LaTeX sources: each page is indexed
    without its formulas (else ``\\frac`` makes every page with a fraction match "frac"),
    and without its run note and quick answers' heading (:func:`not_searched`)."""
    if not hasattr(app.builder, "index_page"):
        return
    index_page = app.builder.index_page

    def index_page_without_formulas(pagename: str, doctree, title: str) -> None:
        copy = doctree.deepcopy()
        for formula in list(copy.findall(lambda n: isinstance(n, (nodes.math,
                                                                      nodes.math_block)))):
            formula.parent.remove(formula)
        for node in not_searched(copy):
            node.parent.remove(node)
        index_page(pagename, copy, title)

    app.builder.index_page = index_page_without_formulas


#: A gap of two or more spaces between words: a column of a fixed-width text table.
ALIGNED = re.compile(r"\S {2,}\S")
#: The class of a printed output that is a text table (book.css keeps its lines unwrapped;
#: printed sentences wrap).
TEXT_TABLE = "text-table"


#: A line of a log: glog's header (PyTorch's TORCH_LOGS, "V1130 09:57:06.681000 30574
#: torch/_dynamo/guards.py:5396] ..."), MXNet's ("[09:57:06] ../src/x.cc:12: ...") or
#: Python logging's ("WARNING:root:..."). Its message may be indented after the header,
#: which is not a table's column: a log's long lines wrap like sentences.
LOG_LINE = re.compile(r"^(?:[DIWEFV]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\]"
                      r"|\[\d\d:\d\d:\d\d\] \S+:\d+: "
                      r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]*:)")


def is_text_table(text: str) -> bool:
    """Whether a printed output is a fixed-width table (a profiler's, MXNet's C API dump,
    aligned timings): two or more of its lines align columns with runs of spaces. A
    sentence has single spaces, so printed prose can wrap on a narrow screen; so do the
    lines of a log (:data:`LOG_LINE`), whose indented messages are no columns."""
    return sum(bool(ALIGNED.search(line)) and not LOG_LINE.match(line)
               for line in text.splitlines()) >= 2


_ROW = re.compile(r"<tr>(.*?)</tr>", re.S)
_CELL = re.compile(r'<(td|th) style="text-align: (left|right)">(.*?)</\1>', re.S)
#: A cell that reads as a name, not a number: it starts with a letter and has two in a row.
_NAME = re.compile(r"^\s*[^\W\d_](?=.*[^\W\d_]{2})", re.S)


def fitting_table(table: str) -> str:
    """A ``d2l-table`` made to fit a column where it can: a column of names (every body cell
    starts with a letter) aligned left, as text reads, and each cell's text allowed to break
    after "_" and "=" (``reshard_after_forward=False`` would otherwise set the width of its
    column and push the table past the text's width). The numbers stay right-aligned."""
    rows = [_CELL.findall(row) for row in _ROW.findall(table)]
    body = [row for row in rows if row and row[0][0] == "td"]
    names = {i for i in range(max((len(r) for r in body), default=0))
             if all(i < len(r) and _NAME.match(r[i][2]) for r in body)}

    def cell(match: re.Match, column: list[int]) -> str:
        tag, align, text = match.groups()
        i = column[0]
        column[0] += 1
        if i in names:
            align = "left"
        text = re.sub(r"(?<=[_=])(?=\w)", "<wbr>", text)
        return f'<{tag} style="text-align: {align}">{text}</{tag}>'

    def row(match: re.Match) -> str:
        column = [0]
        return "<tr>" + _CELL.sub(lambda m: cell(m, column), match.group(1)) + "</tr>"

    return _ROW.sub(row, table)


def _fit_output_tables(app, doctree, docname: str) -> None:
    """Mark printed text tables (TEXT_TABLE) and fit the HTML result tables
    (:func:`fitting_table`)."""
    for block in doctree.findall(nodes.literal_block):
        classes = block.get("classes", [])
        if "output" in classes and is_text_table(block.astext()):
            classes.append(TEXT_TABLE)
    for raw in list(doctree.findall(nodes.raw)):
        if "html" in raw.get("format", "").split() and 'class="d2l-table"' in raw.astext():
            fitted = re.sub(r'<table class="d2l-table">.*?</table>',
                            lambda m: fitting_table(m.group(0)), raw.astext(), flags=re.S)
            raw.replace_self(nodes.raw(fitted, fitted, **raw.non_default_attributes()))


ANCHORS_JS = "book-anchors.js"


def _anchors_script(app) -> None:
    """Pages load ``_static/book-anchors.js``, which tells ``book.js`` the page of each
    label (``book_anchor_pages``, set by tools/pipeline/site.py), where there are labels."""
    if app.config.book_anchor_pages:
        app.add_js_file(ANCHORS_JS)


def _write_anchors(app, exception) -> None:
    pages = app.config.book_anchor_pages
    if exception is None and pages and app.builder.format == "html":
        static = Path(app.outdir) / "_static"
        static.mkdir(parents=True, exist_ok=True)
        (static / ANCHORS_JS).write_text(
            "// Each label's page (tools/pipeline/site.py anchor_pages), read by book.js.\n"
            f"window.BOOK_ANCHORS = {json.dumps(pages, sort_keys=True)};\n", encoding="utf-8")


def setup(app):
    book_sections.setup(app)
    book_meta.setup(app)
    book_runtimes.setup(app)
    book_ui.setup(app)
    book_figures.setup(app)
    search.languages["zh"] = ChineseSearch
    app.add_config_value("book_lang", "en", "html")
    app.add_config_value("book_other_lang", "zh", "html")
    app.add_config_value("book_root", ".", "html")
    app.add_config_value("book_anchor_pages", {}, "html")
    app.add_js_file("book.js")
    app.add_css_file("book.css")
    app.connect("html-page-context", _page_context)
    app.connect("builder-inited", _index_without_formulas)
    app.connect("builder-inited", _anchors_script)
    app.connect("doctree-resolved", _fit_output_tables)
    app.connect("build-finished", _write_anchors)
    app.connect("html-page-context", _download_notebooks_only, priority=502)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
