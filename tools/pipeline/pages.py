"""Stage 4: the executed notebooks of a chapter -> one page with framework tabs.

Framework cells are tagged with their framework (``tag_torch`` / ``tag_mxnet`` CSS classes
on the page), framework prose goes into ``fw fw-<framework>`` containers, and a shared
cell whose outputs are the same for every framework appears once. ``book.js`` turns
consecutive framework elements into synced tabs.
"""

from __future__ import annotations

import copy
import re

import nbformat

from pipeline.config import FRAMEWORKS, BookError
from pipeline.notebooks import notebook_path
from pipeline.runinfo import run_note
from pipeline.sources import FRAMEWORK_BLOCK, PLACEHOLDER, Chapter, fill, split_title


def _container(framework: str, text: str) -> str:
    return f"::::{{container}} fw fw-{framework}\n{text}\n::::"


def _same_outputs(a: nbformat.NotebookNode, b: nbformat.NotebookNode) -> bool:
    def strip(cell):
        return [{k: v for k, v in o.items() if k != "execution_count"} for o in cell.outputs]
    return strip(a) == strip(b)


def merge(chapter: Chapter) -> nbformat.NotebookNode:
    """One page notebook: framework cells tagged, framework prose in containers."""
    runs = {fw: nbformat.read(notebook_path(chapter, fw), 4) for fw in FRAMEWORKS}
    by_index = {fw: {c.metadata["d2l_ext"]["source_index"]: c for c in nb.cells
                     if "source_index" in c.metadata.get("d2l_ext", {})}
                for fw, nb in runs.items()}
    values = {fw: nb.metadata["d2l_ext"]["values"] for fw, nb in runs.items()}
    page = nbformat.v4.new_notebook()
    page.metadata["kernelspec"] = runs["torch"].metadata["kernelspec"]
    # pygments_lexer "ipython3" highlights `!cmd` and `%magic` lines without warnings
    page.metadata["language_info"] = runs["torch"].metadata.get("language_info", {})
    title_done = False
    for index, cell in enumerate(chapter.cells):
        if cell.kind == "markdown":
            def block(match: re.Match) -> str:
                fw = match.group(1)
                return _container(fw, fill(match.group(2).rstrip("\n"), values[fw]))
            text = FRAMEWORK_BLOCK.sub(block, cell.source)
            if PLACEHOLDER.search(text):
                raise BookError(f"{chapter.path}: a {{{{value}}}} outside a framework block: "
                                "values differ per framework, so cite them inside one")
            if not title_done and re.search(r"^# ", cell.source, re.M):
                title, text = split_title(text)  # the run note goes right under the title
                notes = "\n\n".join(
                    _container(fw, run_note(runs[fw].metadata["d2l_ext"]["run"], chapter.lang))
                    for fw in FRAMEWORKS)
                page.cells += [nbformat.v4.new_markdown_cell(title),
                               nbformat.v4.new_markdown_cell(notes)]
                title_done = True
            if text:
                page.cells.append(nbformat.v4.new_markdown_cell(text))
            continue
        if cell.framework is None and _same_outputs(*(by_index[fw][index] for fw in FRAMEWORKS)):
            shared = copy.deepcopy(by_index[FRAMEWORKS[0]][index])
            shared.metadata.pop("d2l_ext", None)
            page.cells.append(shared)  # one cell, no tabs
            continue
        for fw in FRAMEWORKS:
            if cell.framework in (None, fw):
                executed = copy.deepcopy(by_index[fw][index])
                if cell.framework is None:  # the same cell, once per framework: two ids
                    executed.id = f"{executed.id}-{fw}"
                executed.metadata["tags"] = [fw] + executed.metadata.get("tags", [])
                executed.metadata.pop("d2l_ext", None)
                page.cells.append(executed)
    return page
