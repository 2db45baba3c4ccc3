"""The message catalogue: the chapters' sentences live in d2l_ext/messages/<chapter>.toml, and
the chapters' code cells name them (d2l.say / d2l.figure_text) instead of carrying prose."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from d2l_ext import catalogue, i18n

ROOT = Path(__file__).resolve().parents[1]
MESSAGES = ROOT / "d2l_ext" / "messages"
EXERCISES = re.compile(r"^## (Exercises|练习)\s*$", re.M)


@pytest.fixture
def lang(monkeypatch):
    def set_lang(value: str) -> None:
        monkeypatch.setenv("D2L_LANG", value)
    return set_lang


def test_say_fills_the_readers_language(lang):
    key = "async-computation/ten-products-of-fresh-float32-matrices"
    lang("en")
    assert catalogue.say(key) == catalogue.entry(key)["en"]
    lang("zh")
    text = catalogue.say(key)
    assert text == catalogue.entry(key)["zh"] and text.en == catalogue.entry(key)["en"]


def test_a_text_value_fills_each_language_with_its_own_side(lang):
    key = "async-computation/the-torch-mm-call-took-reading"
    assert catalogue.fields(catalogue.entry(key)["en"]) == {"t_call", "t_read"}
    lang("en")
    call, read = i18n.message("ONE", "一"), i18n.message("TWO", "二")
    text = catalogue.say(key, t_call=call, t_read=read)
    assert "ONE" in text.en and "TWO" in text.en and "一" in text.zh and "二" in text.zh
    assert "一" not in text.en and "ONE" not in text.zh


def test_after_colon_lowers_an_ordinary_first_word_in_english_only(lang):
    lang("en")
    lowered = catalogue.after_colon(i18n.message("A step took 3 ms. Keep it.", "一步用时 3 毫秒。"))
    assert (lowered.en, lowered.zh) == ("a step took 3 ms. Keep it.", "一步用时 3 毫秒。")
    assert str(lowered) == lowered.en
    assert catalogue.after_colon("Keeping every activation").en == "keeping every activation"
    for kept in ("MFU is 40%", "PyTorch runs", "GPT-3 used", "I saw", "Fashion-MNIST", "", "3 ms"):
        assert catalogue.after_colon(kept).en == kept


def test_listing_joins_each_language_with_its_own_separator(lang):
    """A list of run-dependent length in a sentence: Text items give each language its own
    side, plain strings (names) stay as they are; empty and single lists have no separator."""
    lang("zh")
    listed = catalogue.listing([i18n.message("retries", "重试"), "gloo", i18n.message("a", "甲")])
    assert (listed.en, listed.zh, str(listed)) == ("retries, gloo, a", "重试、gloo、甲",
                                                   "重试、gloo、甲")
    assert (catalogue.listing([]).en, catalogue.listing(["x"]).zh) == ("", "x")
    clauses = [i18n.message("x rose", "x 上升"), i18n.message("y fell", "y 下降")]
    assert (catalogue.listing(clauses, "clauses").zh, catalogue.listing(clauses, "statements").en) \
        == ("x 上升，y 下降", "x rose; y fell")
    with pytest.raises(ValueError, match="one of items, clauses, statements, not 'words'"):
        catalogue.listing(clauses, "words")
    key = "async-computation/the-torch-mm-call-took-reading"
    text = catalogue.say(key, t_call=listed, t_read="-")
    assert "retries, gloo, a" in text.en and "重试、gloo、甲" in text.zh


def test_format_specs_work_as_in_an_f_string(tmp_path, monkeypatch):
    monkeypatch.setattr(catalogue, "_chapter", lambda chapter: {
        "k": {"en": "{x:,.1f} of {n:>4} ({w:{width}})", "zh": "{x:,.1f}，{n}"}})
    text = catalogue.say("c/k", x=12345.678, n=7, w="ab", width=3)
    assert text.en == "12,345.7 of    7 (ab )" and text.zh == "12,345.7，7"
    assert catalogue.fields("{w:{width}} {a.b} {c[0]}") == {"w", "width", "a", "c"}


def test_the_tilde_spec_gives_significant_digits_without_an_exponent(monkeypatch):
    """A GPU's 3,350 GB/s reads 3,350, not 3.35e+03 as ``.3g`` would print it."""
    monkeypatch.setattr(catalogue, "_chapter", lambda chapter: {
        "k": {"en": "{a:~3} and {b:~3} GB/s", "zh": "{a:~2}，{b:~3}"}})
    text = catalogue.say("c/k", a=3349.7, b=0.0123456)
    assert text.en == "3,350 and 0.0123 GB/s" and text.zh == "3,350，0.0123"
    text = catalogue.say("c/k", a=0.0, b=-0.00310)
    assert text.en == "0 and \u22120.00310 GB/s"


def test_bad_keys_and_missing_values_say_what_to_do():
    with pytest.raises(KeyError, match="<chapter>/<name>"):
        catalogue.say("no-slash")
    with pytest.raises(KeyError, match="no message catalogue.*known: .*memory"):
        catalogue.say("not-a-chapter/x")
    with pytest.raises(KeyError, match="no message 'nope'"):
        catalogue.say("memory/nope")
    with pytest.raises(TypeError, match="needs t_call, t_read"):
        catalogue.say("async-computation/the-torch-mm-call-took-reading")


def test_figure_text_is_a_label(lang, monkeypatch):
    monkeypatch.setattr(catalogue, "_chapter", lambda chapter: {
        "axis": {"en": "time (ms)", "zh": "时间（毫秒）"}})
    lang("en")
    assert catalogue.figure_text("c/axis") == "time (ms)"
    assert i18n.LABELS["time (ms)"] == "时间（毫秒）"


def test_every_catalogue_entry_has_both_languages():
    for path in sorted(MESSAGES.glob("*.toml")):
        chapter = path.stem
        for name, texts in catalogue._chapter(chapter).items():
            assert texts["en"].strip() and texts["zh"].strip(), f"{chapter}/{name} is empty"


def test_no_entry_is_punctuation_alone():
    """The Chinese notebook replaces each recorded English text in its cell's output (words
    only as whole words): a text of punctuation alone, "." say, would turn every full stop of
    the cell's output, decimal points included, into "。"."""
    for path in sorted(MESSAGES.glob("*.toml")):
        for name, texts in catalogue._chapter(path.stem).items():
            literal = re.sub(r"\{[^{}]*\}", "", texts["en"])
            assert re.search(r"[A-Za-z0-9]", literal) or not literal.strip() or \
                catalogue.fields(texts["en"]), f"{path.stem}/{name}: {texts['en']!r}"


def test_the_catalogue_ships_in_the_wheel():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"messages/*.toml"' in text


# ---------------------------------------------------------------- the chapters' use of it
def _code_cells(name: str, lang: str) -> list[tuple[str, bool]]:
    """The code cells of chapter ``name`` in ``lang``, all its pages (a section page speaks
    from its chapter's catalogue), each with whether it comes before its page's exercises."""
    pytest.importorskip("yaml", reason="the book tools need the full environment")
    sys.path.insert(0, str(ROOT / "tools"))
    from pipeline import config, sources, toc

    cells = []
    for page in toc.read()[name]:
        path = config.CHAPTERS / lang / f"{page}.md"
        text = path.read_text(encoding="utf-8")
        limit = EXERCISES.search(text)
        before = text[:limit.start()] if limit else text
        cells += [(c.source, c.source in before) for c in sources.parse(path).cells
                  if c.kind == "code"]
    return cells


def _inline_expressions(name: str, lang: str) -> list[str]:
    """The ``{{…}}`` expressions in the prose of chapter ``name``'s pages in ``lang``."""
    pytest.importorskip("yaml", reason="the book tools need the full environment")
    sys.path.insert(0, str(ROOT / "tools"))
    from pipeline import config, toc

    return [expression.partition(":")[0]  # the format spec after the colon (none inside)
            for page in toc.read()[name]
            for expression in re.findall(r"\{\{(.+?)\}\}",
                                         (config.CHAPTERS / lang / f"{page}.md").read_text(
                                             encoding="utf-8"))]


def _calls(source: str):
    lines = [(ln[:len(ln) - len(ln.lstrip())] + "pass" if ln.lstrip().startswith(("%", "!"))
              else ln) for ln in source.split("\n")]
    for node in ast.walk(ast.parse("\n".join(lines))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("say", "figure_text", "message", "label"):
            yield node


def _chapter_names() -> list[str]:
    return sorted(p.stem for p in MESSAGES.glob("*.toml"))


@pytest.mark.parametrize("name", _chapter_names())
def test_every_key_a_chapter_says_exists_and_gets_its_values(name):
    used = set()
    sources = [source for source, _ in _code_cells(name, "en")] + _inline_expressions(name, "en")
    for source in sources:
        for call in _calls(source):
            if call.func.attr not in ("say", "figure_text"):
                continue
            key = call.args[0].value
            texts = catalogue.entry(key)
            given = {k.arg for k in call.keywords}
            needed = catalogue.fields(texts["en"]) | catalogue.fields(texts["zh"])
            assert None in given or needed <= given, f"{key} needs {needed - given}"  # **values
            used.add(key.partition("/")[2])
    unused = set(catalogue._chapter(name)) - used
    assert not unused, f"d2l_ext/messages/{name}.toml: entries no cell uses: {sorted(unused)}"


@pytest.mark.parametrize("name", _chapter_names())
def test_code_cells_carry_no_literal_prose(name):
    """A message with literal English and Chinese in a code cell belongs in the catalogue
    (texts computed from the run's own names, e.g. a dictionary's entries, may stay)."""
    literal = []
    for source, before_exercises in _code_cells(name, "en"):
        if not before_exercises:
            continue
        for call in _calls(source):
            kw = {k.arg: k.value for k in call.keywords}
            if set(kw) == {"en", "zh"} and all(
                    isinstance(v, (ast.Constant, ast.JoinedStr)) for v in kw.values()) and \
                    any(isinstance(v, ast.JoinedStr) or v.value for v in kw.values()):
                literal.append(ast.unparse(call)[:80])
    assert not literal, f"move these into d2l_ext/messages/{name}.toml: {literal}"


def test_listing_can_put_and_before_the_last_item():
    """``last="and"`` joins the last two items with the language's "and"; one item, or none,
    is left alone; an unknown word is refused."""
    items = [i18n.message("a", "甲"), i18n.message("b", "乙"), i18n.message("c", "丙")]
    three = catalogue.listing(items, last="and")
    assert (three.en, three.zh) == ("a, b and c", "甲、乙和丙")
    two = catalogue.listing(items[:2], last="and")
    assert (two.en, two.zh) == ("a and b", "甲和乙")
    assert catalogue.listing(items[:1], last="and").en == "a"
    assert catalogue.listing([], last="and").zh == ""
    numbers = catalogue.listing(["0.705", "0.754"], last="and")
    assert (numbers.en, numbers.zh) == ("0.705 and 0.754", "0.705 和 0.754")
    mixed = catalogue.listing(["“+ torch.compile”", "GPU", "“甲”"], last="and")
    assert mixed.zh == "“+ torch.compile”、GPU 和“甲”"
    assert catalogue.listing(["x", "“乙”"], last="and").zh == "x 和“乙”"
    code = catalogue.listing(["`exp`", "`sum`", "`max`"], last="and")
    assert code.zh == "`exp`、`sum` 和 `max`"
    with pytest.raises(ValueError, match="last is one of and or None, not 'or'"):
        catalogue.listing(items, last="or")
