"""Stage 1: read a chapter source (``chapters/LANG/NAME.md``) into cells.

A chapter source is a MyST markdown notebook. Code cells tagged ``torch`` or ``mxnet``
belong to one framework, untagged ones to both; prose for one framework sits in a
``:::{framework} torch`` ... ``:::`` block. Prose inside such a block may cite values from
the run as ``{{expression}}`` or ``{{expression:.3f}}``, evaluated in the kernel at the end
of the run. The code cells of the two languages are the same apart from comments and
docstrings (:func:`check_same_code`).
"""

from __future__ import annotations

import ast
import builtins
import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from pipeline import config
from pipeline.config import FRAMEWORKS, LANGUAGES, BookError

CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
FRAMEWORK_BLOCK = re.compile(r"^:::\{framework\} (\w+)[ \t]*\n(.*?)^:::[ \t]*$", re.S | re.M)
PLACEHOLDER = re.compile(r"\{\{\s*([^:{}]+?)\s*(?::([^{}]*))?\}\}")
#: The caption of the figure that the code cell right above draws (the first thing in the
#: prose after that cell): ``:::{drawn-figure} fig-name``, an optional ``:alt:`` line, then
#: the caption, one paragraph, in the chapter's language, up to ``:::``.
DRAWN_FIGURE = re.compile(r"^:::\{drawn-figure\}[ \t]*(?P<name>\S*)[ \t]*\n"
                          r"(?P<body>.*?)^:::[ \t]*$\n?", re.S | re.M)
#: A figure's name: also its id on the page and its anchor (Sphinx keeps it as it is).
FIGURE_NAME = re.compile(r"^fig-[a-z0-9]+(-[a-z0-9]+)*$")


@dataclass
class Cell:
    kind: str  # "markdown" or "code"
    source: str
    tags: list[str] = field(default_factory=list)

    @property
    def framework(self) -> str | None:
        found = [t for t in self.tags if t in FRAMEWORKS]
        return found[0] if found else None


@dataclass
class Chapter:
    lang: str
    name: str
    cells: list[Cell]
    path: Path


def _code_cell(body: str) -> Cell:
    tags: list[str] = []
    lines = body.split("\n")
    if lines and lines[0].strip() == "---":  # YAML options block
        end = lines.index("---", 1)
        options = yaml.safe_load("\n".join(lines[1:end])) or {}
        tags = list(options.get("tags", []))
        lines = lines[end + 1:]
    while lines and lines[0].startswith(":") and ":" in lines[0][1:]:
        key, value = lines.pop(0)[1:].split(":", 1)
        if key.strip() == "tags":
            tags = list(yaml.safe_load(value))
    unknown = [t for t in tags if t in {"pytorch", "mx"}]
    if unknown:
        raise BookError(f"use the tags 'torch' and 'mxnet', not {unknown}")
    return Cell("code", "\n".join(lines).rstrip("\n"), tags)


def parse(path: Path) -> Chapter:
    """Read a chapter source into cells (front matter dropped)."""
    text = path.read_text(encoding="utf-8")
    if text.startswith("---\n"):
        text = text[text.index("\n---\n", 4) + 5:]
    cells, pos = [], 0
    for match in CODE_CELL.finditer(text):
        prose = text[pos:match.start()].strip("\n")
        if prose.strip():
            cells.append(Cell("markdown", prose))
        cells.append(_code_cell(match.group(1)))
        pos = match.end()
    if text[pos:].strip():
        cells.append(Cell("markdown", text[pos:].strip("\n")))
    for block in FRAMEWORK_BLOCK.finditer(text):
        if block.group(1) not in FRAMEWORKS:
            raise BookError(f"{path}: unknown framework {block.group(1)!r} in a framework block")
    return Chapter(path.parent.name, path.stem, cells, path)


def chapter_names() -> list[str]:
    """The chapters of the book (index pages excluded), sorted."""
    return sorted(p.stem for p in (config.CHAPTERS / "en").glob("*.md") if p.stem != "index")


def chapters(lang: str | None = None) -> list[Chapter]:
    """All chapter sources of one language, or of every language, sorted."""
    langs = [lang] if lang else list(LANGUAGES)
    return [parse(p) for code in langs for p in sorted((config.CHAPTERS / code).glob("*.md"))
            if p.stem != "index"]


def editions(name: str) -> dict[str, Chapter]:
    """Chapter ``name`` in every language."""
    return {lang: parse(config.CHAPTERS / lang / f"{name}.md") for lang in LANGUAGES}


def prose_for(markdown: str, framework: str) -> str:
    """Keep this framework's blocks (without their fences), drop the other's."""
    def keep(match: re.Match) -> str:
        return match.group(2).rstrip("\n") if match.group(1) == framework else ""
    return re.sub(r"\n{3,}", "\n\n", FRAMEWORK_BLOCK.sub(keep, markdown)).strip("\n")


def split_title(markdown: str) -> tuple[str, str]:
    """A chapter's first prose as (everything up to and with its ``# Title`` line, the rest):
    the run note goes between the two, right under the title. No title: (all of it, "")."""
    title = re.search(r"^# .*$", markdown, re.M)
    if title is None:
        return markdown, ""
    return markdown[:title.end()], markdown[title.end():].strip("\n")


def fill(text: str, values: dict[str, str]) -> str:
    """Replace every ``{{expression}}`` by its value from the run."""
    return PLACEHOLDER.sub(lambda m: values[m.group(0)], text)


def code_only(source: str) -> str:
    """A code cell without comments and docstrings (which may be translated).

    ``# NBVAL_...`` markers are kept: they change what the tests check.
    """
    kept, statement_start = [], True
    for tok in tokenize.generate_tokens(io.StringIO(source + "\n").readline):
        if tok.type == tokenize.COMMENT and "NBVAL" not in tok.string:
            continue
        if tok.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            statement_start = True
            continue
        if tok.type == tokenize.NL:  # a line break inside a statement, or a blank line
            continue
        if tok.type == tokenize.STRING and statement_start:  # a docstring: a statement
            continue  # that is a string alone (a string continuing an expression is code)
        kept.append(tok.string)
        statement_start = False
    return " ".join(t for t in kept if t.strip())


def check_same_code(versions: dict[str, Chapter]) -> None:
    """Raise :class:`BookError` unless every language has the same code cells.

    One run per framework fills every language's notebook, so the code must agree
    (comments and docstrings apart).
    """
    def code(chapter: Chapter) -> list[tuple[list[str], str]]:
        return [(c.tags, code_only(c.source)) for c in chapter.cells if c.kind == "code"]

    (first, reference), *others = versions.items()
    want = code(reference)
    for _, chapter in others:
        have = code(chapter)
        if len(have) != len(want):
            raise BookError(f"{chapter.path} has {len(have)} code cells, "
                            f"{reference.path} has {len(want)}: they must match")
        for i, (a, b) in enumerate(zip(want, have), 1):
            if a != b:
                raise BookError(f"code cell {i} of {chapter.path} differs from the {first} "
                                "one (only comments and docstrings may be translated)")


@dataclass(frozen=True)
class DrawnFigure:
    """The caption of a figure that a code cell draws, as a ``{drawn-figure}`` block right
    after the cell gives it: its name (the page's id, shared by the framework copies of the
    figure: they get one number), its caption (MyST, one paragraph) and its alt text (the
    ``:alt:`` line; ``""``: the caption as plain text, :meth:`alt_text`)."""

    name: str
    caption: str
    alt: str

    def alt_text(self, values: dict[str, str]) -> str:
        """The image's alt text, with the values of a run filled in: the ``:alt:`` line, else
        what the caption says the plot shows (:func:`described`), not the caption again (a
        screen reader would read it twice)."""
        if self.alt:
            return plain_text(fill(self.alt, values))
        return described(plain_text(fill(self.caption, values)))


def _drawn_figure(match: re.Match) -> DrawnFigure:
    lines = match["body"].strip("\n").split("\n")
    alt = ""
    if lines and lines[0].startswith(":alt:"):
        alt = lines.pop(0)[len(":alt:"):].strip()
    caption = "\n".join(lines).strip()
    return DrawnFigure(match["name"], caption, alt)


def drawn_figures(chapter: Chapter) -> dict[int, DrawnFigure]:
    """Source index of each code cell that a ``{drawn-figure}`` block captions -> its
    caption. The block must open the prose right after the cell (:func:`check_figures`)."""
    found = {}
    for index, cell in enumerate(chapter.cells[1:], 1):
        match = DRAWN_FIGURE.match(cell.source) if cell.kind == "markdown" else None
        if match and chapter.cells[index - 1].kind == "code":
            found[index - 1] = _drawn_figure(match)
    return found


def without_caption(markdown: str) -> str:
    """A prose cell without the ``{drawn-figure}`` block that opens it (the page shows the
    caption under the figure instead)."""
    return DRAWN_FIGURE.sub("", markdown, count=1).strip("\n") \
        if DRAWN_FIGURE.match(markdown) else markdown


def plain_text(myst: str) -> str:
    """A caption as plain text, for an image's alt text: roles, code spans, formulas'
    dollars, emphasis and links reduced to their words."""
    text = re.sub(r"\{[\w:.-]+\}`([^`]*?)(?:\s*<[^<>]*>)?`", r"\1", myst)
    text = re.sub(r"`([^`]*)`", r"\1", text)
    text = re.sub(r"\$([^$]*)\$", r"\1", text)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"(\*\*|\*|__)(.+?)\1", r"\2", text)
    return re.sub(r"\s+", " ", text).strip()


#: A sentence that says how a figure was drawn, not what it shows.
PROVENANCE = re.compile(r"^(Drawn (by|with)\b|由.*画出)")
#: Where a sentence ends: ". " before a capital, a digit or an opening mark, or a full-width
#: full stop (or ! ?).
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\"“])|(?<=[。！？])")


def sentences(text: str) -> list[str]:
    """``text`` (one paragraph) split into its sentences."""
    return [s.strip() for s in SENTENCE_END.split(" ".join(text.split())) if s.strip()]


#: Where a sentence's first clause ends (outside parentheses): a colon or a semicolon.
CLAUSE_END = {":": ".", ";": ".", "：": "。", "；": "。"}
OPENING, CLOSING = "(（[", ")）]"


def first_clause(sentence: str) -> str:
    """``sentence`` up to its first colon or semicolon outside parentheses, closed with a
    full stop; all of it if that leaves fewer than three words (or eight characters)."""
    depth = 0
    for i, char in enumerate(sentence):
        depth += (char in OPENING) - (char in CLOSING)
        if depth == 0 and char in CLAUSE_END:
            clause = sentence[:i].rstrip(" ,，")
            if len(clause.split()) >= 3 or (len(clause) >= 8 and not clause.isascii()):
                return clause + CLAUSE_END[char]
            break
    return sentence


def described(caption: str) -> str:
    """The alt text made from a caption: the first clause of its first sentence
    (:func:`first_clause`), or the whole caption where that sentence says how the figure
    was drawn."""
    parts = sentences(caption)
    if parts and not PROVENANCE.match(parts[0]):
        return first_clause(parts[0])
    return " ".join(caption.split())


def check_figures(chapter: Chapter) -> list[str]:
    """Problems with a chapter's figure captions: a ``{drawn-figure}`` block that does not
    open the prose right after a code cell, one without a name as the page needs it
    (``fig-...``, lower case), without a caption, or whose name another figure takes (only
    a PyTorch cell and an MXNet cell that draw the same figure may share one)."""
    problems = []
    captioned = drawn_figures(chapter)
    placed = {id(chapter.cells[i + 1]) for i in captioned}
    owners: dict[str, list[str | None]] = {}
    for cell in chapter.cells:
        if cell.kind != "markdown":
            continue
        for match in DRAWN_FIGURE.finditer(cell.source):
            if match.start() > 0 or id(cell) not in placed:
                problems.append(f"{chapter.path}: {{drawn-figure}} {match['name']} must come "
                                "right after the code cell that draws the figure")
        for name in re.findall(r"^:name:[ \t]*(\S+)", cell.source, re.M):
            owners.setdefault(name, []).append("figure")
    for index, figure in captioned.items():
        if not FIGURE_NAME.match(figure.name):
            problems.append(f"{chapter.path}: {{drawn-figure}} {figure.name!r}: name it "
                            "fig-... (lower-case letters, digits and dashes)")
        if not figure.caption:
            problems.append(f"{chapter.path}: {{drawn-figure}} {figure.name} has no caption")
        owners.setdefault(figure.name, []).append(chapter.cells[index].framework or "both")
    for name, kinds in owners.items():
        if len(kinds) > 1 and sorted(kinds) != ["mxnet", "torch"]:
            problems.append(f"{chapter.path}: two figures are named {name} (only a PyTorch "
                            "and an MXNet cell that draw the same figure may share a name)")
    return problems


def _bound_names(source: str) -> set[str]:
    """Every name a code cell binds (assignments, loops, definitions, imports), at any depth."""
    lines = [ln for ln in source.split("\n") if not ln.lstrip().startswith(("!", "%"))]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _cited_names(expression: str) -> set[str]:
    """The names an ``{{expression}}`` reads (those its own comprehensions bind aside)."""
    tree = ast.parse(expression.strip(), mode="eval")
    names = [n for n in ast.walk(tree) if isinstance(n, ast.Name)]
    read = {n.id for n in names if isinstance(n.ctx, ast.Load)}
    return read - {n.id for n in names if isinstance(n.ctx, ast.Store)}


def check_values(chapter: Chapter) -> list[str]:
    """Problems with the ``{{values}}`` a chapter's prose cites: one outside a framework block
    (each framework's run gives its own values), or one that reads a name no code cell of
    that framework binds (its run could not fill it). A ``{drawn-figure}`` caption belongs
    to the framework(s) of the cell that draws the figure: each copy of the figure cites its
    own run's values."""
    problems = []
    known = set(dir(builtins))
    bound = {fw: set().union(*[_bound_names(c.source) for c in chapter.cells
                               if c.kind == "code" and c.framework in (None, fw)])
             for fw in FRAMEWORKS}
    captions = drawn_figures(chapter)
    for index, cell in enumerate(chapter.cells):
        if cell.kind != "markdown":
            continue
        blocks = [(b.group(1), b.group(2)) for b in FRAMEWORK_BLOCK.finditer(cell.source)]
        source = cell.source
        if index - 1 in captions:
            drawer = chapter.cells[index - 1].framework
            caption = DRAWN_FIGURE.match(source).group(0)
            blocks += [(fw, caption) for fw in ([drawer] if drawer else FRAMEWORKS)]
            source = without_caption(source)
        outside = FRAMEWORK_BLOCK.sub("", source)
        for m in PLACEHOLDER.finditer(outside):
            problems.append(f"{chapter.path}: {m.group(0)} outside a framework block (values "
                            "differ per framework: cite them inside one)")
        for fw, text in blocks:
            for m in PLACEHOLDER.finditer(text):
                try:
                    missing = _cited_names(m.group(1)) - bound.get(fw, set()) - known
                except SyntaxError:
                    problems.append(f"{chapter.path}: {m.group(0)} is not a Python expression")
                    continue
                if missing:
                    problems.append(f"{chapter.path}: {m.group(0)} in a {fw} block reads "
                                    f"{', '.join(sorted(missing))}, which no {fw} code cell "
                                    "binds")
    return problems
