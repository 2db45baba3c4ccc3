"""Stage 2: a chapter -> one unexecuted notebook per framework.

The notebook of one framework keeps the shared cells, its own cells and its own
framework blocks (without their fences), and starts with a cell that installs d2l_ext
where it is missing (Colab, SageMaker Studio Lab). Its ``code_hash`` tells whether a
committed, executed notebook still matches its source (:func:`stale`).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import nbformat

from pipeline import config
from pipeline.config import FRAMEWORKS, BookError, repository, shown
from pipeline.sources import PLACEHOLDER, Chapter, chapters, check_values, prose_for


def install_cell(framework: str, lang: str) -> nbformat.NotebookNode:
    """The first cell: installs d2l_ext where it is missing (Colab, Studio Lab), and sets
    the notebook's language, in which ``d2l.message`` answers (the exercises' checks)."""
    slug, branch = repository()
    extra = "torch" if framework == "torch" else "mxnet"
    comments = {
        "en": ["# Installs what Colab / SageMaker Studio Lab lack; nothing where d2l_ext is there.",
               "# MXNet 1.9.1 needs Python 3.11 and numpy < 1.24 (numpy 1.23.5).",
               "# the language in which the exercises' checks answer"],
        "zh": ["# 安装 Colab / SageMaker Studio Lab 缺少的包；已装有 d2l_ext 时什么也不做。",
               "# MXNet 1.9.1 需要 Python 3.11 和 numpy < 1.24（即 numpy 1.23.5）。",
               "# 练习的检查单元格用这种语言给出反馈"],
    }[lang]
    lines = comments[:1] + (comments[1:2] if framework == "mxnet" else [])
    lines += ["import importlib.util",
              "import os",
              "",
              f"os.environ[\"D2L_LANG\"] = {lang!r}  {comments[2]}",
              "if importlib.util.find_spec('d2l_ext') is None:",
              f"    !pip install -q \"d2l-ext[{extra}] @ git+https://github.com/{slug}@{branch}\""]
    cell = nbformat.v4.new_code_cell("\n".join(lines))
    cell.id = "install"
    cell.metadata["d2l_ext"] = {"role": "install"}
    return cell


def split(chapter: Chapter, framework: str) -> nbformat.NotebookNode:
    """The unexecuted notebook of one framework."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    title_done = False
    for index, cell in enumerate(chapter.cells):
        if cell.framework not in (None, framework):
            continue
        if cell.kind == "markdown":
            text = prose_for(cell.source, framework)
            if text:
                new = nbformat.v4.new_markdown_cell(text)
                new.id = cell_id(index)
                new.metadata["d2l_ext"] = {"source_index": index}
                nb.cells.append(new)
            if not title_done and re.search(r"^# ", cell.source, re.M):
                nb.cells.append(install_cell(framework, chapter.lang))
                title_done = True
        else:
            new = nbformat.v4.new_code_cell(cell.source)
            new.id = cell_id(index)
            new.metadata["d2l_ext"] = {"source_index": index}
            if cell.tags:
                new.metadata["tags"] = [t for t in cell.tags if t not in FRAMEWORKS]
            nb.cells.append(new)
    if not title_done:
        raise BookError(f"{chapter.path}: the chapter needs a '# Title' line")
    nb.metadata["d2l_ext"] = {"source": f"chapters/{chapter.lang}/{chapter.name}.md",
                              "framework": framework, "code_hash": code_hash(nb)}
    return nb


def cell_id(source_index: int) -> str:
    """A cell's id, from its position in the chapter source: the same in every run, so that
    executing a chapter again changes only what the run changed (nbformat's default ids are
    random, and every run would rewrite them all)."""
    return f"cell-{source_index:03d}"


def code_hash(nb: nbformat.NotebookNode) -> str:
    """A hash of everything in a split notebook that affects its execution or text."""
    parts = [f"{c.cell_type}\n{c.source}" for c in nb.cells]
    return hashlib.sha256("\n\x00".join(parts).encode()).hexdigest()[:16]


def code_version(nb: nbformat.NotebookNode) -> str:
    """A hash of a split notebook's code alone (comments and docstrings left out): the same
    in every language, and unchanged by a change of prose. A GPU record keeps it
    (``d2l_ext.gpu_runs``)."""
    from pipeline.sources import code_only

    code = [code_only(c.source) for c in nb.cells
            if c.cell_type == "code" and c.metadata.get("d2l_ext", {}).get("role") != "install"]
    return hashlib.sha256("\n\x00".join(code).encode()).hexdigest()[:16]


def placeholders(nb: nbformat.NotebookNode) -> dict[str, tuple[str, str]]:
    """``{{expression:format}}`` -> (expression, format), for every value the prose cites."""
    found = {}
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for m in PLACEHOLDER.finditer(cell.source):
                found[m.group(0)] = (m.group(1), m.group(2) or "")
    return found


def title_index(nb: nbformat.NotebookNode) -> int:
    """The index of the cell with the ``# Title``."""
    return next(i for i, c in enumerate(nb.cells)
                if c.cell_type == "markdown" and re.search(r"^# ", c.source, re.M))


def notebook_path(chapter: Chapter, framework: str) -> Path:
    """Where the executed notebook of a chapter and framework is committed."""
    return config.NOTEBOOKS / chapter.lang / framework / f"{chapter.name}.ipynb"


def stale() -> list[str]:
    """Notebooks that are missing or were executed from an older chapter source."""
    problems = []
    for chapter in chapters():
        problems += check_values(chapter)
        for framework in FRAMEWORKS:
            path = notebook_path(chapter, framework)
            want = split(chapter, framework).metadata["d2l_ext"]["code_hash"]
            if not path.exists():
                problems.append(f"{shown(path)} is missing")
            elif nbformat.read(path, 4).metadata.get("d2l_ext", {}).get("code_hash") != want:
                problems.append(f"{shown(path)} is older than {shown(chapter.path)}")
    return problems
