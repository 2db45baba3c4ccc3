"""The ``{run-times}`NAME``` role: how long a chapter's notebooks ran (its section pages'
included), read from the committed notebooks when the site is built, so that the landing
page never types a run's figures.

For each framework it gives the time from the first cell to the last (the cells' own
timestamps, as the notebooks' run-time cell computes it) and the machine the run named; a
smoke-size run, or one that kept no cell times, says "not recorded".
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat
from docutils import nodes

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pipeline import notebooks, runinfo, toc  # noqa: E402

FRAMEWORK_NAMES = {"torch": "PyTorch", "mxnet": "MXNet"}
NOT_RECORDED = {"en": "not recorded", "zh": "未记录"}
#: Both frameworks on one machine, named once ("…，都在只有 CPU 的机器（AMD EPYC）上").
ON = {"en": "{times}, on {machine}", "zh": "{times}，都在{machine}上"}
#: Each framework with its own machine ("PyTorch 约 1 分钟（仅 CPU，AMD EPYC）").
EACH_ON = {"en": "{times}, on {machine}", "zh": "{times}（{machine}）"}
#: How zh names a machine without a GPU: in a sentence, and in brackets (the run note's
#: "仅 CPU（AMD EPYC）" would put brackets in brackets).
ZH_CPU = {"in a sentence": "只有 CPU 的机器（{cpu}）", "in brackets": "仅 CPU，{cpu}"}
ZH_CPU_NOTE = re.compile(r"^仅 CPU（(.*)）$")
JOIN = {"en": ", ", "zh": "，"}
#: Between the frameworks when each names its machine ("…, on CPU only (Intel…); MXNet…";
#: zh "PyTorch 约 1 分钟（仅 CPU，Intel…），MXNet 不到 1 分钟（仅 CPU，AMD EPYC）").
JOIN_EACH = {"en": "; ", "zh": "，"}


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


def machine_words(machine: str, lang: str, where: str) -> str:
    """The machine as the landing page names it ``where`` ("in a sentence" or "in
    brackets"): the run note's words, but for a zh machine without a GPU."""
    if lang != "zh":
        return machine
    cpu = ZH_CPU_NOTE.match(machine)
    if cpu:
        return ZH_CPU[where].format(cpu=cpu.group(1))
    return f" {machine} " if where == "in a sentence" else machine  # "都在 1 块 H100 上"


def book_machine(root: Path, lang: str) -> str | None:
    """The one machine on which every chapter of ``_toc.yml`` ran, both frameworks, at full
    size; ``None`` when the chapters ran on several, or one recorded no time."""
    toc_file = root / "_toc.yml"
    if not toc_file.exists():
        return None
    try:
        machines = {framework_time(root, lang, name, fw)[1]
                    for name in toc.read(toc_file.read_text(encoding="utf-8"))
                    for fw in FRAMEWORK_NAMES}
    except FileNotFoundError:  # a chapter not executed yet: its own role reports it
        return None
    return machines.pop() if len(machines) == 1 and None not in machines else None


#: The landing page's sentence before the list ({book-machine}): the one machine, named once.
ALL_ON = {"en": "All of them ran on {machine}.", "zh": "以下用时都在{machine}上测得。"}
EACH_NAMED = {"en": "Each chapter names the machine its notebooks ran on.",
              "zh": "每章都注明了运行所在的机器。"}


def book_machine_sentence(root: Path, lang: str) -> str:
    """``All of them ran on CPU only (Intel Xeon).``, or, with several machines, that each
    chapter names its own."""
    machine = book_machine(root, lang)
    if machine is None:
        return EACH_NAMED[lang]
    return ALL_ON[lang].format(machine=machine_words(machine, lang, "in a sentence"))


def run_times(root: Path, lang: str, name: str) -> str:
    """``PyTorch about 22 minutes, MXNet about 5 minutes, on CPU only (AMD EPYC)``: one
    machine named once, or each framework with its own (zh: ``PyTorch 约 1 分钟（仅 CPU，
    Intel…），MXNet 不到 1 分钟（仅 CPU，AMD EPYC）``, and one machine ``…，都在只有 CPU
    的机器（AMD EPYC）上``). Where every chapter ran on one machine (:func:`book_machine`,
    named once before the list), only the times."""
    found = {fw: framework_time(root, lang, name, fw) for fw in FRAMEWORK_NAMES}
    machines = {machine for _, machine in found.values()}
    if len(machines) == 1 and None not in machines:
        times = JOIN[lang].join(f"{FRAMEWORK_NAMES[fw]} {d}" for fw, (d, _) in found.items())
        if machines == {book_machine(root, lang)}:
            return times
        return ON[lang].format(times=times,
                               machine=machine_words(machines.pop(), lang, "in a sentence"))
    parts = []
    for fw, (duration, machine) in found.items():
        said = f"{FRAMEWORK_NAMES[fw]} {duration}"
        parts.append(EACH_ON[lang].format(times=said,
                                           machine=machine_words(machine, lang, "in brackets"))
                     if machine else said)
    return JOIN_EACH[lang].join(parts)


def run_times_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{run-times}`tuning-tips``` → the chapter's run times, in the page's language."""
    config = inliner.document.settings.env.config
    try:
        said = run_times(Path(config.book_root), config.book_lang, text.strip())
    except FileNotFoundError as error:
        message = inliner.reporter.error(str(error), line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    return [nodes.Text(said)], []


def book_machine_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """``{book-machine}`all``` → the sentence that names the machine of every run time below."""
    config = inliner.document.settings.env.config
    try:
        said = book_machine_sentence(Path(config.book_root), config.book_lang)
    except FileNotFoundError as error:
        message = inliner.reporter.error(str(error), line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    return [nodes.Text(said)], []


def setup(app) -> None:
    app.add_role("run-times", run_times_role)
    app.add_role("book-machine", book_machine_role)
