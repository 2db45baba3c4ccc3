"""Figures: numbered per chapter, captioned and with alt text in the page's language.

A drawn figure (a code cell's plot) gets its caption from a ``{drawn-figure}`` block right
after the cell, once per language; the pipeline makes it a numbered figure on the page
(``pages.py``) and a numbered caption line in the notebooks (``plain.py``). Each framework
tab numbers its own figures and the shared ones, per chapter over its pages, without gaps:
the notebooks by their framework (``plain.figure_numbers``), the site with each tab's
number on every label (the Sphinx extension ``book_figures.py``; book.js shows the selected
tab's). The built site is checked in tests/test_site.py."""

import base64
import re
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the book tools need the full environment")
pytest.importorskip("yaml", reason="the book tools need the full environment")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tools" / "sphinx_ext"))
import book_figures  # noqa: E402
from pipeline import config, notebooks, pages, plain, sources  # noqa: E402

CAPTIONS = {
    "en": {"loss": "The loss over {{len(losses)}} steps, `d2l.plot`'s curve.",
           "speed": "Images per second of each framework.",
           "shared": "Both frameworks' $k$ curves."},
    "zh": {"loss": "{{len(losses)}} 步中的损失，即 `d2l.plot` 画出的曲线。",
           "speed": "两个框架每秒处理的图像数。",
           "shared": "两个框架的 $k$ 条曲线。"},
}


def _chapter(lang: str) -> str:
    """A tiny chapter: a static figure per framework (one number), a PyTorch cell and an MXNet
    cell that draw the same figure (one number), and a shared cell that draws in both."""
    c = CAPTIONS[lang]
    return f"""# Demo {lang}

:::{{framework}} torch
```{{figure}} img/a.svg
:name: fig-engine-torch
:alt: alt {lang}

Static, PyTorch.
```
:::

:::{{framework}} mxnet
```{{figure}} img/b.svg
:name: fig-engine-mxnet
:alt: alt {lang}

Static, MXNet.
```
:::

```{{code-cell}} ipython3
:tags: [torch]
losses = [1, 2, 3]  # {'three' if lang == 'en' else '三个'}
```

:::{{drawn-figure}} fig-loss
{c["loss"]}
:::

Prose after the PyTorch figure.

```{{code-cell}} ipython3
:tags: [mxnet]
losses = [3, 2]
```

:::{{drawn-figure}} fig-loss
:alt: {'A falling line.' if lang == 'en' else '一条下降的线。'}
{c["loss"]}
:::

```{{code-cell}} ipython3
speed = 1
```

:::{{drawn-figure}} fig-speed
{c["speed"]}
:::

## Section

```{{code-cell}} ipython3
shared = 2
```

:::{{drawn-figure}} fig-shared
{c["shared"]}
:::
"""


@pytest.fixture
def book(tmp_path, monkeypatch):
    """The tiny chapter in both languages, second in a reading order of two chapters."""
    for lang in ("en", "zh"):
        (tmp_path / "chapters" / lang).mkdir(parents=True)
        (tmp_path / "chapters" / lang / "demo.md").write_text(_chapter(lang), encoding="utf-8")
    (tmp_path / "_toc.yml").write_text(
        "format: jb-book\nroot: index\nchapters:\n  - file: chapters/other\n"
        "  - file: chapters/demo\n", encoding="utf-8")
    (tmp_path / "_config.yml").write_text((ROOT / "_config.yml").read_text(encoding="utf-8"),
                                          encoding="utf-8")
    monkeypatch.setattr(config, "CHAPTERS", tmp_path / "chapters")
    monkeypatch.setattr(config, "ROOT", tmp_path)
    monkeypatch.setattr(config, "NOTEBOOKS", tmp_path / "notebooks")
    return tmp_path


def _editions():
    return {lang: sources.parse(config.CHAPTERS / lang / "demo.md") for lang in ("en", "zh")}


def test_captions_attach_to_the_cell_above_and_may_differ_by_language(book):
    versions = _editions()
    sources.check_same_code(versions)  # captions are prose: the code is still the same
    for chapter in versions.values():
        assert sources.check_figures(chapter) == []
        assert sources.check_values(chapter) == []
    en, zh = (sources.drawn_figures(v) for v in versions.values())
    assert sorted(en) == sorted(zh)
    assert [f.name for f in en.values()] == ["fig-loss", "fig-loss", "fig-speed", "fig-shared"]
    assert [versions["en"].cells[i].framework for i in en] == ["torch", "mxnet", None, None]
    assert zh[min(zh)].caption == CAPTIONS["zh"]["loss"]
    mxnet_loss = en[sorted(en)[1]]
    assert mxnet_loss.alt == "A falling line."
    assert en[max(en)].alt_text({}) == "Both frameworks' k curves."  # the caption, plain


def test_misplaced_unnamed_and_clashing_captions_are_reported(book):
    src = config.CHAPTERS / "en" / "demo.md"
    text = src.read_text(encoding="utf-8")
    src.write_text(text.replace("Prose after the PyTorch figure.",
                                "Prose.\n\n:::{drawn-figure} fig-late\nLate.\n:::")
                   .replace("drawn-figure} fig-speed", "drawn-figure} Fig_Speed")
                   .replace("drawn-figure} fig-shared", "drawn-figure} fig-engine-torch"),
                   encoding="utf-8")
    problems = "\n".join(sources.check_figures(sources.parse(src)))
    assert "fig-late must come right after the code cell" in problems
    assert "'Fig_Speed': name it fig-..." in problems
    assert "two figures are named fig-engine-torch" in problems
    assert "fig-loss" not in problems  # a PyTorch and an MXNet cell may share a name


def test_a_caption_cites_its_frameworks_values(book):
    src = config.CHAPTERS / "en" / "demo.md"
    src.write_text(src.read_text(encoding="utf-8").replace(
        CAPTIONS["en"]["speed"], "Speed {{speed}}, {{losses[0]}} and {{unbound}}."),
        encoding="utf-8")
    problems = sources.check_values(sources.parse(src))
    assert len(problems) == 2 and all("reads unbound" in p for p in problems)  # per framework


def test_numbers_follow_the_reading_order_per_framework(book):
    """The tiny chapter shows each tab four figures: its static figure, its copy of the loss
    figure and the two shared ones; a {numref} to the other framework's copy of a figure
    gets this framework's copy's number."""
    assert plain.chapter_numbers() == {"other": 1, "demo": 2}
    for lang in ("en", "zh"):
        for framework in ("torch", "mxnet"):
            assert plain.figure_numbers(lang, framework) == {
                "fig-engine-torch": "2.1", "fig-engine-mxnet": "2.1", "fig-loss": "2.2",
                "fig-speed": "2.3", "fig-shared": "2.4"}


def test_a_chapters_section_pages_continue_its_figure_numbers(book):
    """A section page shares its chapter's number, and its figures go on counting after the
    figures of the pages before it; a chapter after it starts again at 1."""
    for lang in ("en", "zh"):
        (book / "chapters" / lang / "demo-more.md").write_text(
            "# More\n\n```{code-cell} ipython3\nmore = 1\n```\n\n"
            ":::{drawn-figure} fig-more\nMore.\n:::\n", encoding="utf-8")
        (book / "chapters" / lang / "last.md").write_text(
            "# Last\n\n```{code-cell} ipython3\nlast = 1\n```\n\n"
            ":::{drawn-figure} fig-last\nLast.\n:::\n", encoding="utf-8")
    (book / "_toc.yml").write_text(
        "format: jb-book\nroot: index\nchapters:\n  - file: chapters/other\n"
        "  - file: chapters/demo\n    sections:\n      - file: chapters/demo-more\n"
        "  - file: chapters/last\n", encoding="utf-8")
    assert plain.chapter_numbers() == {"other": 1, "demo": 2, "demo-more": 2, "last": 3}
    for lang in ("en", "zh"):
        for framework in ("torch", "mxnet"):
            numbers = plain.figure_numbers(lang, framework)
            assert (numbers["fig-shared"], numbers["fig-more"], numbers["fig-last"]) == \
                ("2.4", "2.5", "3.1")


def _cell(name: str, tag: str | None) -> str:
    tags = f":tags: [{tag}]\n" if tag else ""
    return (f"```{{code-cell}} ipython3\n{tags}x = 1\n```\n\n"
            f":::{{drawn-figure}} {name}\nCaption of {name}.\n:::\n\nProse.\n\n")


def _static(name: str) -> str:
    return f"```{{figure}} img/{name}.svg\n:name: {name}\n\nCaption of {name}.\n```\n"


#: A chapter and its section page with figures of PyTorch only, of MXNet only and shared, in
#: this order: main page: T1, M1, M2 (a static figure in an MXNet block), S1, T2+M3 (a
#: PyTorch and an MXNet cell drawing the same figure); section page: M4, T3, S2.
GAPS = {
    "gaps": "# Gaps\n\n" + _cell("fig-t1", "torch") + _cell("fig-m1", "mxnet")
    + f":::{{framework}} mxnet\n{_static('fig-m2')}:::\n\n" + _cell("fig-s1", None)
    + _cell("fig-both", "torch") + _cell("fig-both", "mxnet") + "{numref}`fig-both`\n",
    "gaps-more": "# More gaps\n\n" + _cell("fig-m4", "mxnet") + _cell("fig-t3", "torch")
    + _cell("fig-s2", None),
}
#: What the reader of each tab sees: its figures and the shared ones, numbered in turn.
GAPS_NUMBERS = {
    "torch": {"fig-t1": "2.1", "fig-s1": "2.2", "fig-both": "2.3", "fig-t3": "2.4",
              "fig-s2": "2.5"},
    "mxnet": {"fig-m1": "2.1", "fig-m2": "2.2", "fig-s1": "2.3", "fig-both": "2.4",
              "fig-m4": "2.5", "fig-s2": "2.6"},
}


def test_each_framework_numbers_its_own_and_the_shared_figures_without_gaps(book):
    """A tab's reader sees Figure 2.1, 2.2, ... over the chapter's pages: the other
    framework's figures leave no gap; the notebooks' captions carry the same numbers."""
    for lang in ("en", "zh"):
        for name, text in GAPS.items():
            (book / "chapters" / lang / f"{name}.md").write_text(text, encoding="utf-8")
    (book / "_toc.yml").write_text(
        "format: jb-book\nroot: index\nchapters:\n  - file: chapters/other\n"
        "  - file: chapters/gaps\n    sections:\n      - file: chapters/gaps-more\n",
        encoding="utf-8")
    label = {"en": "Figure", "zh": "图"}
    for lang in ("en", "zh"):
        for framework, want in GAPS_NUMBERS.items():
            assert plain.figure_numbers(lang, framework) == want
            ctx = plain.Context(lang, plain.targets(lang), "https://example.org/book/",
                                plain.figure_numbers(lang, framework))
            shown = {}
            for name in GAPS:
                nb = notebooks.split(sources.parse(config.CHAPTERS / lang / f"{name}.md"),
                                     framework)
                prose = "\n\n".join(plain.plain(c.source, ctx) for c in nb.cells
                                     if c.cell_type == "markdown")
                shown.update(re.findall(rf"\*\*{label[lang]} (\d\.\d)\*\*.{{1,2}}Caption of "
                                        r"(fig-[a-z0-9]+)", prose))
                if name == "gaps":  # a reference shows this framework's number too
                    assert f"[{label[lang]} {want['fig-both']}](" in prose
            assert {fig: number for number, fig in shown.items()} == want


def test_the_notebooks_captions_carry_the_number_in_their_language(book):
    for lang, label, colon in (("en", "Figure", ": "), ("zh", "图", "：")):
        chapter = _editions()[lang]
        for framework, figures in (("torch", ["2.1", "2.2", "2.3", "2.4"]),
                                   ("mxnet", ["2.1", "2.2", "2.3", "2.4"])):
            ctx = plain.Context(lang, plain.targets(lang), "https://example.org/book/",
                                plain.figure_numbers(lang, framework))
            nb = notebooks.split(chapter, framework)
            prose = "\n\n".join(plain.plain(sources.fill(c.source, {"{{len(losses)}}": "3"}), ctx)
                                for c in nb.cells if c.cell_type == "markdown")
            captions = [line for line in prose.split("\n") if line.startswith(f"**{label} ")]
            assert [c.split("**")[1].split()[1] for c in captions] == figures, prose
            loss = CAPTIONS[lang]["loss"].replace("{{len(losses)}}", "3")
            assert captions.count(f"**{label} 2.2**{colon}{loss}") == 1  # not the other's
            assert "drawn-figure" not in prose


def _executed(chapter, framework: str) -> nbformat.NotebookNode:
    """The split notebook with a figure as the output of every code cell: the same in both
    frameworks' runs but for the cell that binds ``shared``."""
    nb = notebooks.split(chapter, framework)
    for cell in nb.cells:
        if cell.cell_type == "code":
            drawn = b"PNG " + (framework.encode() if "shared" in cell.source else b"")
            png = base64.b64encode(drawn).decode()
            cell.outputs = [nbformat.v4.new_output(
                "display_data", data={"image/png": png, "text/plain": "<Figure>"})]
    nb.metadata["d2l_ext"].update(run={}, values={"{{len(losses)}}": str(
        3 if framework == "torch" else 2)})
    return nb


def test_the_page_makes_each_drawn_figure_a_captioned_figure(book, monkeypatch):
    monkeypatch.setattr(pages, "run_note", lambda run, lang: "> run note")
    for lang in ("en", "zh"):
        chapter = _editions()[lang]
        for framework in ("torch", "mxnet"):
            path = notebooks.notebook_path(chapter, framework)
            path.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(_executed(chapter, framework), path)
        page = pages.merge(chapter)
        figures = [(c.metadata.get("tags", [None])[0], c.metadata["mystnb"])
                   for c in page.cells if "mystnb" in c.metadata]
        names = [(fw, m["figure"]["name"]) for fw, m in figures]
        assert names == [("torch", "fig-loss"), ("mxnet", "fig-loss-mxnet"),
                         (None, "fig-speed"),  # the same output in both runs: shown once
                         ("torch", "fig-shared"), ("mxnet", "fig-shared-mxnet")]
        loss = CAPTIONS[lang]["loss"]
        assert figures[0][1]["figure"]["caption"] == loss.replace("{{len(losses)}}", "3")
        assert figures[1][1]["figure"]["caption"] == loss.replace("{{len(losses)}}", "2")
        assert figures[0][1]["image"]["alt"] == sources.plain_text(
            loss.replace("{{len(losses)}}", "3"))
        assert figures[1][1]["image"]["alt"] == ("A falling line." if lang == "en"
                                                 else "一条下降的线。")
        prose = "\n".join(c.source for c in page.cells if c.cell_type == "markdown")
        assert "drawn-figure" not in prose and CAPTIONS[lang]["speed"] not in prose


def _write_runs(chapter, outputs) -> None:
    """The chapter's executed notebooks, with ``outputs(framework)`` in the MXNet one's
    code cells where it returns a list."""
    for framework in ("torch", "mxnet"):
        nb = _executed(chapter, framework)
        for cell in nb.cells:
            if cell.cell_type == "code" and outputs(framework) is not None:
                cell.outputs = outputs(framework)
        path = notebooks.notebook_path(chapter, framework)
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, path)


def test_a_captioned_cell_draws_one_figure_or_none(book, monkeypatch):
    monkeypatch.setattr(pages, "run_note", lambda run, lang: "> run note")
    chapter = _editions()["en"]
    figure = nbformat.v4.new_output("display_data", data={"image/png": "UE5H"})
    table = nbformat.v4.new_output("display_data", data={"text/plain": "a table"})
    _write_runs(chapter, lambda fw: [figure, figure] if fw == "mxnet" else None)
    with pytest.raises(config.BookError, match=r"fig-loss \(mxnet\) must draw one figure"):
        pages.merge(chapter)
    # a table, the figure, a printed line, another table: the figure gets a cell of its own
    # (MyST-NB would put every displayed output of the cell into the figure)
    printed = nbformat.v4.new_output("stream", text="said after the figure\n")
    _write_runs(chapter, lambda fw: [table, figure, printed, table] if fw == "mxnet" else None)
    cells = [c for c in pages.merge(chapter).cells if c.cell_type == "code"
             and "mxnet" in c.metadata.get("tags", [])]
    first = next(i for i, c in enumerate(cells) if c.metadata.get("mystnb", {}).get(
        "figure", {}).get("name") == "fig-loss-mxnet" or c.metadata.get("mystnb", {}).get(
        "figure", {}).get("name") == "fig-loss")
    before, drawn, after = cells[first - 1], cells[first], cells[first + 1]
    assert [o.output_type for o in before.outputs] == ["display_data"] and before.source
    assert drawn.outputs == [figure, printed] and after.outputs == [table]
    assert drawn.source == after.source == before.source  # kept, not shown again
    assert "remove-input" in drawn.metadata["tags"] and "remove-input" in after.metadata["tags"]
    assert "remove-input" not in before.metadata.get("tags", [])
    assert len({before.id, drawn.id, after.id}) == 3
    printed = nbformat.v4.new_output("stream", text="drawn on a GPU only\n")
    _write_runs(chapter, lambda fw: [printed] if fw == "mxnet" else None)
    names = [c.metadata["mystnb"]["figure"]["name"] for c in pages.merge(chapter).cells
             if "mystnb" in c.metadata]
    assert names == ["fig-loss", "fig-speed", "fig-shared"]  # the MXNet run drew none


def test_the_site_numbers_each_tab_over_the_chapters_pages():
    """Sphinx's numbers (reading order over a chapter's pages) made again per tab: a figure
    of one framework counts in its tab only, a shared one in both; a label without
    JavaScript shows the default tab's number, else its own framework's."""
    figures = {("gaps", "fig-t1"): ((2, 1), "torch"), ("gaps", "fig-m1"): ((2, 2), "mxnet"),
               ("gaps", "fig-s1"): ((2, 3), None), ("gaps", "fig-both"): ((2, 4), "torch"),
               ("gaps", "fig-both-mxnet"): ((2, 5), "mxnet"),
               ("gaps-more", "fig-t3"): ((2, 7), "torch"),  # (2, 6) dropped: not drawn
               ("gaps-more", "fig-s2"): ((2, 8), None), ("last", "fig-l"): ((3, 1), "mxnet")}
    numbers = book_figures.numbers_per_framework(figures)
    assert numbers == {
        ("gaps", "fig-t1"): {"torch": (2, 1)}, ("gaps", "fig-m1"): {"mxnet": (2, 1)},
        ("gaps", "fig-s1"): {"torch": (2, 2), "mxnet": (2, 2)},
        ("gaps", "fig-both"): {"torch": (2, 3)}, ("gaps", "fig-both-mxnet"): {"mxnet": (2, 3)},
        ("gaps-more", "fig-t3"): {"torch": (2, 4)},
        ("gaps-more", "fig-s2"): {"torch": (2, 5), "mxnet": (2, 4)},
        ("last", "fig-l"): {"mxnet": (3, 1)}}
    assert book_figures.shown_number(numbers[("gaps-more", "fig-s2")]) == (2, 5)
    assert book_figures.shown_number(numbers[("gaps", "fig-m1")]) == (2, 1)
    page = {figure: found for (doc, figure), found in numbers.items() if doc == "gaps"}
    assert book_figures.reader_numbers(page, "fig-both") == {"torch": (2, 3), "mxnet": (2, 3)}
    assert book_figures.reader_numbers(page, "fig-t1") == {"torch": (2, 1)}
    for name in ("fig-a-torch", "fig-a-mxnet", "fig-a"):  # the rule of the notebooks' numrefs
        assert book_figures.twin_key(name) == plain.twin_key(name) == "fig-a"


def _rst_figure(name: str) -> str:
    return f".. figure:: {name}.png\n   :name: {name}\n\n   Caption {name}.\n\n"


def _rst_block(framework: str, text: str) -> str:
    lines = "".join(f"   {line}\n" if line else "\n" for line in text.split("\n"))
    return f".. container:: fw fw-{framework}\n\n{lines}\n"


def test_a_sphinx_build_numbers_each_tabs_figures_and_references(tmp_path):
    """A real Sphinx build with the extension, a chapter and its section page as the site
    makes them (framework blocks as ``fw fw-...`` containers): each caption shows its
    default number and carries each tab's (book.js shows the selected one); a {numref}
    in an MXNet block shows the MXNet copy's number, one outside switches with the tab."""
    from sphinx.application import Sphinx

    src = tmp_path / "src"
    src.mkdir()
    pages = {
        "index": "Book\n====\n\n.. toctree::\n   :numbered:\n\n   other\n   demo\n",
        "other": "Other\n=====\n\n" + _rst_figure("fig-o"),
        "demo": "Demo\n====\n\n" + _rst_block("torch", _rst_figure("fig-a-torch"))
        + _rst_block("mxnet", _rst_figure("fig-b") + _rst_figure("fig-a-mxnet"))
        + _rst_figure("fig-d") + "See :numref:`fig-d`.\n\n"
        + _rst_block("mxnet", "MXNet's :numref:`fig-a-torch`.")
        + ".. toctree::\n   :hidden:\n\n   demo-more\n",
        "demo-more": "More\n====\n\n" + _rst_block("torch", _rst_figure("fig-e"))
        + _rst_figure("fig-f") + _rst_block("mxnet", _rst_figure("fig-g"))
        + "Back to :numref:`fig-d`.\n",
    }
    for name, text in pages.items():
        (src / f"{name}.rst").write_text(text, encoding="utf-8")
        (src / f"{name}.png").write_bytes(b"")
    (src / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / 'tools' / 'sphinx_ext')!r})\n"
        "extensions = ['book_figures']\n"
        "numfig = True\nnumfig_format = {'figure': 'Figure %s'}\n", encoding="utf-8")
    Sphinx(str(src), str(src), str(tmp_path / "out"), str(tmp_path / "dt"), "html",
           status=None, warning=None, freshenv=True).build()

    def read(page: str) -> tuple[list, list]:
        html = (tmp_path / "out" / f"{page}.html").read_text(encoding="utf-8")
        number = r'<span class="fig-number"((?: data-\w+="[\d.]+")*)>([\d.]+)</span>'
        captions = re.findall(rf'<span class="caption-number">Figure {number} </span>', html)
        references = re.findall(rf'<span class="std std-numref">Figure {number}</span>', html)
        return captions, references

    captions, references = read("demo")
    assert captions == [(' data-torch="2.1"', "2.1"),  # fig-a-torch
                        (' data-mxnet="2.1"', "2.1"), (' data-mxnet="2.2"', "2.2"),
                        (' data-torch="2.2" data-mxnet="2.3"', "2.2")]  # fig-d, shared
    assert references == [(' data-torch="2.2" data-mxnet="2.3"', "2.2"),
                          (' data-mxnet="2.2"', "2.2")]  # in MXNet: its copy, fig-a-mxnet
    captions, references = read("demo-more")
    assert captions == [(' data-torch="2.3"', "2.3"), (' data-torch="2.4" data-mxnet="2.4"', "2.4"),
                        (' data-mxnet="2.5"', "2.5")]
    assert references == [(' data-torch="2.2" data-mxnet="2.3"', "2.2")]  # another page's
    assert read("other")[0] == [(' data-torch="1.1" data-mxnet="1.1"', "1.1")]


@pytest.mark.parametrize("name", sources.chapter_names())
def test_every_figure_a_chapter_draws_has_a_caption(name):
    """Every code cell whose run drew a figure (in the committed notebooks) has a
    ``{drawn-figure}`` caption in both languages, and the sources' figures pass the checks."""
    versions = sources.editions(name)
    for chapter in versions.values():
        assert sources.check_figures(chapter) == []
    captioned = {lang: sources.drawn_figures(c) for lang, c in versions.items()}
    assert {i: f.name for i, f in captioned["en"].items()} == \
        {i: f.name for i, f in captioned["zh"].items()}
    for framework in ("torch", "mxnet"):
        executed = nbformat.read(notebooks.notebook_path(versions["en"], framework), 4)
        for cell in executed.cells:
            drew = any(k.startswith("image/") for o in cell.get("outputs", [])
                       for k in o.get("data", {}))
            if drew:
                index = cell.metadata["d2l_ext"]["source_index"]
                assert index in captioned["en"], \
                    (f"{name} ({framework}): cell {index} draws a figure without a caption (or the "
                     "notebook is older than its source: tools/book.py refill or execute)")


@pytest.mark.parametrize("caption, alt", [
    ("Memory over three steps, the forward passes marked; dotted, the parameters alone.",
     "Memory over three steps, the forward passes marked."),
    ("The table as bars, per process: counted (light), measured (dark). The forward pass "
     "climbs. Drawn by `d2l_ext.memory_plots.counted_vs_measured`.",
     "The table as bars, per process."),
    ("Bytes per second (median: of the timings), on a log scale.",  # a colon in parentheses
     "Bytes per second (median: of the timings), on a log scale."),
    ("One device: seconds.", "One device: seconds."),  # too short a clause: the sentence
    ("三步训练中每个标记处的内存，按实测的各项拆开：参数、梯度（从反向传播起：到 zero_grad）。"
     "由 `d2l_ext.memory_plots.step_by_category` 根据本次运行的读数画出。",
     "三步训练中每个标记处的内存，按实测的各项拆开。"),
    ("各种复制方式的速率（每秒字节数，对数坐标）；误差线从最慢到最快。",
     "各种复制方式的速率（每秒字节数，对数坐标）。"),
])
def test_alt_text_is_the_first_clause_of_the_caption_without_provenance(caption, alt):
    assert sources.described(caption) == alt


def test_a_drawn_figure_is_described_by_its_caption_unless_it_has_an_alt_line():
    """The image's alt text: its ``:alt:`` line, values filled in; else the caption's first
    clause as plain text (never the "Drawn by" sentence)."""
    drawn = sources.DrawnFigure("fig-a", "Loss against the `step`: {{n}} runs. Drawn by "
                                "`d2l.plot`.", "")
    assert drawn.alt_text({"{{n}}": "3"}) == "Loss against the step."
    explicit = sources.DrawnFigure("fig-b", "Caption b: more.", "A falling line of {{n}}.")
    assert explicit.alt_text({"{{n}}": "3"}) == "A falling line of 3."
