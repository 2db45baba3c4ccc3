"""d2l_ext.pipeline_plots: a timeline is drawn one box per operation, on the stage's row, in
the given time unit; an empty timeline is refused with what to do."""

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from d2l_ext import pipeline as pp  # noqa: E402
from d2l_ext import pipeline_plots  # noqa: E402


@pytest.mark.parametrize("name, chunks", [("1f1b", 1), ("interleaved", 2), ("zero-bubble", 1)])
def test_each_operation_is_one_box_on_its_stage_s_row(name, chunks):
    costs = pp.Costs(1.0, 1.0, 1.0) if name == "zero-bubble" else pp.Costs(1.0, 2.0)
    timeline = pp.simulate(pp.schedule(name, 4, 8, chunks), costs, chunks=chunks)
    fig, ax = plt.subplots()
    pipeline_plots.draw(ax, timeline, "title", unit=0.5)
    boxes = ax.patches
    assert len(boxes) == len(timeline)
    assert {round(b.get_y() + b.get_height() / 2) for b in boxes} == {0, 1, 2, 3}
    assert ax.get_xlim()[1] == pytest.approx(pp.makespan(timeline) / 0.5)
    labels = {t.get_text() for t in ax.texts}
    assert ("0a" in labels) == (chunks > 1) and ax.get_title(loc="left") == "title"
    plt.close(fig)


def test_an_empty_timeline_is_refused():
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="simulate or measure"):
        pipeline_plots.draw(ax, [])
    plt.close(fig)
