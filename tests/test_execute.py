"""``tools/book.py execute``: one run fills every language; a failed run writes nothing.

These run real (tiny) notebooks in a fresh kernel, in a temporary copy of the book's
folders, so the committed notebooks are never touched.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the book tools need the full environment")
pytest.importorskip("nbclient", reason="the book tools need the full environment")
pytest.importorskip("yaml", reason="the book tools need the full environment")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from pipeline import config, execute, notebooks  # noqa: E402
from pipeline.config import BookError  # noqa: E402

SOURCE = """# {title}

{prose}

:::{{framework}} torch
{answer_is} {{{{answer:.2f}}}}.
:::

:::{{framework}} mxnet
MXNet: {{{{answer:.1f}}}}.
:::

```{{code-cell}} ipython3
answer = 6 * 7  # {comment}
print("answer", answer)
```

```{{code-cell}} ipython3
{last}
```

```{{code-cell}} ipython3
from d2l_ext.utils import message as _message
class d2l:  # stands in for `from d2l_ext import torch as d2l` (faster to import)
    message = staticmethod(_message)
print(d2l.message(en="Correct.", zh="正确。"))
```
"""
TEXT = {"en": dict(title="Demo", prose="Shared text.", answer_is="The answer is",
                   comment="the answer"),
        "zh": dict(title="演示", prose="共同的文字。", answer_is="答案是", comment="答案")}


@pytest.fixture
def book(tmp_path, monkeypatch):
    """An empty book in ``tmp_path``; ``book(last_cell)`` writes chapter ``demo``."""
    monkeypatch.setattr(config, "CHAPTERS", tmp_path / "chapters")
    monkeypatch.setattr(config, "NOTEBOOKS", tmp_path / "notebooks")

    def write(last: str = "print(answer + 1)") -> Path:
        for lang, text in TEXT.items():
            path = tmp_path / "chapters" / lang / "demo.md"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(SOURCE.format(last=last, **text), encoding="utf-8")
        return tmp_path

    return write


def _notebook(root: Path, lang: str) -> nbformat.NotebookNode:
    return nbformat.read(root / "notebooks" / lang / "torch" / "demo.ipynb", 4)


def test_one_run_fills_both_languages(book):
    root = book()
    written = execute.execute("demo", "torch")
    assert sorted(p.relative_to(root).as_posix() for p in written) == [
        "notebooks/en/torch/demo.ipynb", "notebooks/zh/torch/demo.ipynb"]
    en, zh = _notebook(root, "en"), _notebook(root, "zh")
    assert en.metadata["d2l_ext"]["run"] == zh.metadata["d2l_ext"]["run"]
    assert en.metadata["d2l_ext"]["run"]["language"] == "en"
    for nb in (en, zh):  # the kernel's: pages highlight `!cmd` lines as IPython
        assert nb.metadata["language_info"]["pygments_lexer"] == "ipython3"
    for nb, lang in ((en, "en"), (zh, "zh")):
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert code[1].outputs[0]["text"] == "answer 42\n"
        assert code[2].outputs[0]["text"] == "43\n"
        assert code[3].outputs[0]["text"] == {"en": "Correct.\n", "zh": "正确。\n"}[lang]
        assert f'os.environ["D2L_LANG"] = {lang!r}' in code[0].source
        assert TEXT[lang]["comment"] in code[1].source  # each keeps its own comments
        prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        assert f"{TEXT[lang]['answer_is']} 42.00." in prose
        assert "MXNet" not in prose
    assert "real run on" in en.cells[2].source and "真实运行" in zh.cells[2].source  # the note
    # right under the title, before the opening prose (its own cell)
    assert (en.cells[1].source, zh.cells[1].source) == ("# Demo", "# 演示")
    assert en.cells[3].source.startswith("Shared text.")
    assert en.cells[0].metadata["d2l_ext"]["role"] == "run-time"  # under the run time, title
    assert not list(root.rglob("*.part"))


def test_running_again_keeps_the_cell_ids(book):
    """A second run rewrites outputs only: the ids of its cells stay, so that a re-run
    shows in a diff as the outputs that changed, not as every cell of the notebook."""
    root = book()
    execute.execute("demo", "torch")
    first = [c.id for c in _notebook(root, "zh").cells]
    execute.execute("demo", "torch")
    assert [c.id for c in _notebook(root, "zh").cells] == first
    assert len(set(first)) == len(first)
    assert [c.id for c in _notebook(root, "en").cells] == first  # the same in both languages


def test_a_failing_run_leaves_the_committed_notebooks(book):
    root = book()
    execute.execute("demo", "torch")
    before = {lang: (root / "notebooks" / lang / "torch" / "demo.ipynb").read_bytes()
              for lang in ("en", "zh")}
    book("raise RuntimeError('boom')")
    with pytest.raises(BookError, match="committed notebooks are unchanged"):
        execute.execute("demo", "torch")
    for lang, content in before.items():
        assert (root / "notebooks" / lang / "torch" / "demo.ipynb").read_bytes() == content
    assert not list(root.rglob("*.part"))


def test_an_interrupted_run_leaves_the_committed_notebooks(book):
    root = book()
    execute.execute("demo", "torch")
    before = (root / "notebooks" / "zh" / "torch" / "demo.ipynb").read_bytes()
    book("import time\ntime.sleep(60)")
    # Ctrl-C as in a terminal, even where the tests were started in the background (a shell
    # without job control starts background jobs with SIGINT ignored)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(8, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        # nbclient shuts the kernel down on SIGINT, so the error that surfaces varies
        with pytest.raises(BaseException) as stopped:
            execute.execute("demo", "torch")
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert "committed notebooks are unchanged" in " ".join(getattr(stopped.value, "__notes__",
                                                                   []))
    assert (root / "notebooks" / "zh" / "torch" / "demo.ipynb").read_bytes() == before
    assert not list(root.rglob("*.part"))


STOP_RUNNER = """
import signal
import sys
from pathlib import Path
# Ctrl-C as in a terminal, even where the tests were started in the background
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {tools!r})
import book
from pipeline import config
config.CHAPTERS = Path({root!r}) / "chapters"
config.NOTEBOOKS = Path({root!r}) / "notebooks"
book.cli(["execute", "demo"])
"""


def test_ctrl_c_during_execute_says_in_one_line_what_was_written(book, tmp_path):
    """The first framework's run finishes and is written; Ctrl-C stops the second: one
    line names both, the exit status is 130, and no traceback, temporary file or kernel
    connection file is left behind."""
    import subprocess

    marker = tmp_path / "first-run-done"
    root = book(f"import os, time\nif os.path.exists({str(marker)!r}):\n    time.sleep(120)\n"
                f"open({str(marker)!r}, 'w').close()")
    runner = tmp_path / "runner.py"
    runner.write_text(STOP_RUNNER.format(tools=str(ROOT / "tools"), root=str(root)))
    proc = subprocess.Popen([sys.executable, str(runner)], stderr=subprocess.PIPE, text=True)
    try:
        written = root / "notebooks" / "zh" / "torch" / "demo.ipynb"
        for _ in range(1200):  # the second run is under way once the first is written
            if marker.exists() and written.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        time.sleep(3)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 130, err
    assert lines == ["book.py: stopped during demo (mxnet). Notebooks written: demo (torch); "
                     "unchanged: demo (mxnet)."], err
    assert (root / "notebooks" / "zh" / "torch" / "demo.ipynb").exists()
    assert not (root / "notebooks" / "zh" / "mxnet" / "demo.ipynb").exists()
    assert not [p for p in root.rglob("*") if p.suffix in (".part", ".bak")]
    assert not [p for p in execute.SCRATCH.glob(f"{proc.pid}-*")]


def test_the_kernel_keeps_its_files_in_the_runs_scratch_folder(book, monkeypatch):
    """Its working folder and connection file (so that a killed run leaves them where the
    next run removes them, not in the system's temporary folder)."""
    import json

    root = book("import os, sys, json\n"
                "print(json.dumps([os.getcwd(), sys.argv]))")
    execute.execute("demo", "torch")
    code = [c for c in _notebook(root, "en").cells if c.cell_type == "code"]
    cwd, argv = json.loads(code[2].outputs[0]["text"])
    connection = argv[argv.index("-f") + 1]
    scratch = execute.SCRATCH.resolve()
    assert Path(cwd).resolve().is_relative_to(scratch)
    assert Path(connection).resolve().is_relative_to(scratch)
    assert not Path(cwd).exists()  # removed after the run


def test_a_kill_while_replacing_a_set_is_undone(tmp_path, monkeypatch):
    """SIGKILL between two renames leaves a mixed set; the next start puts the old set back."""
    import subprocess

    monkeypatch.setattr(config, "NOTEBOOKS", tmp_path)
    old = {tmp_path / f"{lang}.ipynb": nbformat.v4.new_notebook(metadata={"v": "old"})
           for lang in ("en", "zh")}
    execute.write_notebooks(old)
    script = f"""
import os, sys
from pathlib import Path
sys.path.insert(0, {str(ROOT / "tools")!r})
import nbformat
from pipeline import config, execute
config.NOTEBOOKS = Path({str(tmp_path)!r})
real_replace, count = os.replace, []
def replace(src, dst):  # dies after the journal and the first notebook are in place
    real_replace(src, dst)
    count.append(dst)
    if len(count) == 2:
        os.kill(os.getpid(), 9)
os.replace = replace
execute.write_notebooks({{Path({str(tmp_path)!r}) / f"{{lang}}.ipynb":
                         nbformat.v4.new_notebook(metadata={{"v": "new"}})
                         for lang in ("en", "zh", "fr")}})
"""
    assert subprocess.run([sys.executable, "-c", script]).returncode == -9
    versions = {p.name: nbformat.read(p, 4).metadata["v"] for p in tmp_path.glob("*.ipynb")}
    assert sorted(versions.values()) == ["new", "old"]  # half replaced
    assert sorted(p.name for p in execute.recover()) == ["en.ipynb", "fr.ipynb", "zh.ipynb"]
    assert {p.name: nbformat.read(p, 4).metadata["v"] for p in tmp_path.glob("*.ipynb")} == {
        "en.ipynb": "old", "zh.ipynb": "old"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["en.ipynb", "zh.ipynb"]
    assert execute.recover() == []


def test_scratch_of_a_dead_run_is_removed(tmp_path, monkeypatch):
    import subprocess

    monkeypatch.setattr(execute, "SCRATCH", tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    (tmp_path / f"{dead}-abc" / "runtime").mkdir(parents=True)
    (tmp_path / f"{os.getpid()}-def").mkdir()  # a live run's: kept
    assert [p.name for p in execute.remove_stale_scratch()] == [f"{dead}-abc"]
    assert [p.name for p in tmp_path.iterdir()] == [f"{os.getpid()}-def"]


def test_unknown_chapter_names_the_known_ones(book):
    book()
    with pytest.raises(BookError, match="no chapter named nope; the chapters are: demo"):
        execute.execute_all(["nope"], ["torch"], smoke=True)


def test_write_notebooks_writes_all_or_nothing(tmp_path):
    good = nbformat.v4.new_notebook()
    bad = nbformat.v4.new_notebook()
    bad.cells.append(object())  # cannot be serialised
    (tmp_path / "a.ipynb").write_text("old a", encoding="utf-8")
    with pytest.raises(TypeError):
        execute.write_notebooks({tmp_path / "a.ipynb": good, tmp_path / "b.ipynb": bad})
    assert (tmp_path / "a.ipynb").read_text(encoding="utf-8") == "old a"
    assert not (tmp_path / "b.ipynb").exists()
    assert not list(tmp_path.glob("*.part"))


def test_refill_rewrites_the_prose_and_keeps_the_run(book):
    """A change of prose only: refill puts the new text in, with the values and outputs of
    the earlier run, without running anything."""
    root = book()
    execute.execute("demo", "torch")
    ran = {lang: _notebook(root, lang) for lang in ("en", "zh")}
    for lang, text in (("en", "Shared text, reworded."), ("zh", "改写过的共同文字。")):
        path = root / "chapters" / lang / "demo.md"
        old = TEXT[lang]["prose"]
        path.write_text(path.read_text(encoding="utf-8").replace(old, text), encoding="utf-8")
    execute.refill("demo", "torch")
    for lang, text in (("en", "Shared text, reworded."), ("zh", "改写过的共同文字。")):
        nb = _notebook(root, lang)
        prose = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        assert text in prose and f"{TEXT[lang]['answer_is']} 42.00." in prose
        for key in ("run", "values"):
            assert nb.metadata["d2l_ext"][key] == ran[lang].metadata["d2l_ext"][key]
        assert [c.outputs for c in nb.cells if c.cell_type == "code"] == [
            c.outputs for c in ran[lang].cells if c.cell_type == "code"]
        assert nb.cells[2].source == ran[lang].cells[2].source  # the run note
        assert nb.cells[0].source == ran[lang].cells[0].source  # the run time, from the run
    # the new prose is what the notebooks now hold (only the torch demo ran)
    assert [p for p in notebooks.stale() if "/torch/" in p] == []
    assert not list(root.rglob("*.part"))


@pytest.mark.parametrize("change, refusal", [
    (("print(answer + 1)", "print(answer + 2)"), "code of .* changed since"),
    (("{{answer:.2f}}", "{{answer:.3f}}"), "did not record"),
])
def test_refill_refuses_what_needs_a_new_run(book, change, refusal):
    root = book()
    execute.execute("demo", "torch")
    before = {lang: (root / "notebooks" / lang / "torch" / "demo.ipynb").read_bytes()
              for lang in ("en", "zh")}
    for lang in ("en", "zh"):
        path = root / "chapters" / lang / "demo.md"
        path.write_text(path.read_text(encoding="utf-8").replace(*change), encoding="utf-8")
    with pytest.raises(BookError, match=refusal + ".*tools/book.py execute"):
        execute.refill("demo", "torch")
    for lang, content in before.items():
        assert (root / "notebooks" / lang / "torch" / "demo.ipynb").read_bytes() == content


def test_a_page_has_unique_cell_ids_when_a_shared_cell_splits_into_tabs(book):
    """A shared cell whose outputs differ between frameworks shows once per framework (as
    tabs); the page's copies must not share an id, or nbformat rejects the page."""
    from pipeline import pages, sources

    root = book()
    for framework in ("torch", "mxnet"):
        execute.execute("demo", framework)
    path = root / "notebooks" / "en" / "mxnet" / "demo.ipynb"
    nb = nbformat.read(path, 4)
    shared = next(c for c in nb.cells if c.cell_type == "code" and "answer = 6 * 7" in c.source)
    shared.outputs[0]["text"] = "answer 41\n"  # as if MXNet had printed something else
    nbformat.write(nb, path)
    page = pages.merge(sources.parse(root / "chapters" / "en" / "demo.md"))
    ids = [c.id for c in page.cells]
    assert len(ids) == len(set(ids))
    tabs = [c for c in page.cells if "answer = 6 * 7" in c.get("source", "")]
    assert [c.metadata["tags"][0] for c in tabs] == ["torch", "mxnet"]
    nbformat.validate(page)


LOCALIZED = """# {title}

:::{{framework}} torch
{says} {{{{verdict}}}}.
:::

:::{{framework}} mxnet
{says} {{{{verdict}}}}.
:::

```{{code-cell}} ipython3
%matplotlib inline
import matplotlib.pyplot as plt
from d2l_ext.utils import label, message, show, text_table
verdict = message(en="faster", zh="更快")
print(message(en=f"the run was {{verdict}}", zh=f"这次运行{{verdict}}"))
print(text_table([message(en="rung", zh="阶梯")], [[verdict]], [""], left=1))
show(text_table([message(en="rung", zh="阶梯")], [[verdict]], [""], left=1))
```

```{{code-cell}} ipython3
fig, ax = plt.subplots(figsize=(2, 1))
ax.set_xlabel(label(en="epoch", zh="轮次"))
plt.show()
```
"""


def test_one_english_run_gives_the_chinese_edition_its_texts_values_and_figures(
        tmp_path, monkeypatch):
    """Texts printed through message (tables too), values cited from a message and figures
    labelled through label are Chinese in the zh notebook, English in the en one, from the
    one run; the Chinese renderings do not stay in the metadata."""
    from d2l_ext import i18n

    if i18n.cjk_font() is None:
        pytest.skip("no Chinese font (apt-get install fonts-wqy-microhei)")
    monkeypatch.setattr(config, "CHAPTERS", tmp_path / "chapters")
    monkeypatch.setattr(config, "NOTEBOOKS", tmp_path / "notebooks")
    for lang, title, says in (("en", "Demo", "It was"), ("zh", "演示", "它")):
        path = tmp_path / "chapters" / lang / "demo.md"
        path.parent.mkdir(parents=True)
        path.write_text(LOCALIZED.format(title=title, says=says), encoding="utf-8")
    execute.execute("demo", "torch")
    en, zh = _notebook(tmp_path, "en"), _notebook(tmp_path, "zh")

    def texts(nb):
        code = [c for c in nb.cells if c.cell_type == "code"]
        return "".join(o.get("text", "") for o in code[1].outputs)

    assert texts(en) == "the run was faster\nrung  \nfaster\n"
    assert texts(zh) == "这次运行更快\n阶梯\n更快\n"

    def shown(nb):  # the table that show() displayed: its HTML and its text
        code = [c for c in nb.cells if c.cell_type == "code"]
        return [(o.data["text/html"], o.data["text/plain"]) for o in code[1].outputs
                if o.output_type == "display_data"]

    left = '<th style="text-align: left">'
    assert shown(en) == [(f'<table class="d2l-table">\n<thead><tr>{left}rung</th></tr></thead>'
                          '\n<tbody>\n<tr><td style="text-align: left">faster</td></tr>\n'
                          '</tbody>\n</table>', "rung  \nfaster")]
    assert shown(zh) == [(shown(en)[0][0].replace("rung", "阶梯").replace("faster", "更快"),
                          "阶梯\n更快")]
    prose = {lang: "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
             for lang, nb in (("en", en), ("zh", zh))}
    assert "It was faster." in prose["en"] and "它 更快." in prose["zh"]
    figures = [[o for o in [c for c in nb.cells if c.cell_type == "code"][2].outputs
                if "image/png" in o.get("data", {})] for nb in (en, zh)]
    assert len(figures[0]) == len(figures[1]) == 1
    assert figures[0][0]["data"]["image/png"] != figures[1][0]["data"]["image/png"]
    for nb in (en, zh):
        for cell in nb.cells:
            for output in cell.get("outputs", []):
                assert "d2l_ext" not in output.get("metadata", {})


def test_the_chinese_replaces_whole_words_once_longest_first():
    """A recorded "min" is not replaced inside "deterministic"; the longest recorded text
    wins where two overlap."""
    import nbformat
    from pipeline.execute import cell_key, localized

    cell = nbformat.v4.new_code_cell("print(table)")
    cell.outputs = [nbformat.v4.new_output(
        "stream", name="stdout", text="epoch  min  max\ndeterministic: min x\n")]
    texts = {cell_key(cell.source): [("min", "最小"), ("max", "最大"), ("min x", "x 的最小值")]}
    zh = localized(cell, "zh", texts)
    assert zh.outputs[0]["text"] == "epoch  最小  最大\ndeterministic: x 的最小值\n"
    assert localized(cell, "en", texts).outputs[0]["text"] == cell.outputs[0]["text"]


def test_the_chinese_edition_gets_the_chinese_html_of_a_table(tmp_path, monkeypatch):
    """A table shown as HTML (d2l.show) while the run was captured: the zh notebook shows
    the Chinese HTML table and the Chinese text under it; the English stays as it was."""
    from pipeline.execute import cell_key, localized, recorded

    from d2l_ext import i18n
    from d2l_ext.utils import message, text_table

    def table():
        return text_table([message(en="how < when", zh="方式"), "ms"],
                          [[message(en="R&D", zh="研发"), 1.5]], ["", ".1f"], left=1)

    cell = nbformat.v4.new_code_cell("d2l.show(table)")
    monkeypatch.setenv("D2L_CAPTURE", str(tmp_path))
    monkeypatch.setattr(i18n, "_running", cell_key(cell.source))
    english = table()
    monkeypatch.delenv("D2L_CAPTURE")
    monkeypatch.setenv("D2L_LANG", "zh")
    chinese = table()
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        "text/plain": str(english), "text/html": english._repr_html_()})]
    zh = localized(cell, "zh", recorded(tmp_path)).outputs[0]["data"]
    assert "how &lt; when" in english._repr_html_() and "R&amp;D" in english._repr_html_()
    assert zh == {"text/plain": str(chinese), "text/html": chinese._repr_html_()}
    assert "<th" in zh["text/html"] and "研发" in zh["text/html"]
    en = localized(cell, "en", recorded(tmp_path)).outputs[0]["data"]
    assert en == cell.outputs[0]["data"]


def test_html_outputs_translate_texts_between_tags_only():
    """A recorded text is replaced in an HTML output as HTML escapes it, and never inside a
    tag: a message "left" leaves ``text-align: left`` alone."""
    from pipeline.execute import cell_key, localized

    cell = nbformat.v4.new_code_cell("display(HTML(page))")
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        "text/html": '<p style="text-align: left">left: a &lt; b</p>'})]
    texts = {cell_key(cell.source): [("left", "左"), ("a < b", "a 小于 b")]}
    zh = localized(cell, "zh", texts).outputs[0]["data"]["text/html"]
    assert zh == '<p style="text-align: left">左: a 小于 b</p>'


MERGED = """# Demo

Shared prose.

:::{framework} torch
PyTorch: {{answer:.2f}}.
:::

:::{framework} mxnet
MXNet: {{answer:.1f}}.
:::

```{code-cell} ipython3
print("same")
```

```{code-cell} ipython3
:tags: [torch]
print("torch")
```

```{code-cell} ipython3
:tags: [mxnet]
print("mxnet")
```

```{code-cell} ipython3
print(framework)
```
"""
RUN = dict(gpus=0, cpu="Test CPU", framework="Framework 1.0", python="3.11", date="2026-01-01",
           size="smoke")


def _executed_by_hand(chapter, framework: str, values: dict[str, str]) -> None:
    """Write ``chapter``'s notebook for ``framework`` as an execution would, without running
    it: each code cell prints what its code says, ``framework`` being the framework."""
    from pipeline import notebooks as notebooks_module

    nb = notebooks_module.split(chapter, framework)
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.startswith("print("):
            text = cell.source[7:-2] if '"' in cell.source else framework
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text + "\n")]
    nb.metadata["d2l_ext"].update(values=values, run=RUN)
    path = notebooks_module.notebook_path(chapter, framework)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def test_a_page_keeps_every_cell_once_or_once_per_framework(tmp_path, monkeypatch):
    """Prose with each framework's values, the run notes, a shared cell with the same
    outputs once (no tabs), each framework's own cell tagged, and a shared cell whose
    outputs differ once per framework."""
    from pipeline import pages, sources

    monkeypatch.setattr(config, "NOTEBOOKS", tmp_path / "notebooks")
    path = tmp_path / "chapters" / "en" / "demo.md"
    path.parent.mkdir(parents=True)
    path.write_text(MERGED, encoding="utf-8")
    chapter = sources.parse(path)
    _executed_by_hand(chapter, "torch", {"{{answer:.2f}}": "42.00"})
    _executed_by_hand(chapter, "mxnet", {"{{answer:.1f}}": "42.0"})
    page = pages.merge(chapter)
    shown = [(c.cell_type, c.metadata.get("tags", []),
              "".join(o.get("text", "") for o in c.get("outputs", []))) for c in page.cells]
    assert shown == [("markdown", [], ""), ("markdown", [], ""), ("markdown", [], ""),
                     ("code", [], "same\n"),
                     ("code", ["torch"], "torch\n"), ("code", ["mxnet"], "mxnet\n"),
                     ("code", ["torch"], "torch\n"), ("code", ["mxnet"], "mxnet\n")]
    # the title alone, right under it the run notes, then the chapter's opening prose
    title, notes, prose = (c.source for c in page.cells[:3])
    assert title == "# Demo"
    assert "Shared prose." in prose
    assert "::::{container} fw fw-torch\nPyTorch: 42.00.\n::::" in prose
    assert "::::{container} fw fw-mxnet\nMXNet: 42.0.\n::::" in prose
    assert notes.count("CPU only (Test CPU)") == 2
    nbformat.validate(page)


def test_refill_all_refills_every_chapter_for_every_framework(tmp_path, monkeypatch):
    """No names: every chapter (not the index) for each framework; names: only those;
    an unknown name: an error naming the chapters, before anything is refilled."""
    monkeypatch.setattr(config, "CHAPTERS", tmp_path / "chapters")
    (tmp_path / "chapters" / "en").mkdir(parents=True)
    for name in ("index", "one", "two"):
        (tmp_path / "chapters" / "en" / f"{name}.md").write_text("# T\n", encoding="utf-8")
    done, lines = [], []
    monkeypatch.setattr(execute, "refill", lambda name, framework: done.append(
        (name, framework)) or [config.ROOT / "notebooks" / f"{name}-{framework}.ipynb"])
    execute.refill_all([], ["torch", "mxnet"], log=lines.append)
    assert done == [("one", "torch"), ("one", "mxnet"), ("two", "torch"), ("two", "mxnet")]
    assert lines[0] == "refilled notebooks/one-torch.ipynb" and len(lines) == 4
    done.clear()
    execute.refill_all(["two"], ["mxnet"], log=lines.append)
    assert done == [("two", "mxnet")]
    with pytest.raises(BookError, match="no chapter named three; the chapters are: one, two"):
        execute.refill_all(["two", "three"], ["torch"], log=lines.append)
    assert done == [("two", "mxnet")]


def test_refill_takes_a_new_first_cell_without_running_again(book, monkeypatch):
    """The install cell is the pipeline's own and prints nothing: a change to it (a comment,
    the package's address) needs no new run; a change to any other code still does."""
    from pipeline import notebooks as nb_module

    root = book()
    execute.execute("demo", "torch")
    original = nb_module.install_cell

    def changed(framework, lang):
        cell = original(framework, lang)
        cell.source = cell.source.replace("import os", "import os  # changed")
        return cell

    monkeypatch.setattr(nb_module, "install_cell", changed)
    execute.refill("demo", "torch")
    for lang in ("en", "zh"):
        first = next(c for c in _notebook(root, lang).cells if c.cell_type == "code")
        assert first.metadata["d2l_ext"]["role"] == "install" and "# changed" in first.source
    book("print(answer + 2)")  # other code: refill refuses
    with pytest.raises(BookError, match="changed since"):
        execute.refill("demo", "torch")


def test_adjacent_printed_lines_are_one_output():
    """merged_streams: adjacent stream outputs of one name become one (a loop's lines are one
    block on the page, not a box per line); another stream's name or a figure between them
    keeps them apart, and the order stays."""
    new = nbformat.v4.new_output
    outputs = [new("stream", name="stdout", text="round 1/3\n"),
               new("stream", name="stdout", text="round 2/3\n"),
               new("stream", name="stderr", text="warning\n"),
               new("stream", name="stdout", text="round 3/3\n"),
               new("display_data", data={"text/plain": "<Figure>"}),
               new("stream", name="stdout", text="after\n"),
               new("stream", name="stdout", text="the figure\n")]
    before = [dict(o) for o in outputs]
    merged = notebooks.merged_streams(outputs)
    assert [(o.output_type, o.get("name"), o.get("text")) for o in merged] == [
        ("stream", "stdout", "round 1/3\nround 2/3\n"), ("stream", "stderr", "warning\n"),
        ("stream", "stdout", "round 3/3\n"), ("display_data", None, None),
        ("stream", "stdout", "after\nthe figure\n")]
    assert [dict(o) for o in outputs] == before  # the outputs given are left as they were
    assert notebooks.merged_streams([]) == []


def test_a_cell_that_prints_in_several_messages_shows_one_output(book):
    """The kernel sends a loop's lines in several messages (a flush, a pause): execute writes
    them as one output; refill joins them in a notebook executed before the pipeline did."""
    root = book('import time\nfor k in (1, 2):\n    print(f"round {k}/2", flush=True)\n'
                '    time.sleep(0.3)')
    execute.execute("demo", "torch")
    for lang in ("en", "zh"):
        code = [c for c in _notebook(root, lang).cells if c.cell_type == "code"]
        assert [(o.output_type, o.name, o.text) for o in code[2].outputs] == [
            ("stream", "stdout", "round 1/2\nround 2/2\n")]
    path = root / "notebooks" / "en" / "torch" / "demo.ipynb"
    old = nbformat.read(path, 4)  # as an earlier pipeline wrote it: a stream per message
    cell = [c for c in old.cells if c.cell_type == "code"][2]
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=line)
                    for line in ("round 1/2\n", "round 2/2\n")]
    nbformat.write(old, path)
    execute.refill("demo", "torch")
    code = [c for c in _notebook(root, "en").cells if c.cell_type == "code"]
    assert [(o.output_type, o.name, o.text) for o in code[2].outputs] == [
        ("stream", "stdout", "round 1/2\nround 2/2\n")]
