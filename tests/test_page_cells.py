"""page_cells.cell_with_presentation: a page's code cell with the collapsed cells after it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("yaml", reason="the book tools need the full environment")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from page_cells import cell_with_presentation  # noqa: E402
from pipeline import sources  # noqa: E402


def _cell(source: str, *tags: str) -> str:
    options = f":tags: [{', '.join(tags)}]\n" if tags else ""
    return f"```{{code-cell}} ipython3\n{options}{source}\n```\n"


PAGE = "\n".join([
    "# A page\n",
    _cell("rates = compute()", "torch"),
    _cell("rates = compute_mx()", "mxnet"),  # the other tab: no separation
    _cell("table(rates)", "torch", "hide-input"),
    _cell("plot(rates)", "torch", "hide-input"),
    _cell("more = compute_more()", "torch"),  # not collapsed: a cell of its own
    "Prose.\n",
    _cell("alone = 1", "torch"),
    "Prose again.\n",
    _cell("after_prose(alone)", "torch", "hide-input"),
    _cell("shared = 2"),
    _cell("twice = 1", "torch"),
    _cell("twice = 2", "torch"),
])


@pytest.fixture
def cells(tmp_path) -> list[sources.Cell]:
    page = tmp_path / "page.md"
    page.write_text(PAGE, encoding="utf-8")
    return sources.parse(page).cells


def test_a_cell_comes_with_the_two_collapsed_cells_after_it(cells):
    assert cell_with_presentation(cells, "compute()", "torch") == (
        "rates = compute()\ntable(rates)\nplot(rates)")


def test_a_marker_in_a_collapsed_cell_starts_there(cells):
    assert cell_with_presentation(cells, "table(", "torch") == "table(rates)\nplot(rates)"


def test_a_cell_without_collapsed_cells_comes_alone(cells):
    assert cell_with_presentation(cells, "compute_more()", "torch") == "more = compute_more()"
    assert cell_with_presentation(cells, "alone = 1", "torch") == "alone = 1"  # prose after
    assert cell_with_presentation(cells, "compute_mx()", "mxnet") == "rates = compute_mx()"


def test_the_framework_picks_the_cells(cells):
    assert cell_with_presentation(cells, "shared = 2") == "shared = 2"
    with pytest.raises(AssertionError, match="0 code cells of framework 'torch'"):
        cell_with_presentation(cells, "shared = 2", "torch")


def test_a_missing_or_repeated_marker_fails_naming_it(cells):
    with pytest.raises(AssertionError, match=r"0 code cells .* contain 'no such line', not 1"):
        cell_with_presentation(cells, "no such line", "torch")
    with pytest.raises(AssertionError, match=r"2 code cells .* contain 'twice = ', not 1"):
        cell_with_presentation(cells, "twice = ", "torch")
    with pytest.raises(AssertionError, match="Prose"):  # prose is no code cell
        cell_with_presentation(cells, "Prose", "torch")
