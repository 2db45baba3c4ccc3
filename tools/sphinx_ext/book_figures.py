"""Figures on the page: the numbers their framework copies share, and their alt text.

A page shows some figures once per framework, under the PyTorch and MXNet tabs: a static
figure in a framework block (``fig-x-torch``, ``fig-x-mxnet``) or a figure that a code cell
draws in each framework's run (``fig-x`` and ``fig-x-mxnet``, tools/pipeline/pages.py). The
reader sees one of them, so they take one number: Sphinx numbers every figure of a chapter
in turn (Figure 3.1, 3.2, ...); here each copy after the first takes the first one's number,
and the figures after it move up. tools/pipeline/plain.py numbers the notebooks' captions
by the same rule (``twin_key``).

A figure's alt text is not its caption again (a screen reader would read it twice): an
explicit ``:alt:`` line stays as it is; an image whose alt text is its caption (the default
of a ``{drawn-figure}``, pages.py) gets what the caption's first sentence says the plot
shows, up to its first colon or semicolon (the details follow there, and the caption under
the image gives them), and never the sentence that says how it was drawn ("Drawn by ...",
"由 ... 画出"), whose code names a screen reader spells out (:func:`described`).
"""

from __future__ import annotations

import re

from docutils import nodes

#: The suffixes that make a framework copy of a figure (plain.py's TWIN_SUFFIXES).
TWIN_SUFFIXES = ("-torch", "-mxnet")


def twin_key(figure_id: str) -> str:
    """The figure that ``figure_id`` is a framework copy of."""
    for suffix in TWIN_SUFFIXES:
        if figure_id.endswith(suffix):
            return figure_id[:-len(suffix)]
    return figure_id


def shared_numbers(numbers: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """One page's figure numbers (id -> number, in the page's order) with the copies of a
    figure under one number and the figures after them renumbered without gaps."""
    shared: dict[str, tuple[int, ...]] = {}
    first: dict[tuple[tuple[int, ...], str], tuple[int, ...]] = {}
    dropped: dict[tuple[int, ...], int] = {}  # per section: copies numbered so far
    for figure_id, number in numbers.items():
        section = number[:-1]
        key = (section, twin_key(figure_id))
        if key in first:
            shared[figure_id] = first[key]
            dropped[section] = dropped.get(section, 0) + 1
        else:
            first[key] = shared[figure_id] = section + (number[-1] - dropped.get(section, 0),)
    return shared


def _share_numbers(app, env) -> list[str]:
    """After Sphinx has numbered the figures (``env-get-updated``, TocTreeCollector)."""
    for figures in env.toc_fignumbers.values():
        if "figure" in figures:
            figures["figure"] = shared_numbers(figures["figure"])
    return []


#: A sentence that says how a figure was drawn, not what it shows.
PROVENANCE = re.compile(r"^(Drawn (by|with)\b|由.*画出)")
#: Where a sentence ends: ". " before a capital, a digit or an opening mark, or a full-width
#: full stop (or ! ?).
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\"“])|(?<=[。！？])")


def sentences(text: str) -> list[str]:
    """``text`` (one paragraph) split into its sentences."""
    return [s.strip() for s in SENTENCE_END.split(" ".join(text.split())) if s.strip()]


#: Where a sentence's first clause ends (outside parentheses): a colon or a semicolon.
CLAUSE_END = {":": ".", ";": ".", "：": "。", "；": "。"}
OPENING, CLOSING = "(（[", ")）]"


def first_clause(sentence: str) -> str:
    """``sentence`` up to its first colon or semicolon outside parentheses, closed with a
    full stop; all of it if that leaves fewer than three words (or eight characters)."""
    depth = 0
    for i, char in enumerate(sentence):
        depth += (char in OPENING) - (char in CLOSING)
        if depth == 0 and char in CLAUSE_END:
            clause = sentence[:i].rstrip(" ,，")
            if len(clause.split()) >= 3 or (len(clause) >= 8 and not clause.isascii()):
                return clause + CLAUSE_END[char]
            break
    return sentence


def described(caption: str) -> str:
    """The alt text made from a caption: the first clause of its first sentence
    (:func:`first_clause`), or the whole caption where that sentence says how the figure
    was drawn."""
    parts = sentences(caption)
    if parts and not PROVENANCE.match(parts[0]):
        return first_clause(parts[0])
    return " ".join(caption.split())


def _letters(text: str) -> str:
    return re.sub(r"[\W_]+", "", text).lower()


def _describe_images(app, doctree) -> None:
    """Each figure whose image's alt text is its caption (or missing) gets
    :func:`described` instead (``doctree-read``)."""
    for figure in doctree.findall(nodes.figure):
        image = next(iter(figure.findall(nodes.image)), None)
        caption = next(iter(figure.findall(nodes.caption)), None)
        if image is None or caption is None:
            continue
        text = caption.astext()
        if not image.get("alt") or _letters(image["alt"]) == _letters(text):
            image["alt"] = described(text)


def setup(app):
    app.connect("env-get-updated", _share_numbers, priority=900)
    app.connect("doctree-read", _describe_images)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
