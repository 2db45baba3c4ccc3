"""Figure numbers shared by a figure's framework copies.

A page shows some figures once per framework, under the PyTorch and MXNet tabs: a static
figure in a framework block (``fig-x-torch``, ``fig-x-mxnet``) or a figure that a code cell
draws in each framework's run (``fig-x`` and ``fig-x-mxnet``, tools/pipeline/pages.py). The
reader sees one of them, so they take one number: Sphinx numbers every figure of a chapter
in turn (Figure 3.1, 3.2, ...); here each copy after the first takes the first one's number,
and the figures after it move up. tools/pipeline/plain.py numbers the notebooks' captions
by the same rule (``twin_key``).
"""

from __future__ import annotations

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


def setup(app):
    app.connect("env-get-updated", _share_numbers, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
