"""The chapters' sentences, table headers and figure texts, kept out of their code cells.

A chapter's code says *which* sentence it prints and with *which* values; the sentence itself,
in English and in Chinese, lives in ``d2l_ext/messages/<chapter>.toml`` under a key::

    print(d2l.say("async-computation/device-and-size", device=device, size=size))

with, in ``messages/async-computation.toml``::

    [device-and-size]
    en = "device: {device}; matrices of {size}×{size}"
    zh = "设备：{device}；{size}×{size} 的矩阵"

The templates are :meth:`str.format` templates (``{peak:,.2f}`` formats as in an f-string;
``{rate:~3}`` gives three significant digits in fixed point, never an exponent:
:func:`d2l_ext.utils.significant`);
a value made by :func:`d2l_ext.i18n.message` (a :class:`~d2l_ext.i18n.Text`) fills each
language's template with its own language.
:func:`say` returns :func:`d2l_ext.i18n.message`'s text (the reader's language, recorded
while the book captures a run); :func:`figure_text` returns :func:`d2l_ext.i18n.label`'s.
So a code cell is the same in both editions and carries no prose in either language.
"""

from __future__ import annotations

import functools
import string
from importlib import resources

import tomllib

from d2l_ext.i18n import LANGUAGES, Text, label, message

__all__ = ["say", "figure_text", "listing", "entry", "chapters", "fields"]


@functools.cache
def _chapter(chapter: str) -> dict[str, dict[str, str]]:
    path = resources.files("d2l_ext") / "messages" / f"{chapter}.toml"
    if not path.is_file():
        raise KeyError(f"no message catalogue for chapter {chapter!r}: expected "
                       f"d2l_ext/messages/{chapter}.toml (known: {', '.join(chapters())})")
    with path.open("rb") as f:
        entries = tomllib.load(f)
    for key, texts in entries.items():
        missing = [lang for lang in LANGUAGES if not isinstance(texts.get(lang), str)]
        if missing:
            raise ValueError(f"d2l_ext/messages/{chapter}.toml: [{key}] lacks "
                             f"{' and '.join(missing)}")
    return entries


def chapters() -> list[str]:
    """The chapters that have a message catalogue."""
    folder = resources.files("d2l_ext") / "messages"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def entry(key: str) -> dict[str, str]:
    """The English and Chinese templates of ``"<chapter>/<name>"``."""
    chapter, sep, name = key.partition("/")
    if not sep or not name:
        raise KeyError(f"a message key reads '<chapter>/<name>', e.g. "
                       f"'memory/peak-of-one-step', not {key!r}")
    entries = _chapter(chapter)
    if name not in entries:
        raise KeyError(f"no message {name!r} in d2l_ext/messages/{chapter}.toml")
    return entries[name]


def fields(template: str) -> set[str]:
    """The names a template fills in (nested format fields included)."""
    names: set[str] = set()
    for _, name, spec, _ in string.Formatter().parse(template):
        if name is not None and name != "":
            names.add(name.split(".")[0].split("[")[0])
        if spec:
            names |= fields(spec)
    return names


class _Formatter(string.Formatter):
    """:meth:`str.format`, plus the spec ``~N``: N significant digits, never an exponent."""

    def format_field(self, value, format_spec: str) -> str:
        if format_spec.startswith("~") and format_spec[1:].isdigit():
            from d2l_ext.utils import formatted  # an exact zero "0", a true minus sign
            return formatted(value, format_spec)
        return super().format_field(value, format_spec)


_FORMATTER = _Formatter()


def _fill(key: str, values: dict) -> tuple[str, str]:
    texts = entry(key)
    filled = []
    for lang in LANGUAGES:
        needed = fields(texts[lang])
        missing = needed - values.keys()
        if missing:
            raise TypeError(f"message {key!r} needs {', '.join(sorted(missing))}: pass "
                            f"them as keyword arguments, e.g. d2l.say({key!r}, "
                            f"{sorted(missing)[0]}=...)")
        own = {name: (getattr(v, lang) if isinstance(v, Text) else v)
               for name, v in values.items()}
        filled.append(_FORMATTER.format(texts[lang], **own))
    return filled[0], filled[1]


def say(key: str, /, **values) -> Text:
    """The sentence ``key`` (``"<chapter>/<name>"``) in the reader's language, filled with
    ``values``; while the book captures a run, both languages are recorded."""
    en, zh = _fill(key, values)
    return message(en=en, zh=zh)


def figure_text(key: str, /, **values) -> str:
    """A text drawn in a figure (axis label, title, legend), from the catalogue:
    :func:`d2l_ext.i18n.label` of the entry's English and Chinese."""
    en, zh = _fill(key, values)
    return label(en=en, zh=zh)


def after_colon(text: str) -> Text:
    """``text``, a sentence (e.g. from :func:`say`), as it reads after a colon: in English with
    its first word in lower case if that word is an ordinary capitalised word ("A step took"
    becomes "a step took"; "MFU", "PyTorch" and "GPT-3" keep their capitals), in Chinese
    unchanged. A proper name spelt like an ordinary word ("Adam") would lose its capital, so
    do not use it on a sentence that starts with one."""
    en, zh = (text.en, text.zh) if isinstance(text, Text) else (str(text), str(text))
    first = en.split(" ", 1)[0]
    ordinary = first[:1].isupper() and first[1:].isalpha() and first[1:].islower()
    if first == "A" or ordinary:
        en = en[0].lower() + en[1:]
    return message(en=en, zh=zh)


#: How each language separates the parts of a list in running text: names or short items
#: ("a, b, c" / "a、b、c"), clauses ("a, b" / "a，b"), or statements ("a; b" / "a；b").
LIST_SEPARATORS = {"items": {"en": ", ", "zh": "、"},
                   "clauses": {"en": ", ", "zh": "，"},
                   "statements": {"en": "; ", "zh": "；"}}
#: The word before a list's last item when the list is to read as one whole ("a, b and c" /
#: "a、b和c"): ``listing(items, "items", last="and")``.
LAST_WORDS = {"and": {"en": " and ", "zh": "和"}}


def _join_last(before: str, word: str, after: str) -> str:
    """``before + word + after``; a Chinese word ("和") gets a space on each side that meets
    a Latin letter, a digit or inline code ("0.705 和 0.754", "`sum` 和 `max`", "“甲”和“乙”"),
    as the book writes them."""
    def latin(c: str) -> bool:
        return c == "`" or (c.isascii() and c.isalnum())

    if word.strip() == word and not word.isascii():
        if latin(before[-1:]):
            word = " " + word
        if latin(after[:1]):
            word = word + " "
    return before + word + after


def listing(items, kind: str = "items", last: str | None = None) -> Text:
    """``items`` (strings, or :class:`~d2l_ext.i18n.Text` that carry both languages) as one
    list in running text, each language with its own separator for the ``kind`` of list
    (:data:`LIST_SEPARATORS`), and with ``last`` (a key of :data:`LAST_WORDS`, e.g. "and")
    before the last item if given; a value for :func:`say` when a sentence names a list
    whose length depends on the run."""
    if kind not in LIST_SEPARATORS:
        raise ValueError(f"a list is one of {', '.join(LIST_SEPARATORS)}, not {kind!r}")
    if last is not None and last not in LAST_WORDS:
        raise ValueError(f"last is one of {', '.join(LAST_WORDS)} or None, not {last!r}")
    items = list(items)
    texts = {}
    for lang in ("en", "zh"):
        parts = [getattr(item, lang) if isinstance(item, Text) else str(item) for item in items]
        if last is not None and len(parts) > 1:
            parts = parts[:-2] + [_join_last(parts[-2], LAST_WORDS[last][lang], parts[-1])]
        texts[lang] = LIST_SEPARATORS[kind][lang].join(parts)
    return message(**texts)
