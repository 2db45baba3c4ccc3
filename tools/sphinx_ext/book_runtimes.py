"""The ``{run-times}`NAME``` role: how long a chapter's notebooks ran (its section pages'
included), read from the committed notebooks when the site is built, so that the landing
page never types a run's figures.

For each framework it gives the time from the first cell to the last (the cells' own
timestamps, as the notebooks' run-time cell computes it) and the machine the run named; a
smoke-size run, or one that kept no cell times, says "not recorded".
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from docutils import nodes

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pipeline import notebooks, runinfo, toc  # noqa: E402

FRAMEWORK_NAMES = {"torch": "PyTorch", "mxnet": "MXNet"}
NOT_RECORDED = {"en": "not recorded", "zh": "未记录"}
ON = {"en": "{times}, on {machine}", "zh": "{times}；机器：{machine}"}
JOIN = {"en": ", ", "zh": "，"}


def _page_time(root: Path, lang: str, page: str, framework: str) -> tuple[float, str] | None:
    """How long one notebook ran and the machine it ran on; ``None`` when no full-size run
    recorded its time."""
    path = root / "notebooks" / lang / framework / f"{page}.ipynb"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no executed notebook for the page {page!r} "
                                "(run `python tools/book.py execute` first)")
    nb = nbformat.read(path, as_version=4)
    run = nb.metadata.get("d2l_ext", {}).get("run", {})
    seconds = notebooks.run_seconds(nb.cells, run)
    if seconds is None or run.get("size") != "full":
        return None
    return seconds, runinfo.machine_name(run, lang)


def framework_time(root: Path, lang: str, name: str, framework: str) -> tuple[str, str | None]:
    """The duration of chapter ``name``'s notebooks of ``framework`` (its section pages' too,
    added up) in ``lang``'s words and the machine they ran on (``None`` unless every page
    has a full-size run, all on the same machine)."""
    toc_file = root / "_toc.yml"
    chapters = toc.read(toc_file.read_text(encoding="utf-8")) if toc_file.exists() else {}
    found = [_page_time(root, lang, page, framework) for page in chapters.get(name, [name])]
    machines = {page[1] for page in found if page is not None}
    if None in found or len(machines) != 1:
        return NOT_RECORDED[lang], None
    return notebooks._duration(sum(seconds for seconds, _ in found), lang), machines.pop()


def run_times(root: Path, lang: str, name: str) -> str:
    """``PyTorch about 22 minutes, MXNet about 5 minutes, on CPU only (AMD EPYC)``: one
    machine named once, or each framework with its own."""
    found = {fw: framework_time(root, lang, name, fw) for fw in FRAMEWORK_NAMES}
    machines = {machine for _, machine in found.values()}
    if len(machines) == 1 and None not in machines:
        times = JOIN[lang].join(f"{FRAMEWORK_NAMES[fw]} {d}" for fw, (d, _) in found.items())
        return ON[lang].format(times=times, machine=machines.pop())
    parts = []
    for fw, (duration, machine) in found.items():
        said = f"{FRAMEWORK_NAMES[fw]} {duration}"
        parts.append(ON[lang].format(times=said, machine=machine) if machine else said)
    return ("; " if lang == "en" else "；").join(parts)


def run_times_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{run-times}`tuning-tips``` → the chapter's run times, in the page's language."""
    config = inliner.document.settings.env.config
    try:
        said = run_times(Path(config.book_root), config.book_lang, text.strip())
    except FileNotFoundError as error:
        message = inliner.reporter.error(str(error), line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    return [nodes.Text(said)], []


def setup(app) -> None:
    app.add_role("run-times", run_times_role)
