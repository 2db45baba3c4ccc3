"""Each page opens with its title, the run note, then a "quick answers" box: per framework,
the 5-8 things to try (3-8 on a chapter's section page), each with its effect measured by the
page's run and a link to its section."""

import re
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the book tools need the full environment")
pytest.importorskip("yaml", reason="the book tools need the full environment")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from pipeline import config, notebooks, pages, sources, toc  # noqa: E402

CHAPTERS = sources.chapter_names()
TITLES = {"en": "Quick answers", "zh": "速查"}
#: The box: an admonition fenced with five colons, so that the framework blocks (three colons
#: in the source, four once the page makes them containers) nest inside it.
BOX = re.compile(r"^:::::\{admonition\} (?P<title>.+)\n:class: tip quick-answers\n"
                 r"(?P<body>.*?)^:::::[ \t]*$", re.S | re.M)
#: One thing to try: its name is the link to its section.
ITEM = re.compile(r"^\* \*\*\{ref\}`[^`<>]+ <(?P<label>sec-[\w-]+)>`\*\*(?P<effect>.+)$")
#: The same item once the notebook's prose is plain markdown: a link to the site's section.
PLAIN_ITEM = re.compile(r"^\* \*\*\[[^\]]+\]\(https?://\S+#sec-[\w-]+\)\*\*.*[:：] ?\S")


def _source(name: str, lang: str) -> str:
    return (config.CHAPTERS / lang / f"{name}.md").read_text(encoding="utf-8")


def _box(text: str) -> re.Match:
    box = BOX.search(text)
    assert box, "no quick-answers box"
    return box


def _things(text: str) -> dict[str, list[tuple[str, list[str]]]]:
    """Per framework, the box's items as (label, the values the item cites)."""
    found = {}
    for block in sources.FRAMEWORK_BLOCK.finditer(_box(text).group("body")):
        items = [ITEM.match(line) for line in block.group(2).splitlines()
                 if line.startswith("* ")]
        assert all(items), f"an item of the {block.group(1)} list has no link as its name"
        found[block.group(1)] = [(m.group("label"),
                                  sorted(p.group(0) for p in
                                         sources.PLACEHOLDER.finditer(m.group("effect"))))
                                 for m in items]
    return found


@pytest.mark.parametrize("name", CHAPTERS)
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_chapter_opens_with_the_box_under_its_title(name, lang):
    text = sources.parse(config.CHAPTERS / lang / f"{name}.md").cells[0].source
    title, rest = sources.split_title(text)
    assert title.splitlines()[-1].startswith("# ")
    assert rest.startswith(f":::::{{admonition}} {TITLES[lang]}\n"), \
        "the quick-answers box must come right under the title (the run note goes between)"
    assert len(rest[:_box(rest).end()].splitlines()) <= 30, "the box must stay short"


@pytest.mark.parametrize("name", CHAPTERS)
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_box_lists_five_to_eight_things_per_framework_each_linked_and_measured(name, lang):
    text = _source(name, lang)
    labels = set(re.findall(r"^\((sec-[\w-]+)\)=$", text, re.M))
    things = _things(text)
    assert sorted(things) == sorted(config.FRAMEWORKS), "one list per framework"
    fewest = 5 if toc.chapter_of(name) == name else 3  # a section page covers less
    for fw, items in things.items():
        assert fewest <= len(items) <= 8, f"{fw}: {len(items)} things to try"
        for label, values in items:
            assert label in labels, f"{fw}: no section labelled {label} in this chapter"
            assert values, f"{fw}: the item linking {label} cites no value from the run"
    for block in sources.FRAMEWORK_BLOCK.finditer(_box(text).group("body")):
        after_list = block.group(2).rstrip().split("\n* ")[-1].split("\n\n")[1:]
        assert len(after_list) <= 1, "at most one note (what the framework lacks) after the list"


@pytest.mark.parametrize("name", CHAPTERS)
def test_both_editions_box_the_same_things_with_the_same_values(name):
    en, zh = (_things(_source(name, lang)) for lang in ("en", "zh"))
    assert en == zh


def test_split_title_puts_the_title_apart_from_the_opening_prose():
    assert sources.split_title("(sec-a)=\n# A title\n\nFirst words.\n\n## Next") == (
        "(sec-a)=\n# A title", "First words.\n\n## Next")
    assert sources.split_title("(sec-a)=\n# A title\n") == ("(sec-a)=\n# A title", "")
    assert sources.split_title("No title here.") == ("No title here.", "")


def _current(chapter: sources.Chapter, fw: str) -> nbformat.NotebookNode:
    """The committed notebook, if it was made from the current source (a stale one is
    reported by test_book.py::test_executed_notebooks_are_up_to_date)."""
    path = notebooks.notebook_path(chapter, fw)
    nb = nbformat.read(path, 4)
    if nb.metadata["d2l_ext"]["code_hash"] != \
            notebooks.split(chapter, fw).metadata["d2l_ext"]["code_hash"]:
        pytest.skip(f"{path.name} is older than its source")
    return nb


@pytest.mark.parametrize("name", CHAPTERS)
@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("fw", ["torch", "mxnet"])
def test_notebooks_show_the_filled_box_as_plain_markdown_under_the_run_note(name, lang, fw):
    chapter = sources.parse(config.CHAPTERS / lang / f"{name}.md")
    nb = _current(chapter, fw)
    roles = [c.metadata.get("d2l_ext", {}).get("role") for c in nb.cells[:3]]
    assert roles == ["run-time", None, "run-note"]
    assert nb.cells[1].source.strip().splitlines()[-1].startswith("# ")  # the title alone
    quoted = []
    for line in nb.cells[3].source.splitlines():
        if not line.startswith(">"):
            break
        quoted.append(line[1:].strip())
    assert quoted[0] == f"**{TITLES[lang]}**"
    box = "\n".join(quoted)
    assert not re.search(r"\{\{|\{ref\}|:::|\(sec-", box), "MyST or an unfilled value left"
    items = [line for line in quoted if line.startswith("* ")]
    assert (5 if toc.chapter_of(name) == name else 3) <= len(items) <= 8
    assert all(PLAIN_ITEM.match(item) for item in items), items


@pytest.mark.parametrize("name", CHAPTERS)
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_page_shows_title_run_notes_then_the_box(name, lang):
    chapter = sources.parse(config.CHAPTERS / lang / f"{name}.md")
    for fw in config.FRAMEWORKS:
        _current(chapter, fw)
    page = pages.merge(chapter)
    title, notes, opening = (c.source for c in page.cells[:3])
    assert title.splitlines()[-1].startswith("# ")
    assert notes.count("::::{container} fw fw-") == len(config.FRAMEWORKS)
    assert opening.startswith(f":::::{{admonition}} {TITLES[lang]}\n")
    assert "::::{container} fw fw-torch" in _box(opening).group("body")
