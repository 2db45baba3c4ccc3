"""Where a long chapter could be split into section pages, and what each seam would cut.

A section page has a notebook of its own, which must rebuild whatever it uses from the
pages before it. For every ``## `` section of a chapter, and each framework, this reports
the prose words of the section, and, for a seam at its start, the names that the code and
the cited values (``{{...}}``) from there on use but only the sections before define:
imports (cheap to repeat), and everything else (functions to move into ``d2l_ext``, results
to recompute). ``book.py seams NAME`` prints it.
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass, field

from pipeline.config import FRAMEWORKS
from pipeline.sources import PLACEHOLDER, Chapter, editions, prose_for

SECTION = re.compile(r"^## (.+)$", re.M)
#: Names a notebook has without defining them.
PROVIDED = set(dir(builtins)) | {"get_ipython", "In", "Out", "display", "__file__"}


@dataclass
class Section:
    title: str
    words: int = 0
    imports: dict[str, None] = field(default_factory=dict)  # bound by an import, in order
    bound: dict[str, None] = field(default_factory=dict)  # bound otherwise, in order
    #: names used before this section binds them (in order of first use)
    needs: dict[str, None] = field(default_factory=dict)


def python_of(cell_source: str) -> str:
    """A code cell's Python: IPython's magics and shell lines made ``pass`` at their own
    indentation, so that a block holding only a magic stays a block (a ``%%`` cell magic,
    such as ``%%writefile``, makes the whole cell no Python of the notebook's own)."""
    if cell_source.lstrip().startswith("%%"):
        return ""
    return "\n".join(line[:len(line) - len(line.lstrip())] + "pass"
                     if line.lstrip().startswith(("%", "!")) else line
                     for line in cell_source.splitlines())


def _stores(node: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]


def _scoped(node: ast.AST) -> set[str]:
    """Names bound inside ``node`` for its own use: comprehension variables, lambda
    arguments."""
    names = {n for c in ast.walk(node) if isinstance(c, ast.comprehension)
             for n in _stores(c.target)}
    return names | {a.arg for lam in ast.walk(node) if isinstance(lam, ast.Lambda)
                    for a in ast.walk(lam.args) if isinstance(a, ast.arg)}


def names_in(code: str) -> tuple[list[str], list[str], list[str]]:
    """The module-level names ``code`` binds by import, the ones it binds otherwise, and the
    names it reads before binding them, each in the code's order. A function's body counts
    as read where the function is defined (it runs later in the same notebook)."""
    imports: list[str] = []
    bound: list[str] = []
    reads: list[str] = []
    seen: set[str] = set()

    def read(node: ast.AST, local: frozenset[str] = frozenset()) -> None:
        local = local | _scoped(node)
        for sub in ast.walk(node):
            if (isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load)
                    and sub.id not in seen and sub.id not in local and sub.id not in reads):
                reads.append(sub.id)

    def bind(names: list[str], into: list[str]) -> None:
        for name in names:
            seen.add(name)
            into.append(name)

    def visit(statements: list[ast.stmt]) -> None:
        for st in statements:
            if isinstance(st, (ast.Import, ast.ImportFrom)):
                bind([(a.asname or a.name).split(".")[0] for a in st.names], imports)
            elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bind([st.name], bound)
                local = {a.arg for a in ast.walk(st) if isinstance(a, ast.arg)}
                local |= set(_stores(st)) | {n.name for n in ast.walk(st) if isinstance(
                    n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
                read(st, frozenset(local))
            elif isinstance(st, (ast.For, ast.AsyncFor)):
                read(st.iter)
                bind(_stores(st.target), bound)
                visit(st.body)
                visit(st.orelse)
            elif isinstance(st, (ast.With, ast.AsyncWith)):
                for item in st.items:
                    read(item.context_expr)
                    if item.optional_vars is not None:
                        bind(_stores(item.optional_vars), bound)
                visit(st.body)
            elif isinstance(st, (ast.If, ast.While)):
                read(st.test)
                visit(st.body)
                visit(st.orelse)
            elif isinstance(st, ast.Try):
                visit(st.body)
                for handler in st.handlers:
                    if handler.type is not None:
                        read(handler.type)
                    if handler.name:
                        bind([handler.name], bound)
                    visit(handler.body)
                visit(st.orelse)
                visit(st.finalbody)
            else:
                read(st)
                scoped = _scoped(st)
                bind([n for n in _stores(st) if n not in scoped], bound)

    visit(ast.parse(code).body)
    return imports, bound, reads


def sections(chapter: Chapter, framework: str) -> list[Section]:
    """The chapter's sections (the part before the first ``## `` is the first) as one
    framework's notebook runs them."""
    found = [Section("(opening)")]
    for cell in chapter.cells:
        if cell.framework not in (None, framework):
            continue
        if cell.kind == "markdown":
            text = prose_for(cell.source, framework)
            for i, part in enumerate(SECTION.split(text)):
                if i % 2 == 1:
                    found.append(Section(part.strip()))
                    continue
                found[-1].words += len(re.findall(r"[A-Za-z0-9]+(?:['’-][A-Za-z]+)*",
                                                  PLACEHOLDER.sub("0", part)))  # a value: 1
                for match in PLACEHOLDER.finditer(part):
                    try:
                        _, _, reads = names_in(match.group(1))
                    except SyntaxError:
                        continue
                    _need(found[-1], reads)
            continue
        code = python_of(cell.source)
        if not code.strip():
            continue
        imports, bound, reads = names_in(code)
        _need(found[-1], reads)
        found[-1].imports.update(dict.fromkeys(imports))
        found[-1].bound.update(dict.fromkeys(bound))
    return found


def _need(section: Section, reads: list[str]) -> None:
    for name in reads:
        if name not in section.imports and name not in section.bound and name not in PROVIDED:
            section.needs.setdefault(name)


def cut_by_seam(parts: list[Section], at: int) -> tuple[list[str], list[str]]:
    """The names a page starting at section ``at`` would need from the sections before it:
    (imports, other names), each in order of first use."""
    before_imports: set[str] = set()
    before_bound: set[str] = set()
    for part in parts[:at]:
        before_imports |= set(part.imports)
        before_bound |= set(part.bound)
    rebuilt: set[str] = set()
    imports: list[str] = []
    others: list[str] = []
    for part in parts[at:]:
        for name in part.needs:
            if name in rebuilt or name in imports or name in others:
                continue
            if name in before_bound:
                others.append(name)
            elif name in before_imports:
                imports.append(name)
        rebuilt |= set(part.imports) | set(part.bound)
    return imports, others


def report(name: str, frameworks: list[str] | None = None, shown_names: int = 10) -> str:
    """A table per framework: each section's words, the words from it to the end, and what
    a seam at its start would cut."""
    chapter = editions(name)["en"]
    lines = []
    for framework in frameworks or list(FRAMEWORKS):
        parts = sections(chapter, framework)
        total = sum(p.words for p in parts)
        lines.append(f"{name} ({framework}): {total:,} prose words in {len(parts)} parts")
        lines.append(f"{'section':44} {'words':>6} {'to end':>7}  cut at its start")
        left = total
        for i, part in enumerate(parts):
            imports, others = cut_by_seam(parts, i) if i else ([], [])
            names = ", ".join(others[:shown_names]) + (" …" if len(others) > shown_names else "")
            cut = (f"{len(imports)} imports, {len(others)} names" + (f": {names}" if others
                                                                     else "")) if i else "-"
            lines.append(f"{part.title[:44]:44} {part.words:6,} {left:7,}  {cut}")
            left -= part.words
        lines.append("")
    return "\n".join(lines)
