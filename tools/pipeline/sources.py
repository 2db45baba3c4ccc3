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
    that framework binds (its run could not fill it)."""
    problems = []
    known = set(dir(builtins))
    bound = {fw: set().union(*[_bound_names(c.source) for c in chapter.cells
                               if c.kind == "code" and c.framework in (None, fw)])
             for fw in FRAMEWORKS}
    for cell in chapter.cells:
        if cell.kind != "markdown":
            continue
        outside = FRAMEWORK_BLOCK.sub("", cell.source)
        for m in PLACEHOLDER.finditer(outside):
            problems.append(f"{chapter.path}: {m.group(0)} outside a framework block (values "
                            "differ per framework: cite them inside one)")
        for block in FRAMEWORK_BLOCK.finditer(cell.source):
            fw, text = block.group(1), block.group(2)
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
