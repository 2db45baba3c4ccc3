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
from pipeline.notebooks import HIDE_INPUT, merged_streams, notebook_path
from pipeline.runinfo import run_note
from pipeline.sources import (
    FRAMEWORK_BLOCK,
    PLACEHOLDER,
    Chapter,
    DrawnFigure,
    drawn_figures,
    fill,
    split_title,
    without_caption,
)


def _container(framework: str, text: str) -> str:
    return f"::::{{container}} fw fw-{framework}\n{text}\n::::"


def _same_outputs(a: nbformat.NotebookNode, b: nbformat.NotebookNode) -> bool:
    def strip(cell):
        return [{k: v for k, v in o.items() if k != "execution_count"} for o in cell.outputs]
    return strip(a) == strip(b)


def _as_figure(cell: nbformat.NotebookNode, figure: DrawnFigure, used: set[str],
               framework: str, values: dict) -> list[nbformat.NotebookNode]:
    """Make the figure that ``cell`` draws a numbered figure with its caption and alt text
    (MyST-NB's cell options ``mystnb.figure`` and ``mystnb.image``), the values they cite
    from ``framework``'s run. A run that drew nothing there (a figure drawn on a CPU only,
    say) shows no figure and no caption; the figures after it then number one lower on the
    page than in the notebooks, which count the caption. Its id is the figure's name; a
    second copy of it on the page (the other framework's) takes ``NAME-FRAMEWORK``;
    book_figures.py numbers each framework's copy in its own tab's sequence. Returns the
    page's cells for ``cell``: itself, or, where it also shows a table or the like, the
    parts :func:`_apart` makes."""
    shown = [o for o in cell.outputs if o.output_type in ("display_data", "execute_result")]
    if not any(m.startswith("image/") for o in shown for m in o.get("data", {})):
        return [cell]  # this run drew nothing (a figure drawn on some devices only)
    images = [i for i, o in enumerate(cell.outputs) if _is_image(o)]
    if len(images) != 1:
        raise BookError(f"the cell before {{drawn-figure}} {figure.name} ({framework}) must "
                        f"draw one figure; it shows {len(images)}")
    cells = [cell]
    if len(shown) > 1:  # a table and the figure, say: the figure gets a cell of its own
        cells = _apart(cell, images[0])
    name = figure.name if figure.name not in used else f"{figure.name}-{framework}"
    used.add(name)
    cells[1 if len(cells) > 1 else 0].metadata["mystnb"] = {
        "figure": {"name": name, "caption": fill(figure.caption, values)},
        "image": {"alt": figure.alt_text(values)}}
    return cells


def _is_image(output) -> bool:
    return output.output_type in ("display_data", "execute_result") and any(
        m.startswith("image/") for m in output.get("data", {}))


def _apart(cell: nbformat.NotebookNode, image: int) -> list[nbformat.NotebookNode]:
    """The page's cells for a cell that shows more than its figure: the cell with what it
    shows before the figure, then the figure (and the printing right after it), then the
    rest, each in order; the two later cells hide their code (MyST-NB wraps every displayed
    output of a cell in the cell's figure, so the figure needs a cell of its own)."""
    end = next((i for i in range(image + 1, len(cell.outputs))
                if cell.outputs[i].output_type != "stream"), len(cell.outputs))
    parts = [cell.outputs[:image], cell.outputs[image:end], cell.outputs[end:]]
    cells = []
    for number, outputs in enumerate(parts):
        if number and not outputs:
            continue
        part = copy.deepcopy(cell)
        part.outputs = outputs
        if number:  # the same code, not shown again (a cell without code shows nothing)
            part.id = f"{cell.id}-{number}"
            part.metadata["tags"] = [t for t in part.metadata.get("tags", [])
                                     if t != HIDE_INPUT] + ["remove-input"]
        cells.append(part)
    return cells


def merge(chapter: Chapter) -> nbformat.NotebookNode:
    """One page notebook: framework cells tagged, framework prose in containers."""
    runs = {fw: nbformat.read(notebook_path(chapter, fw), 4) for fw in FRAMEWORKS}
    for nb in runs.values():  # one block per run of printed lines (as execute writes them)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs = merged_streams(cell.outputs)
    by_index = {fw: {c.metadata["d2l_ext"]["source_index"]: c for c in nb.cells
                     if "source_index" in c.metadata.get("d2l_ext", {})}
                for fw, nb in runs.items()}
    values = {fw: nb.metadata["d2l_ext"]["values"] for fw, nb in runs.items()}
    page = nbformat.v4.new_notebook()
    page.metadata["kernelspec"] = runs["torch"].metadata["kernelspec"]
    # pygments_lexer "ipython3" highlights `!cmd` and `%magic` lines without warnings
    page.metadata["language_info"] = runs["torch"].metadata.get("language_info", {})
    title_done = False
    figures, used = drawn_figures(chapter), set()
    for index, cell in enumerate(chapter.cells):
        if cell.kind == "markdown":
            def block(match: re.Match) -> str:
                fw = match.group(1)
                return _container(fw, fill(match.group(2).rstrip("\n"), values[fw]))
            text = FRAMEWORK_BLOCK.sub(block, without_caption(cell.source))
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
            page.cells += (_as_figure(shared, figures[index], used, FRAMEWORKS[0],
                                      values[FRAMEWORKS[0]])
                           if index in figures else [shared])  # one cell, no tabs
            continue
        for fw in FRAMEWORKS:
            if cell.framework in (None, fw):
                executed = copy.deepcopy(by_index[fw][index])
                if cell.framework is None:  # the same cell, once per framework: two ids
                    executed.id = f"{executed.id}-{fw}"
                executed.metadata["tags"] = [fw] + executed.metadata.get("tags", [])
                executed.metadata.pop("d2l_ext", None)
                page.cells += (_as_figure(executed, figures[index], used, fw, values[fw])
                               if index in figures else [executed])
    return page
