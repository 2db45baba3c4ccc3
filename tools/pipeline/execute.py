"""Stage 3: one run per framework -> the executed notebooks of every language.

A chapter's code cells are the same in every language (comments apart), so each
framework's notebook is executed once, in a fresh kernel, from the ``RUN_LANGUAGE``
source. Its outputs and the values its prose cites are then written into the notebook of
every language: both editions show the same numbers from the same run, each with a run
note in its own language. The run captures what the Chinese edition shows differently
(``d2l_ext.i18n``): the Chinese of each text printed through ``d2l.message`` and a Chinese
rendering of each figure labelled through ``d2l.label``; :func:`localized` puts them in.

Nothing is written unless the run succeeds, and then the notebooks of all languages are
replaced together (:func:`write_notebooks`): a failed or interrupted run leaves the
committed notebooks as they were.
"""

from __future__ import annotations

import contextlib
import copy
import html
import json
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import nbformat

from d2l_ext import gpu_runs
from d2l_ext.i18n import cell_key, recorded
from pipeline import config, plain
from pipeline.config import RUN_LANGUAGE, BookError, shown
from pipeline.notebooks import (
    code_version,
    merged_streams,
    notebook_path,
    placeholders,
    run_time_cell,
    split,
    title_index,
)
from pipeline.runinfo import probe, run_note
from pipeline.sources import chapter_names, check_same_code, editions, fill, split_title

#: Scratch space of the runs: the kernels' working and runtime directories.
SCRATCH = config.BUILD / "run"


def _printed_json(cell: nbformat.NotebookNode) -> dict:
    """The JSON object that a helper cell printed as its last line."""
    text = "".join(o.get("text", "") for o in cell.outputs
                   if o.get("output_type") == "stream" and o.get("name") == "stdout")
    return json.loads(text.strip().splitlines()[-1])


def run_notebook(nb: nbformat.NotebookNode, smoke: bool, timeout: int,
                 capture: Path | None = None, code_version: str = "",
                 deadline: float | None = None, launch=None) -> None:
    """Execute ``nb`` in place, in a fresh kernel started in an empty scratch directory.

    ``deadline`` (a ``time.monotonic()`` time): past it, the kernel is killed and
    ``TimeoutError`` raised. ``launch``: a function that rewrites the kernel's command (the
    GPU validation pins the kernel to cores: ``d2l_ext.machine.Conditions``). nbclient
    keeps each cell's timestamps in its ``metadata.execution``.

    The kernel inherits ``D2L_SMOKE`` (the notebooks' size knob) and ``D2L_CODE_VERSION``
    (which version of the chapter's code runs: ``d2l_ext.gpu_runs``) and ignores warnings. The
    scratch directory (files the notebook writes, the kernel's connection file and its
    stderr log) lies under ``_build/run`` and is removed afterwards; one left by a killed
    run is removed by the next (:func:`remove_stale_scratch`).

    nbclient runs in a worker thread, so that SIGINT and SIGTERM stay with this process's
    main thread (nbclient takes them over in the main thread and reports a kernel it shut
    down itself as dead): stopped, this kills the kernel and its children and re-raises.
    """
    from nbclient import NotebookClient

    saved = {k: os.environ.get(k)
             for k in ("D2L_SMOKE", "PYTHONWARNINGS", "JUPYTER_RUNTIME_DIR", "D2L_CAPTURE",
                       "D2L_CODE_VERSION")}
    SCRATCH.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=SCRATCH, prefix=f"{os.getpid()}-") as scratch:
        cwd = Path(scratch) / "cwd"  # files the notebook writes stay out of git
        cwd.mkdir()
        os.environ.update(D2L_SMOKE="1" if smoke else "", PYTHONWARNINGS="ignore",
                          JUPYTER_RUNTIME_DIR=str(Path(scratch) / "runtime"),
                          D2L_CAPTURE=str(capture) if capture else "",
                          D2L_CODE_VERSION=code_version)
        runtime = Path(scratch) / "runtime"
        runtime.mkdir()
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(cwd)}},
                                kernel_manager_class=_scratch_kernel_manager(runtime, launch))
        failure: list[BaseException] = []
        try:
            with open(Path(scratch) / "kernel.log", "w") as log:
                def work() -> None:
                    try:
                        client.execute(stderr=log)
                    except BaseException as err:  # handed to the main thread
                        failure.append(err)

                worker = threading.Thread(target=work, name="nbclient", daemon=True)
                worker.start()
                try:
                    while worker.is_alive():
                        worker.join(0.2)
                        if deadline is not None and time.monotonic() > deadline:
                            raise TimeoutError("the run reached its deadline")
                except BaseException:
                    _kill_kernel(client)
                    worker.join(30)
                    raise
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        if failure:
            error = failure[0]
            from nbclient.exceptions import CellExecutionError

            stderr = (Path(scratch) / "kernel.log").read_text(errors="replace").strip()
            if not isinstance(error, CellExecutionError) and stderr:
                error.add_note("the kernel's stderr ended with:\n"
                               + "\n".join(stderr.splitlines()[-15:]))
            raise error


def _scratch_kernel_manager(runtime: Path, launch=None) -> type:
    """A kernel manager class whose kernels write their connection file into ``runtime``
    (jupyter_client's default is a temporary file that a killed run would leave behind) and
    start with the command ``launch(command)`` if ``launch`` is given."""
    from jupyter_client.manager import AsyncKernelManager

    class ScratchKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs) -> None:
            kwargs.setdefault("connection_file", str(runtime / "kernel.json"))
            super().__init__(**kwargs)

        def format_kernel_cmd(self, extra_arguments=None) -> list[str]:
            cmd = super().format_kernel_cmd(extra_arguments)
            return launch(cmd) if launch is not None else cmd

    return ScratchKernelManager


def _kill_kernel(client) -> None:
    """Kill the kernel of an nbclient ``client`` with everything it started (its own process
    group: jupyter_client starts kernels in a new session)."""
    process = getattr(getattr(client.km, "provisioner", None), "process", None)
    if process is not None and process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)


def remove_stale_scratch() -> list[Path]:
    """Remove the scratch directories of runs whose process no longer exists (a run killed
    with SIGKILL cannot clean up after itself); return those removed."""
    removed = []
    for path in SCRATCH.glob("*-*") if SCRATCH.is_dir() else []:
        pid = path.name.split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def execute(name: str, framework: str, smoke: bool = False,
            timeout: int | None = 1800, deadline: float | None = None,
            conditions=None) -> list[Path]:
    """Run chapter ``name`` once for ``framework``; write its notebook in every language.

    Returns the paths written. Raises :class:`BookError` if a cell fails, runs longer than
    ``timeout`` seconds (``None``: no limit) or kills the kernel; then nothing is written.
    Past ``deadline`` (``time.monotonic()``), the run is stopped with ``TimeoutError`` and
    nothing is written. ``conditions`` (the GPU validation's ``d2l_ext.machine.Conditions``,
    started by the caller) starts the kernel and adds the run's duration and conditions to
    its record.
    """
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    versions = editions(name)
    check_same_code(versions)
    books = {lang: split(chapter, framework) for lang, chapter in versions.items()}
    nb = copy.deepcopy(books[RUN_LANGUAGE])
    ran = [c for c in nb.cells if c.cell_type == "code"]
    wanted = {}
    for book in books.values():
        wanted.update(placeholders(book))
    values_cell = nbformat.v4.new_code_cell(
        "import json as _json\n"
        "def _both(value, fmt):  # a d2l.message text is cited in each edition's language\n"
        "    if hasattr(value, 'en') and hasattr(value, 'zh'):\n"
        "        return {'en': format(value.en, fmt), 'zh': format(value.zh, fmt)}\n"
        "    return format(value, fmt)\n"
        "print(_json.dumps({"
        + ", ".join(f"{key!r}: _both({expr}, {fmt!r})" for key, (expr, fmt) in wanted.items())
        + "}))")
    probe_cell = nbformat.v4.new_code_cell(probe(framework))
    nb.cells += [values_cell, probe_cell]
    version = code_version(books[RUN_LANGUAGE])
    with tempfile.TemporaryDirectory(prefix="d2l-capture-") as capture:
        try:
            run_notebook(nb, smoke, timeout, capture=Path(capture), code_version=version,
                         deadline=deadline,
                         launch=conditions.kernel_command if conditions is not None else None)
        except (CellExecutionError, CellTimeoutError, DeadKernelError) as err:
            # a cell that raised, ran past the timeout, or killed its kernel: this chapter
            # failed (an interrupt is not caught here: run_notebook raises it as it came)
            notes = "\n".join(getattr(err, "__notes__", []))
            kept = keep_unfinished(nb, name, framework)
            raise BookError(f"{versions[RUN_LANGUAGE].path.name} ({framework}) failed; "
                            f"the committed notebooks are unchanged (what ran: {kept}).\n{err}"
                            + (f"\n{notes}" if notes else "")) from err
        except BaseException as err:  # interrupted, or the kernel died
            kept = keep_unfinished(nb, name, framework)
            err.add_note(f"{name} ({framework}): the run stopped; the committed notebooks "
                         f"are unchanged (what ran: {kept}).")
            raise
        texts = recorded(Path(capture))
        figures = Path(capture) / gpu_runs.CAPTURED
        figures = json.loads(figures.read_text(encoding="utf-8")) if figures.exists() else None
    run = dict(_printed_json(probe_cell), size="smoke" if smoke else "full",
               language=RUN_LANGUAGE)
    if conditions is not None:
        run = conditions.finish(run)
    values = _printed_json(values_cell)
    record = None
    if figures is not None and run.get("gpus") and not smoke:
        record = gpu_runs.GpuRun(chapter=name, run=run, commit=commit(), code_version=version,
                                 figures=tuple(gpu_runs.Figure(**f)
                                               for f in figures["figures"]))

    written = {}
    for lang, book in books.items():
        outputs = [localized(cell, lang, texts) for cell in ran]
        in_lang = {k: v[lang] if isinstance(v, dict) else v for k, v in values.items()}
        written[notebook_path(versions[lang], framework)] = _filled(
            book, outputs, run, in_lang, nb.metadata["language_info"], lang)
    if record is not None:
        written[gpu_runs.path(name)] = gpu_runs.to_json(record)
    write_notebooks(written)
    return list(written)


def unfinished_path(name: str, framework: str) -> Path:
    """Where :func:`keep_unfinished` writes a run of chapter ``name`` that did not finish."""
    return config.NOTEBOOKS.parent / "_build" / "unfinished" / f"{name}-{framework}.ipynb"


def keep_unfinished(nb, name: str, framework: str) -> str:
    """Write the cells an unfinished run executed (their outputs and nbclient's timestamps)
    to :func:`unfinished_path`, never over a committed notebook: where a run failed or spent
    its time, to read after a brief GPU runner is gone. Returns the path as shown, or why
    nothing was written."""
    path = unfinished_path(name, framework)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}.part")
        nbformat.write(nb, partial)
        partial.replace(path)
    except (OSError, ValueError) as err:
        return f"not kept: {err}"
    return shown(path)


def commit() -> str:
    """The repository's commit (short), with ``-dirty`` where files differ from it; ``""``
    outside a git checkout."""
    import subprocess

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=config.ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "chapters", "d2l_ext")
    return f"{head}-dirty" if head and dirty else head


def _translator(pairs: dict[str, str]):
    """A function that replaces each English text of ``pairs`` by its Chinese, longest first
    and never inside a word ("min" is left alone in "deterministic"). One pass per text, so
    that a Chinese text recorded with an English text inside it (an f-string that cites
    another message, evaluated while the run spoke English) is completed by a later pass."""
    def bounded(en: str) -> re.Pattern:
        before = r"(?<![A-Za-z0-9_])" if re.match(r"[A-Za-z0-9_]", en) else ""
        after = r"(?![A-Za-z0-9_])" if re.search(r"[A-Za-z0-9_]$", en) else ""
        return re.compile(before + re.escape(en) + after)

    ordered = [(bounded(en), zh) for en, zh in sorted(pairs.items(), key=lambda p: -len(p[0]))]

    def translate(text: str) -> str:
        for pattern, zh in ordered:
            text = pattern.sub(lambda _, zh=zh: zh, text)  # zh taken literally
        return text

    return translate


def _html_translator(pairs: dict[str, str]):
    """:func:`_translator` for an HTML output: first each recorded HTML fragment whole (a
    table's English HTML, recorded with its Chinese HTML by ``d2l.text_table``), then each
    recorded text as HTML writes it (``<`` as ``&lt;``), only in the text between tags:
    never in a tag's name or attributes."""
    fragments = _translator({en: zh for en, zh in pairs.items() if _is_html(en)})
    texts = _translator({html.escape(en, quote=False): html.escape(zh, quote=False)
                         for en, zh in pairs.items() if not _is_html(en)})

    def translate(markup: str) -> str:
        return "".join(part if part.startswith("<") else texts(part)
                       for part in re.split(r"(<[^>]*>)", fragments(markup)))

    return translate


def _is_html(text: str) -> bool:
    """Whether a recorded text is an HTML fragment (an element, from its tag to its end)."""
    return re.fullmatch(r"\s*<([A-Za-z][\w-]*)[^>]*>.*</\1>\s*", text, re.DOTALL) is not None


def localized(cell: nbformat.NotebookNode, lang: str,
              texts: dict[str | None, list[tuple[str, str]]]) -> nbformat.NotebookNode:
    """An executed code cell as the edition in ``lang`` shows it.

    The run is English. For Chinese, every text that the cell's code recorded through
    ``d2l.message`` (``texts[cell_key(source)]``; ``texts[None]``: recorded outside a
    cell, e.g. by a script it ran) is replaced, longest first, in its printed and
    displayed text (in HTML too: :func:`_html_translator`), and each figure that carries a
    Chinese rendering shows that instead. The renderings are removed from the metadata of
    both editions.
    """
    cell = copy.deepcopy(cell)
    pairs = dict({*texts.get(cell_key(cell.source), []), *texts.get(None, [])})
    translate = _translator(pairs)
    translate_html = None

    for output in cell.outputs:
        chinese = output.get("metadata", {}).pop("d2l_ext", {}).get("zh", {})
        if lang != "zh":
            continue
        if output.get("output_type") == "stream":
            output["text"] = translate(output["text"])
        data = output.get("data", {})
        if "text/plain" in data:
            data["text/plain"] = translate(data["text/plain"])
        if "text/html" in data:
            translate_html = translate_html or _html_translator(pairs)
            data["text/html"] = translate_html(data["text/html"])
        for mime, rendering in chinese.items():
            if mime in data:
                data[mime] = rendering
    return cell


def _title_apart(book: nbformat.NotebookNode) -> None:
    """Give the title a cell of its own, the rest of its cell (the opening prose) the next
    one, so that the run note goes right under the title."""
    at = title_index(book)
    title, rest = split_title(book.cells[at].source)
    if rest:
        opening = nbformat.v4.new_markdown_cell(rest)
        opening.id = f"{book.cells[at].id}-opening"
        opening.metadata = copy.deepcopy(book.cells[at].metadata)
        book.cells[at].source = title
        book.cells.insert(at + 1, opening)


def _filled(book: nbformat.NotebookNode, executed: list[nbformat.NotebookNode], run: dict,
            values: dict, language_info: dict, lang: str) -> nbformat.NotebookNode:
    """``book`` (a split notebook) with the outputs of the ``executed`` code cells, its prose
    filled with ``values`` and rewritten as plain Jupyter markdown (:mod:`pipeline.plain`:
    what Colab and Studio Lab render), the run note in ``lang`` under the title, and first
    of all a cell with the notebook's run time (:func:`run_time_cell`). Adjacent stream
    outputs of a cell are joined (:func:`merged_streams`; a refill joins them in notebooks
    executed before)."""
    code = [c for c in book.cells if c.cell_type == "code"]
    for mine, theirs in zip(code, executed, strict=True):
        mine.outputs = merged_streams(copy.deepcopy(theirs.outputs))
        mine.execution_count = theirs.execution_count
        if "execution" in theirs.metadata:  # nbclient's timestamps of the cell's run
            mine.metadata["execution"] = copy.deepcopy(theirs.metadata["execution"])
    _title_apart(book)
    prose = plain.context(lang, book.metadata["d2l_ext"]["framework"])
    for cell in book.cells:
        if cell.cell_type == "markdown":
            cell.source = plain.plain(fill(cell.source, values), prose)
    book.metadata["language_info"] = copy.deepcopy(language_info)
    book.metadata["d2l_ext"].update(run=run, values=values)
    note = nbformat.v4.new_markdown_cell(run_note(run, lang))
    note.id = "run-note"
    note.metadata["d2l_ext"] = {"role": "run-note"}
    book.cells.insert(title_index(book) + 1, note)
    meta = book.metadata["d2l_ext"]
    book.cells.insert(0, run_time_cell(code, run, meta["framework"], lang,
                                       Path(meta["source"]).stem))
    return book


def refill(name: str, framework: str) -> list[Path]:
    """Rewrite the prose of chapter ``name``'s executed notebooks from the current sources,
    keeping the outputs and values of their run: for a change of prose, or of the first cell
    (which the pipeline writes and which prints nothing), without running again.

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

        def ran(cells):  # the install cell is made by the pipeline and prints nothing
            return [c.source for c in cells if c.cell_type == "code"
                    and c.metadata.get("d2l_ext", {}).get("role") != "install"]

        if ran(executed) != ran(book.cells):
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


def write_notebooks(notebooks: dict[Path, nbformat.NotebookNode | str]) -> None:
    """Write all notebooks or none, even if the process is killed half-way (a ``str`` is
    the text of another file written with them: a chapter's GPU record).

    Each notebook goes to a ``.part`` file first. Then a journal (:data:`JOURNAL` in the
    notebooks folder) records the set, the notebooks being replaced are kept as ``.bak``
    hard links, and the ``.part`` files are moved in place. Only when all are in place are
    the journal and the backups removed. A journal found later (the process was killed
    while replacing) means the set is incomplete: :func:`recover` puts the old set back.
    """
    recover()
    parts: dict[Path, Path] = {}
    backups: list[Path] = []
    journal = _journal()
    try:
        for path, nb in notebooks.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            parts[path] = path.with_name(path.name + ".part")
            if isinstance(nb, str):  # a file that travels with the notebooks (a GPU record)
                parts[path].write_text(nb, encoding="utf-8")
            else:
                nbformat.write(nb, parts[path])
        entries = []
        for path, part in parts.items():
            backup = path.with_name(path.name + ".bak")
            backup.unlink(missing_ok=True)
            if path.exists():
                os.link(path, backup)
                backups.append(backup)
            entries.append([str(path), str(part), str(backup) if path.exists() else None])
        journal.parent.mkdir(parents=True, exist_ok=True)
        pending = journal.with_name(journal.name + ".part")
        pending.write_text(json.dumps(entries), encoding="utf-8")
        with _signals_deferred():
            os.replace(pending, journal)  # from here on, a kill is undone by recover()
            for path, part in parts.items():
                os.replace(part, path)
            journal.unlink()
    finally:
        recover()  # a failure while replacing: the old set comes back
        for leftover in [*parts.values(), *backups]:
            leftover.unlink(missing_ok=True)


#: The record of a set of notebooks being replaced (see :func:`write_notebooks`).
JOURNAL = ".replacing.json"


def _journal() -> Path:
    return config.NOTEBOOKS / JOURNAL


def recover() -> list[Path]:
    """Undo a replacement of notebooks that was interrupted (its journal remains): put the
    notebooks it had replaced back from their backups, remove the ones it had added.
    Returns the notebooks restored or removed; nothing to do returns ``[]``."""
    journal = _journal()
    journal.with_name(journal.name + ".part").unlink(missing_ok=True)
    if not journal.exists():
        return []
    undone = []
    for path, part, backup in json.loads(journal.read_text(encoding="utf-8")):
        path, part = Path(path), Path(part)
        if backup and Path(backup).exists():
            os.replace(backup, path)  # (a no-op if path is still the backup's hard link)
            Path(backup).unlink(missing_ok=True)
        elif not backup:
            path.unlink(missing_ok=True)
        part.unlink(missing_ok=True)
        undone.append(path)
    journal.unlink()
    return undone


def _chapters(names: list[str] | None, pages_only: bool = False) -> list[str]:
    """``names``, checked against the book's pages, a chapter followed by its section
    pages (``memory`` is all of that chapter); every page if ``names`` is empty. With
    ``pages_only``, the pages named and no others (``memory`` is that chapter's main page)."""
    from pipeline import toc

    known = chapter_names()
    unknown = sorted(set(names or []) - set(known))
    if unknown:
        raise BookError(f"no chapter named {', '.join(unknown)}; the chapters are: "
                        + ", ".join(known))
    if pages_only and names:
        return list(dict.fromkeys(names))
    return toc.with_section_pages(list(names or known))


class Interrupted(BookError):
    """A run of ``execute`` was stopped (Ctrl-C, SIGTERM); the message says what was written."""


@contextlib.contextmanager
def _sigterm_stops():
    """While the block runs, SIGTERM stops it as Ctrl-C (SIGINT) does: ``KeyboardInterrupt``."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _runs_named(runs: list[tuple[str, str]]) -> str:
    return ", ".join(f"{name} ({framework})" for name, framework in runs) or "none"


def execute_all(names: list[str] | None, frameworks: list[str], smoke: bool,
                log=print, pages_only: bool = False) -> dict[tuple[str, str], float]:
    """Execute chapters (all if ``names`` is empty) for each framework; seconds per run.

    Each run replaces its chapter's notebooks (both languages) when it succeeds. Stopped
    by Ctrl-C or SIGTERM, it raises :class:`Interrupted`, whose one-line message names
    the runs whose notebooks were written and those left unchanged.
    """
    remove_stale_scratch()
    runs = [(name, framework) for name in _chapters(names, pages_only)
            for framework in frameworks]
    seconds = {}
    with _sigterm_stops():
        for done, (name, framework) in enumerate(runs):
            start = time.perf_counter()
            try:
                paths = execute(name, framework, smoke)
            except KeyboardInterrupt:
                raise Interrupted(
                    f"stopped during {name} ({framework}). Notebooks written: "
                    f"{_runs_named(runs[:done])}; unchanged: {_runs_named(runs[done:])}."
                ) from None
            seconds[name, framework] = time.perf_counter() - start
            log(f"executed {name} ({framework}) in {seconds[name, framework]:.0f} s: "
                + ", ".join(shown(p) for p in paths))
    return seconds


def refill_all(names: list[str], frameworks: list[str], log=print,
               pages_only: bool = False) -> None:
    """:func:`refill` the named chapters' notebooks for each framework (``pages_only``: the
    named pages alone, as in :func:`execute_all`)."""
    for name in _chapters(names, pages_only):
        for framework in frameworks:
            log("refilled " + ", ".join(shown(p) for p in refill(name, framework)))
