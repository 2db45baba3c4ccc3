"""Stage 3: one run per framework -> the executed notebooks of every language.

A chapter's code cells are the same in every language (comments apart), so each
framework's notebook is executed once, in a fresh kernel, from the ``RUN_LANGUAGE``
source. Its outputs and the values its prose cites are then written into the notebook of
every language: both editions show the same numbers from the same run, each with a run
note in its own language. Only the cells that call ``d2l.message`` (checks that answer in
the reader's language) run again for each other language, at the end of the same run.

Nothing is written unless the run succeeds, and then the notebooks of all languages are
replaced together (:func:`write_notebooks`): a failed or interrupted run leaves the
committed notebooks as they were.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

import nbformat

from pipeline.config import RUN_LANGUAGE, BookError, shown
from pipeline.notebooks import notebook_path, placeholders, split, title_index
from pipeline.runinfo import probe, run_note
from pipeline.sources import chapter_names, check_same_code, editions, fill

#: Code cells that contain this answer in the reader's language (the exercises' checks):
#: they are run again for every other language, after the whole notebook, in its kernel.
LANGUAGE_DEPENDENT = "d2l.message("


def _printed_json(cell: nbformat.NotebookNode) -> dict:
    """The JSON object that a helper cell printed as its last line."""
    text = "".join(o.get("text", "") for o in cell.outputs
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")
    return json.loads(text.strip().splitlines()[-1])


def run_notebook(nb: nbformat.NotebookNode, smoke: bool, timeout: int) -> None:
    """Execute ``nb`` in place, in a fresh kernel started in an empty directory.

    The kernel inherits ``D2L_SMOKE`` (the notebooks' size knob) and ignores warnings.
    """
    from nbclient import NotebookClient

    saved = {k: os.environ.get(k) for k in ("D2L_SMOKE", "PYTHONWARNINGS")}
    os.environ.update(D2L_SMOKE="1" if smoke else "", PYTHONWARNINGS="ignore")
    try:
        with tempfile.TemporaryDirectory() as cwd:  # files the notebook writes stay out of git
            NotebookClient(nb, timeout=timeout, kernel_name="python3",
                           resources={"metadata": {"path": cwd}}).execute()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def execute(name: str, framework: str, smoke: bool = False, timeout: int = 1800) -> list[Path]:
    """Run chapter ``name`` once for ``framework``; write its notebook in every language.

    Returns the paths written. Raises :class:`BookError` if a cell fails; then nothing
    is written.
    """
    from nbclient.exceptions import CellExecutionError

    versions = editions(name)
    check_same_code(versions)
    books = {lang: split(chapter, framework) for lang, chapter in versions.items()}
    nb = copy.deepcopy(books[RUN_LANGUAGE])
    ran = [c for c in nb.cells if c.cell_type == "code"]
    wanted = {}
    for book in books.values():
        wanted.update(placeholders(book))
    values_cell = nbformat.v4.new_code_cell(
        "import json as _json\nprint(_json.dumps({"
        + ", ".join(f"{key!r}: format({expr}, {fmt!r})" for key, (expr, fmt) in wanted.items())
        + "}))")
    probe_cell = nbformat.v4.new_code_cell(probe(framework))
    nb.cells += [values_cell, probe_cell]
    # Cells that answer in the reader's language run again, at the end of the same
    # kernel session, once per other language: {lang: {code cell ordinal: rerun cell}}.
    reruns: dict[str, dict[int, nbformat.NotebookNode]] = {}
    for lang, book in books.items():
        if lang == RUN_LANGUAGE:
            continue
        nb.cells.append(nbformat.v4.new_code_cell(
            f"import os as _os\n_os.environ['D2L_LANG'] = {lang!r}"))
        code = [c for c in book.cells if c.cell_type == "code"]
        reruns[lang] = {i: nbformat.v4.new_code_cell(c.source) for i, c in enumerate(code)
                        if LANGUAGE_DEPENDENT in c.source}
        nb.cells += reruns[lang].values()
    try:
        run_notebook(nb, smoke, timeout)
    except CellExecutionError as err:
        raise BookError(f"{versions[RUN_LANGUAGE].path.name} ({framework}) failed; "
                        f"the committed notebooks are unchanged.\n{err}") from err
    except BaseException as err:  # interrupted (nbclient turns SIGINT into other errors)
        err.add_note(f"{name} ({framework}): the run stopped; the committed notebooks "
                     "are unchanged.")
        raise
    run = dict(_printed_json(probe_cell), size="smoke" if smoke else "full",
               language=RUN_LANGUAGE)
    values = _printed_json(values_cell)

    written = {}
    for lang, book in books.items():
        outputs = [reruns.get(lang, {}).get(i, cell) for i, cell in enumerate(ran)]
        for mine, theirs in zip(outputs, ran, strict=True):
            mine.execution_count = theirs.execution_count
        written[notebook_path(versions[lang], framework)] = _filled(
            book, outputs, run, values, nb.metadata["language_info"], lang)
    write_notebooks(written)
    return list(written)


def _filled(book: nbformat.NotebookNode, executed: list[nbformat.NotebookNode], run: dict,
            values: dict, language_info: dict, lang: str) -> nbformat.NotebookNode:
    """``book`` (a split notebook) with the outputs of the ``executed`` code cells, its prose
    filled with ``values`` and the run note in ``lang`` under the title."""
    code = [c for c in book.cells if c.cell_type == "code"]
    for mine, theirs in zip(code, executed, strict=True):
        mine.outputs = copy.deepcopy(theirs.outputs)
        mine.execution_count = theirs.execution_count
    for cell in book.cells:
        if cell.cell_type == "markdown":
            cell.source = fill(cell.source, values)
    book.metadata["language_info"] = copy.deepcopy(language_info)
    book.metadata["d2l_ext"].update(run=run, values=values)
    note = nbformat.v4.new_markdown_cell(run_note(run, lang))
    note.id = "run-note"
    note.metadata["d2l_ext"] = {"role": "run-note"}
    book.cells.insert(title_index(book) + 1, note)
    return book


def refill(name: str, framework: str) -> list[Path]:
    """Rewrite the prose of chapter ``name``'s executed notebooks from the current sources,
    keeping the outputs and values of their run: for a change of prose, without running again.

    Refuses (writing nothing) if a notebook is missing, if its code changed since it ran, or
    if the prose now cites a value the run did not record: then the chapter must run again.
    """
    written = {}
    for lang, chapter in editions(name).items():
        path = notebook_path(chapter, framework)
        book = split(chapter, framework)
        again = f"run `tools/book.py execute --framework {framework} {name}`"
        if not path.exists():
            raise BookError(f"{shown(path)} is missing; {again}.")
        old = nbformat.read(path, 4)
        meta = old.metadata.get("d2l_ext", {})
        executed = [c for c in old.cells if c.cell_type == "code"]
        if [c.source for c in executed] != [c.source for c in book.cells
                                            if c.cell_type == "code"]:
            raise BookError(f"the code of {shown(chapter.path)} changed since {shown(path)} "
                            f"ran; {again}.")
        missing = sorted(set(placeholders(book)) - set(meta.get("values", {})))
        if missing:
            raise BookError(f"{shown(chapter.path)} cites values that the run of {shown(path)} "
                            f"did not record ({', '.join(missing)}); {again}.")
        written[path] = _filled(book, executed, meta["run"], meta["values"],
                                old.metadata.get("language_info", {}), lang)
    write_notebooks(written)
    return list(written)


@contextlib.contextmanager
def _signals_deferred():
    """Hold SIGINT and SIGTERM until the block is done, then deliver them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    kinds = (signal.SIGINT, signal.SIGTERM)
    old = {s: signal.signal(s, lambda signum, frame: received.append(signum)) for s in kinds}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        for s in received:
            signal.raise_signal(s)


def write_notebooks(notebooks: dict[Path, nbformat.NotebookNode]) -> None:
    """Write all notebooks or none: each to a ``.part`` file first, then all moved in place."""
    parts: dict[Path, Path] = {}
    try:
        for path, nb in notebooks.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            parts[path] = path.with_name(path.name + ".part")
            nbformat.write(nb, parts[path])
        with _signals_deferred():
            for path, part in parts.items():
                os.replace(part, path)
    finally:
        for part in parts.values():
            part.unlink(missing_ok=True)


def _chapters(names: list[str] | None) -> list[str]:
    """``names``, checked against the book's chapters; all of them if ``names`` is empty."""
    known = chapter_names()
    unknown = sorted(set(names or []) - set(known))
    if unknown:
        raise BookError(f"no chapter named {', '.join(unknown)}; the chapters are: "
                        + ", ".join(known))
    return list(names or known)


def execute_all(names: list[str] | None, frameworks: list[str], smoke: bool,
                log=print) -> dict[tuple[str, str], float]:
    """Execute chapters (all if ``names`` is empty) for each framework; seconds per run."""
    seconds = {}
    for name in _chapters(names):
        for framework in frameworks:
            start = time.perf_counter()
            paths = execute(name, framework, smoke)
            seconds[name, framework] = time.perf_counter() - start
            log(f"executed {name} ({framework}) in {seconds[name, framework]:.0f} s: "
                + ", ".join(shown(p) for p in paths))
    return seconds


def refill_all(names: list[str], frameworks: list[str], log=print) -> None:
    """:func:`refill` the named chapters' notebooks for each framework."""
    for name in _chapters(names):
        for framework in frameworks:
            log("refilled " + ", ".join(shown(p) for p in refill(name, framework)))
