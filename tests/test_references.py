"""Each chapter ends with its reference list: the same works in the same order in both
editions, each with a year (``n.d.`` where none could be confirmed) and a link or a venue, and
every "X et al." the text cites among them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = ROOT / "chapters"
NAMES = sorted(p.stem for p in (CHAPTERS / "en").glob("*.md") if p.stem != "index")
HEADING = {"en": "## References", "zh": "## 参考文献"}

#: ``1. Authors (2020). *Title*. Venue. <link>``, or ``1. *Title* (2018). Venue. <link>``
#: where the author is not known; ``n.d.`` where the year is not.
ENTRY = re.compile(
    r"^(?P<number>\d+)\. (?:(?P<authors>[^*\n]+?) \((?P<year>\d{4}|n\.d\.)\)\. \*(?P<title>.+?)\*\."
    r"|\*(?P<title_only>.+?)\* \((?P<year_only>\d{4}|n\.d\.)\)\.)(?P<rest>.*)$")
LINK = re.compile(r"<(https?://[^>\s]+)>")
#: "Goyal et al. (2017)", "(Lin et al., 2020", "[Rajbhandari et al., 2020]",
#: "Jiang et al., OSDI 2020"
ET_AL = re.compile(r"\b([A-Z][\w-]+)\s+et\s+al\.,?\s+\(?\[?(?:[A-Z]+\s+)?(\d{4})\b")


@dataclass(frozen=True)
class Reference:
    """One entry of a chapter's reference list."""

    authors: str
    year: str
    title: str
    rest: str

    @property
    def links(self) -> list[str]:
        return LINK.findall(self.rest)

    @property
    def venue(self) -> str:
        return LINK.sub("", self.rest).strip(" .。")


def chapter_text(name: str, lang: str) -> str:
    return (CHAPTERS / lang / f"{name}.md").read_text(encoding="utf-8")


def title_label(text: str) -> str:
    """The label of the chapter's title, the prefix of its sections' labels."""
    return re.search(r"^\(([\w-]+)\)=\n# ", text, re.M).group(1)


def split_references(text: str, lang: str) -> tuple[str, str, list[str]]:
    """The text before the reference section, the label line above its heading, and the
    lines after the heading."""
    heading = re.search(rf"^{re.escape(HEADING[lang])}[ \t]*$", text, re.M)
    assert heading, f"no {HEADING[lang]!r} heading"
    before = text[:heading.start()].rstrip("\n").split("\n")
    return "\n".join(before[:-1]), before[-1], text[heading.end():].strip("\n").split("\n")


def parse_entries(lines: list[str]) -> list[Reference]:
    """The numbered entries of a reference section (one line each; other lines are prose)."""
    entries = []
    for line in lines:
        if not re.match(r"^\d+\. ", line):
            continue
        match = ENTRY.match(line)
        assert match, f"entry not as 'Authors (year). *Title*. Venue. <link>': {line!r}"
        assert int(match["number"]) == len(entries) + 1, f"entries out of order at {line!r}"
        entries.append(Reference(match["authors"] or "", match["year"] or match["year_only"],
                                 match["title"] or match["title_only"], match["rest"]))
    return entries


def references(name: str, lang: str) -> list[Reference]:
    return parse_entries(split_references(chapter_text(name, lang), lang)[2])


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("name", NAMES)
def test_a_chapter_ends_with_its_labelled_reference_list(name, lang):
    text = chapter_text(name, lang)
    before, label, after = split_references(text, lang)
    assert label == f"({title_label(text)}-references)=", "label the section as the others are"
    assert not [line for line in after if line.startswith(("#", "```", ":::", "("))], (
        "the references must be the last section, after the exercises")
    entries = parse_entries(after)
    assert entries, "an empty reference list"
    for ref in entries:
        assert ref.venue or ref.links, f"{ref.title!r} has neither a venue nor a link"


@pytest.mark.parametrize("name", NAMES)
def test_both_editions_list_the_same_works_in_the_same_order(name):
    en, zh = references(name, "en"), references(name, "zh")
    assert len(en) == len(zh)
    for ours, theirs in zip(en, zh):
        assert (ours.authors, ours.year, ours.title) == (theirs.authors, theirs.year, theirs.title)
        # the Chinese edition may add a link of its own (that of a Chinese translation)
        assert theirs.links[:len(ours.links)] == ours.links


@pytest.mark.parametrize("name", NAMES)
def test_every_et_al_citation_has_an_entry(name):
    before = split_references(chapter_text(name, "en"), "en")[0]
    listed = {(ref.authors.split(",")[0], ref.year) for ref in references(name, "en")}
    cited = {(m[1], m[2]) for m in ET_AL.finditer(before)}
    assert cited <= listed, f"cited but not listed: {sorted(cited - listed)}"


def prose(text: str) -> str:
    """``text`` without its code cells, inline code and ``{{...}}`` expressions."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`|\{\{.*?\}\}", "", text)


@pytest.mark.parametrize("name", NAMES)
def test_a_chapter_whose_prose_names_d2l_lists_the_book(name):
    before = prose(split_references(chapter_text(name, "en"), "en")[0])
    if re.search(r"\bd2l\b(?![._])", before):
        assert "Dive into Deep Learning" in {ref.title for ref in references(name, "en")}


def test_the_entry_pattern_reads_both_forms_and_rejects_a_yearless_one():
    assert parse_entries(["1. Li, M., et al. (2014). *Parameter Server*. OSDI 14.",
                          "2. *A Post* (n.d.). A Blog. <https://example.org/p>"]) == [
        Reference("Li, M., et al.", "2014", "Parameter Server", " OSDI 14."),
        Reference("", "n.d.", "A Post", " A Blog. <https://example.org/p>")]
    with pytest.raises(AssertionError, match="entry not as"):
        parse_entries(["1. Li, M. *Parameter Server*. OSDI 14."])
    assert [(m[1], m[2]) for m in ET_AL.finditer(
        "(Goyal et al. 2017); Jiang et\nal., OSDI 2020; [Rajbhandari et al., 2020](x)")] == [
        ("Goyal", "2017"), ("Jiang", "2020"), ("Rajbhandari", "2020")]
