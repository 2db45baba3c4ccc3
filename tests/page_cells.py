"""A page's code cell together with its collapsed presentation, for the page tests.

A chapter splits a cell that computes and then formats, plots or prints into the
computation and, right after it with no prose between, one or more cells tagged
``hide-input`` that the page collapses. A test that runs the page's code runs them as one:
:func:`cell_with_presentation`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

HIDE_INPUT = "hide-input"


class PageCell(Protocol):
    """What a cell of ``pipeline.sources`` offers here."""

    kind: str
    source: str
    tags: list[str]

    @property
    def framework(self) -> str | None: ...


def cell_with_presentation(cells: Sequence[PageCell], marker: str,
                           framework: str | None = None) -> str:
    """The source of the one code cell of ``framework`` (``None``: the shared cells) that
    contains ``marker``, joined with the ``hide-input`` cells of ``framework`` that follow it
    with no prose between (other frameworks' code cells do not separate them).

    A marker in a ``hide-input`` cell gives that cell and the collapsed cells after it, not
    the cell it presents: a test can run a presentation alone on made-up names. Fails,
    naming the marker, unless exactly one code cell of ``framework`` contains it."""
    own = [i for i, cell in enumerate(cells)
           if cell.kind != "code" or cell.framework == framework]  # prose stays: it separates
    found = [n for n, i in enumerate(own) if cells[i].kind == "code" and marker in cells[i].source]
    assert len(found) == 1, (f"{len(found)} code cells of framework {framework!r} contain "
                             f"{marker!r}, not 1")
    chosen = [cells[own[found[0]]]]
    for i in own[found[0] + 1:]:
        if cells[i].kind != "code" or HIDE_INPUT not in cells[i].tags:
            break
        chosen.append(cells[i])
    return "\n".join(cell.source for cell in chosen)
