"""MyST prose -> plain Jupyter markdown, for the notebooks that Colab and Studio Lab open.

The chapter sources are MyST (labels, ``{ref}`` roles, ``{figure}`` and other directives),
and the site's pages are built from them (``pages.py``). A notebook opened in Colab or
SageMaker Studio Lab renders plain Jupyter markdown only, so the prose of the executed
notebooks is rewritten here: labels and comments dropped, cross-references as links to the
published site (``page#label``), figures as images by their absolute URL on the site,
admonitions as block quotes with a bold title, other directives as the markdown they stand
for. The site's address is the one setting ``html.baseurl`` in ``_config.yml``
(:func:`pipeline.config.site_url`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import yaml

from pipeline import config
from pipeline.config import FRAMEWORKS
from pipeline.sources import chapters, prose_for, without_caption

#: A directive fence: ```{name} argument, :::{name} argument (any length, any indent).
DIRECTIVE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,}|:{3,})\{(?P<name>[\w:.-]+)\}"
                       r"[ \t]*(?P<arg>.*?)[ \t]*$")
#: A plain code fence (kept verbatim with what it holds).
CODE_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?!.*`)")
#: A MyST label line, ``(name)=``.
LABEL = re.compile(r"^[ \t]*\((?P<label>[^()\s]+)\)=[ \t]*$")
#: An inline role and its content, or an inline code span (skipped as a whole).
INLINE = re.compile(r"(?:\{(?P<role>[\w:.-]+)\})?(?P<ticks>`+)(?P<body>.+?)(?P=ticks)")
#: ``text <target>`` inside a role.
EXPLICIT = re.compile(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>$", re.S)
#: A markdown link or image whose target is relative (not a URL, not mail).
RELATIVE_LINK = re.compile(r"(?P<bang>!?)\[(?P<text>[^\]]*)\]\((?P<target>(?![a-z][\w+.-]*:)"
                           r"[^)\s]+)\)")

ADMONITIONS = {
    "en": {"note": "Note", "tip": "Tip", "hint": "Hint", "important": "Important",
           "warning": "Warning", "caution": "Caution", "attention": "Attention",
           "danger": "Danger", "error": "Error", "seealso": "See also", "todo": "To do"},
    "zh": {"note": "注意", "tip": "提示", "hint": "提示", "important": "重要",
           "warning": "警告", "caution": "小心", "attention": "注意", "danger": "危险",
           "error": "错误", "seealso": "另请参阅", "todo": "待办"},
}
#: Directives shown as a block quote under their argument as a bold title.
QUOTED = {"admonition", "dropdown", "margin", "sidebar", "topic", "epigraph", "pull-quote",
          "highlights", "card"}
#: Directives whose body is shown as it is (their frame has no plain-markdown form).
TRANSPARENT = {"container", "div", "only", "framework", "grid", "grid-item", "grid-item-card",
               "tab-set", "tab-item", "raw", "glossary", "rst-class", "cssclass"}
#: Directives that show nothing in a notebook.
DROPPED = {"tableofcontents", "toctree", "bibliography", "glue:figure", "index"}
CODE_DIRECTIVES = {"code", "code-block", "sourcecode", "literalinclude"}
FIGURE = {"en": "Figure", "zh": "图"}
#: A figure's number as the site's captions show it (``numfig_format``, tools/pipeline/site.py).
FIGURE_NUMBER = {"en": "Figure {}", "zh": "图 {}"}
#: The suffixes that make the framework copies of one figure (``fig-x-torch``, ``fig-x-mxnet``,
#: or a drawn figure shown under both tabs, book_figures.py): each is numbered in its own
#: framework's count; a ``{numref}`` to one copy shows the reader's own copy's number.
TWIN_SUFFIXES = ("-torch", "-mxnet")


@dataclass(frozen=True)
class Target:
    """Where a label points: a chapter's page, the anchor on it ("" for the page's top) and
    the text a ``{ref}`` shows (the section's heading, or the figure's caption)."""

    page: str
    anchor: str
    title: str


@dataclass(frozen=True)
class Context:
    """What rewriting one notebook's prose needs: its language, the labels of the book in
    that language, and the site's address of that edition (ending in ``/``)."""

    lang: str
    targets: dict
    site: str
    numbers: dict = field(default_factory=dict)  # figure name -> its number, "3.2"

    def page_url(self, page: str, anchor: str = "") -> str:
        """The URL of a chapter's page (``index`` for the edition's first page)."""
        path = "index.html" if page == "index" else f"chapters/{page}.html"
        return self.site + path + (f"#{anchor}" if anchor else "")

    def image_url(self, path: str) -> str:
        """The URL of a figure on the site: Sphinx copies each image to ``_images/`` under
        its own file name (tests/test_colab_notebooks.py checks it in the built site)."""
        return f"{self.site}_images/{PurePosixPath(path).name}"


def context(lang: str, framework: str) -> Context:
    """The rewriting context of ``framework``'s notebooks in ``lang``, from the current
    chapter sources (figures numbered as that framework's reader sees them)."""
    return Context(lang, targets(lang), config.site_url(lang), figure_numbers(lang, framework))


def twin_key(name: str) -> str:
    """The figure that ``name`` is a framework copy of (``fig-x-torch``, ``fig-x-mxnet``:
    ``fig-x``): a ``{numref}`` to one copy shows the number of the reader's own copy."""
    for suffix in TWIN_SUFFIXES:
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


def chapter_numbers() -> dict[str, int]:
    """Each page's chapter number: the chapter's place in the reading order of ``_toc.yml``
    (a chapter's section pages share it)."""
    from pipeline import toc

    return toc.chapter_numbers()


def _figure_names(text: str) -> list[str]:
    """The names of the numbered figures in ``text``, in order: ``{figure}`` directives with
    a ``:name:`` and ``{drawn-figure}`` captions (Sphinx numbers figures that have an id, and
    only those)."""
    names = []
    for name, arg, options, _ in _directives(text):
        if name == "figure" and options.get("name"):
            names.append(str(options["name"]))
        elif name == "drawn-figure" and arg:
            names.append(arg)
    return names


def numbered_figures(chapter, framework: str) -> list[str]:
    """The names of the numbered figures that ``framework``'s reader of ``chapter`` sees, in
    the page's order, as its notebook holds them (``notebooks.split``): the figures of the
    prose shared by both frameworks and of ``framework``'s blocks, and the captions of the
    figures that ``framework``'s cells and the shared cells draw."""
    names = []
    for index, cell in enumerate(chapter.cells):
        if cell.kind != "markdown":
            continue
        text = prose_for(cell.source, framework)
        if index and chapter.cells[index - 1].framework not in (None, framework):
            text = without_caption(text)  # the other framework's figure
        names += _figure_names(text)
    return names


def figure_numbers(lang: str, framework: str) -> dict[str, str]:
    """Figure name -> its number (``"3.2"``: chapter 3's second figure) for every chapter in
    ``lang``, as ``framework``'s reader sees them on the site: per chapter, over its pages in
    reading order, counting the figures of that framework and the shared ones, without gaps
    for the other framework's figures (book_figures.py numbers the site's tabs alike). The
    other framework's copy of a figure (:func:`twin_key`) has the number of this one's, for
    a ``{numref}`` to it."""
    from pipeline import toc

    numbers: dict[str, str] = {}
    pages = {chapter.name: chapter for chapter in chapters(lang)}
    for number, its_pages in enumerate(toc.read().values(), 1):
        count = 0  # one count over the chapter's pages, in reading order
        copies: dict[str, str] = {}  # twin_key -> the number of this framework's copy
        for page in (pages[p] for p in its_pages if p in pages):
            for name in numbered_figures(page, framework):
                if name not in numbers:
                    count += 1
                    numbers[name] = f"{number}.{count}"
                    copies.setdefault(twin_key(name), numbers[name])
        for page in (pages[p] for p in its_pages if p in pages):
            for other in FRAMEWORKS:
                for name in numbered_figures(page, other):
                    if name not in numbers and twin_key(name) in copies:
                        numbers[name] = copies[twin_key(name)]
    return numbers


def targets(lang: str) -> dict[str, Target]:
    """Every label of the chapters in ``lang``: section labels (``(label)=`` before a
    heading) and figure names (``:name:``)."""
    found = {}
    for chapter in chapters(lang):
        text = "\n\n".join(c.source for c in chapter.cells if c.kind == "markdown")
        lines = text.split("\n")
        for i, line in enumerate(lines):
            label = LABEL.match(line)
            if label:
                heading = next((ln for ln in lines[i + 1:] if ln.strip()), "")
                level = len(heading) - len(heading.lstrip("#"))
                title = heading[level:].strip() if level else label["label"]
                found[label["label"]] = Target(chapter.name, "" if level == 1 else
                                               label["label"], title)
        for block in _directives(text):
            name, arg, options, body = block
            if name in ("figure", "image") and "name" in options:
                caption = body.strip().split("\n\n")[0].replace("\n", " ")
                found[options["name"]] = Target(chapter.name, options["name"],
                                                caption or FIGURE[lang])
            elif name == "drawn-figure" and arg:
                found[arg] = Target(chapter.name, arg, body.strip().replace("\n", " "))
    return found


def _directives(text: str):
    """(name, argument, options, body) of every directive in ``text``, nested ones too."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        block = _read_directive(lines, i)
        if block is None:
            i += 1
            continue
        name, arg, options, body, i = block
        yield name, arg, options, body
        if name not in CODE_DIRECTIVES | {"math", "raw"}:
            yield from _directives(body)


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return (stripped.startswith(fence[0] * len(fence))
            and set(stripped) == {fence[0]})


def _read_directive(lines: list[str], start: int):
    """The directive opening at ``lines[start]``: (name, argument, options, body, the index
    after its closing fence); ``None`` if no directive opens there."""
    match = DIRECTIVE.match(lines[start])
    if not match:
        return None
    fence, indent = match["fence"], len(match["indent"])
    end = start + 1
    while end < len(lines) and not _closes(lines[end], fence):
        end += 1
    body = [ln[indent:] if ln[:indent].strip() == "" else ln for ln in lines[start + 1:end]]
    options: dict = {}
    if body and body[0].strip() == "---":  # a YAML block of options
        close = next((k for k in range(1, len(body)) if body[k].strip() == "---"), None)
        if close is not None:
            options = yaml.safe_load("\n".join(body[1:close])) or {}
            body = body[close + 1:]
    while body and re.match(r"^:[\w-]+:", body[0]):
        key, _, value = body.pop(0)[1:].partition(":")
        options[key.strip()] = value.strip()
    return match["name"], match["arg"], options, "\n".join(body).strip("\n"), end + 1


def plain(text: str, ctx: Context) -> str:
    """``text`` (MyST markdown, values already filled in) as plain Jupyter markdown."""
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        block = _read_directive(lines, i)
        if block is not None:
            name, arg, options, body, i = block
            rendered = _directive(name, arg, options, body, ctx)
            indent = DIRECTIVE.match(line)["indent"]
            out += [indent + ln if ln else ln for ln in rendered.split("\n")] if rendered else []
            continue
        fence = CODE_FENCE.match(line)
        if fence:  # a code block: verbatim up to its closing fence
            out.append(line)
            i += 1
            while i < len(lines) and not _closes(lines[i], fence["fence"]):
                out.append(lines[i])
                i += 1
            if i < len(lines):
                out.append(lines[i])
            i += 1
            continue
        i += 1
        if LABEL.match(line) or line.startswith("%") or line.strip() == "+++":
            continue  # a label, a MyST comment, a cell break
        out.append(_inline(_math_label(line), ctx))
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")


def _math_label(line: str) -> str:
    """``$$ ... $$ (label)`` -> ``$$ ... $$``."""
    return re.sub(r"(\$\$)[ \t]*\([^()\s]+\)[ \t]*$", r"\1", line)


def _inline(line: str, ctx: Context) -> str:
    """One line with its roles rewritten and its relative links made absolute."""
    in_table = line.lstrip().startswith("|")

    def role(match: re.Match) -> str:
        if not match["role"]:
            return match.group(0)  # a code span: left as it is
        text = _role(match["role"], match["body"].strip(), ctx)
        return text.replace("|", "\\|") if in_table else text

    parts, pos = [], 0
    for match in INLINE.finditer(line):  # links outside code spans only
        parts.append(_links(line[pos:match.start()], ctx))
        parts.append(role(match))
        pos = match.end()
    parts.append(_links(line[pos:], ctx))
    return "".join(parts)


def _links(text: str, ctx: Context) -> str:
    """Relative links and images: figures by their URL on the site, ``#label`` and
    ``chapter.md#label`` as links to the site's page."""
    def absolute(match: re.Match) -> str:
        target = match["target"]
        if match["bang"]:
            return f"![{match['text']}]({ctx.image_url(target)})"
        path, _, anchor = target.partition("#")
        if not path and anchor in ctx.targets:
            found = ctx.targets[anchor]
            return f"[{match['text']}]({ctx.page_url(found.page, found.anchor)})"
        if path.endswith((".md", ".ipynb")):
            return f"[{match['text']}]({ctx.page_url(PurePosixPath(path).stem, anchor)})"
        if not path and anchor:
            return f"[{match['text']}]({ctx.site}#{anchor})"
        return match.group(0)

    return RELATIVE_LINK.sub(absolute, text)


def _role(name: str, body: str, ctx: Context) -> str:
    """The plain markdown of one inline role."""
    explicit = EXPLICIT.match(body)
    text, target = (explicit["text"], explicit["target"]) if explicit else ("", body)
    if name in ("ref", "numref", "any"):
        found = ctx.targets.get(target)
        if found is None:
            return text or target
        if name == "numref" and target in ctx.numbers:
            number = ctx.numbers[target]
            shown = (text.replace("%s", number).replace("{number}", number) if text
                     else FIGURE_NUMBER[ctx.lang].format(number))
            return f"[{shown}]({ctx.page_url(found.page, found.anchor)})"
        shown = (text or found.title).replace("%s", "").replace("{number}", "").strip()
        return f"[{shown or found.title}]({ctx.page_url(found.page, found.anchor)})"
    if name == "eq":
        return f"({target})"
    if name == "doc":
        page = PurePosixPath(target).stem
        title = text or next((t.title for t in ctx.targets.values()
                              if t.page == page and not t.anchor), page)
        return f"[{title}]({ctx.page_url(page)})"
    if name == "math":
        return f"${body}$"
    if name in ("sub", "sup"):
        return f"<{name}>{body}</{name}>"
    if name in ("abbr", "term", "cite", "cite:p", "cite:t", "index", "guilabel", "menuselection",
                "download", "dfn"):
        return text or re.sub(r"\s*<[^<>]*>$", "", body)
    return f"`{body}`"  # code-like roles: {code}, {kbd}, {file}, {py:func}, ...


def _quote(title: str, body: str) -> str:
    lines = ([f"**{title}**", ""] if title else []) + body.split("\n")
    return "\n".join(f"> {ln}" if ln.strip() else ">" for ln in lines)


def _folded(name: str, options: dict) -> bool:
    """Whether the directive is folded on the site: a ``{dropdown}`` (sphinx-design), or an
    admonition with the class ``dropdown`` (sphinx-togglebutton)."""
    return name == "dropdown" or (name in {*ADMONITIONS["en"], "admonition"}
                                  and "dropdown" in str(options.get("class", "")).split())


def _details(title: str, body: str) -> str:
    """A folded block in plain markdown: HTML ``<details>`` (Jupyter and Colab render the
    markdown inside it, blank lines around it)."""
    return f"<details>\n<summary>{title}</summary>\n\n{body}\n\n</details>"


def _directive(name: str, arg: str, options: dict, body: str, ctx: Context) -> str:
    """The plain markdown of one directive (its body rewritten too)."""
    inner = plain(body, ctx) if name not in CODE_DIRECTIVES | {"math", "raw"} else body
    if name in ("figure", "image"):
        alt = str(options.get("alt", "")).replace("]", "\\]").replace("\n", " ")
        image = f"![{alt}]({ctx.image_url(arg)})"
        if not inner:
            return image
        return f"{image}\n\n{_caption(options.get('name'), inner, ctx)}"
    if name == "drawn-figure":  # the caption of the figure in the code cell's output above
        return _caption(arg, inner, ctx)
    if _folded(name, options):  # worked solutions: folded in the notebooks too
        return _details(_inline(arg, ctx) or ADMONITIONS[ctx.lang].get(name, ""), inner)
    if name in ADMONITIONS["en"]:
        return _quote(arg or ADMONITIONS[ctx.lang][name], inner)
    if name in QUOTED:
        return _quote(_inline(arg, ctx), inner)
    if name in CODE_DIRECTIVES:
        return f"```{arg.split()[0] if arg else ''}\n{body}\n```"
    if name == "math":
        return f"$$\n{body}\n$$"
    if name == "list-table":
        return _list_table(arg, options, inner)
    if name == "table":
        return f"**{_inline(arg, ctx)}**\n\n{inner}" if arg else inner
    if name in DROPPED:
        return ""
    return inner  # TRANSPARENT, and any directive not named here: what it holds


def _caption(name: str | None, text: str, ctx: Context) -> str:
    """``**Figure 3.2**: text`` (``**图 3.2**：text``), numbered as on the site."""
    number = ctx.numbers.get(name) if name else None
    label = FIGURE_NUMBER[ctx.lang].format(number) if number else FIGURE[ctx.lang]
    return f"**{label}**{'：' if ctx.lang == 'zh' else ': '}{text}"


def _list_table(title: str, options: dict, body: str) -> str:
    """A ``{list-table}`` (rows ``* - cell`` then ``  - cell``) as a pipe table."""
    rows: list[list[str]] = []
    for line in body.split("\n"):
        item = re.match(r"^(?P<row>\*)?\s*-\s?(?P<cell>.*)$", line)
        if item and (item["row"] or rows):
            if item["row"]:
                rows.append([])
            rows[-1].append(item["cell"].strip())
        elif rows and rows[-1] and line.strip():  # a cell's continuation line
            rows[-1][-1] += " " + line.strip()
    if not rows:
        return body
    width = max(len(r) for r in rows)
    rows = [[c.replace("|", "\\|") for c in r] + [""] * (width - len(r)) for r in rows]
    headed = int(options.get("header-rows", 0) or 0) > 0
    header, rows = (rows[0], rows[1:]) if headed else ([""] * width, rows)
    table = ["| " + " | ".join(header) + " |", "|" + "---|" * width]
    table += ["| " + " | ".join(r) + " |" for r in rows]
    return (f"**{title}**\n\n" if title else "") + "\n".join(table)
