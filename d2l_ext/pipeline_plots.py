"""Drawings of pipeline timelines (:mod:`d2l_ext.pipeline`), simulated or measured: one row
per stage, one box per operation, forward passes light, backward passes dark, weight
gradients hatched, each labelled with its micro-batch."""

from __future__ import annotations

from collections.abc import Sequence

from d2l_ext.pipeline import Interval

COLORS = {"F": "#9ecae1", "B": "#3182bd", "W": "#c6dbef"}


def draw(ax, timeline: Sequence[Interval], title: str = "", unit: float = 1.0,
         labels: bool = True) -> None:
    """Draw ``timeline`` on ``ax``: stage 0 at the top, time (divided by ``unit``) to the
    right; a box's label is its micro-batch (with its chunk as a subscript letter when the
    schedule is interleaved)."""
    if not timeline:
        raise ValueError("an empty timeline: simulate or measure a schedule first")
    stages = sorted({i.stage for i in timeline})
    origin = min(i.start for i in timeline)
    chunks = max(i.op.chunk for i in timeline) + 1
    for i in timeline:
        row = stages.index(i.stage)
        start, width = (i.start - origin) / unit, (i.end - i.start) / unit
        ax.barh(row, width, left=start, height=0.8, color=COLORS[i.op.kind],
                edgecolor="black", linewidth=0.4, hatch="//" if i.op.kind == "W" else None)
        if labels:
            text = str(i.op.micro) + ("abcdefgh"[i.op.chunk] if chunks > 1 else "")
            ax.text(start + width / 2, row, text, ha="center", va="center", fontsize=6,
                    color="white" if i.op.kind == "B" else "black")
    ax.set_yticks(range(len(stages)), [str(s) for s in stages])
    ax.set_ylim(len(stages) - 0.5, -0.5)
    ax.set_xlim(0, (max(i.end for i in timeline) - origin) / unit)
    if title:
        ax.set_title(title, fontsize=9, loc="left")
