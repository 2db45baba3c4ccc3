"""Tests of d2l_ext.memory_plots: the split by category, the snapshot's timeline, and that each
plot draws and labels its axes in both languages."""

from __future__ import annotations

import matplotlib
import pytest
import torch

from d2l_ext import i18n, memory, memory_plots

matplotlib.use("Agg")
MiB = memory_plots.MiB


def readings():
    """Two Adam steps of a model with 1 MiB of parameters and 3 MiB of activations."""
    P, A = MiB, 3 * MiB
    rows = [("parameters", P, P), ("forward 1", P + A, P + A), ("backward 1", 2 * P, P + A + P),
            ("step 1", 4 * P, 5 * P), ("zero_grad 1", 3 * P, 4 * P),
            ("forward 2", 3 * P + A, 3 * P + A), ("backward 2", 4 * P + 4, 3 * P + A + P),
            ("step 2", 4 * P, 5 * P), ("zero_grad 2", 3 * P, 4 * P)]
    return [memory.Reading(label, allocated, peak, None) for label, allocated, peak in rows]


def test_categorise_splits_each_mark():
    parts = memory_plots.categorise(readings(), MiB, MiB, 2 * MiB)
    assert parts[0] == {"parameters": MiB, "optimizer state": 0, "gradients": 0,
                        "activations": 0, "temporaries": 0}
    assert parts[1]["activations"] == 3 * MiB and parts[1]["gradients"] == 0
    assert parts[2]["gradients"] == MiB and parts[2]["activations"] == 0
    # activations and gradients at once, above both the forward mark and the backward mark
    assert parts[2]["temporaries"] == MiB
    assert parts[3]["optimizer state"] == 2 * MiB and parts[3]["temporaries"] == MiB
    assert parts[4]["gradients"] == 0 and parts[4]["optimizer state"] == 2 * MiB
    assert parts[4]["temporaries"] == 0  # zero_grad only frees: its peak is the step's reading
    assert parts[6]["activations"] == 4  # the loss scalar
    for r, p in zip(readings(), parts):  # the bars never rise above the peak
        assert sum(p.values()) <= max(r.peak, r.allocated)


def test_categorise_never_exceeds_the_reading():
    r = [memory.Reading("parameters", 100, 100, None), memory.Reading("backward 1", 150, 150, None)]
    parts = memory_plots.categorise(r, 100, 100, 0)
    assert parts[1]["gradients"] == 50 and sum(parts[1].values()) == 150


def test_snapshot_timeline_adds_allocs_and_completed_frees():
    snapshot = {"device_traces": [[
        {"action": "segment_alloc", "size": 2 * MiB, "time_us": 0},
        {"action": "alloc", "size": 512, "time_us": 1000},
        {"action": "alloc", "size": 1024, "time_us": 2000},
        {"action": "free_requested", "size": 512, "time_us": 2500},
        {"action": "free_completed", "size": 512, "time_us": 3000}]]}
    assert memory_plots.snapshot_timeline(snapshot) == ([0.0, 1.0, 2.0], [512, 1536, 1024])
    assert memory_plots.snapshot_timeline({"device_traces": [[]]}) == ([], [])


def test_recorded_timeline_on_the_cpu_sees_the_tensor():
    times, sizes = memory_plots.recorded_timeline(lambda: torch.ones(MiB // 4).sum(), "cpu")
    assert max(sizes) >= MiB and len(times) == len(sizes)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_plots_draw_and_label_their_axes_in_both_languages(lang, monkeypatch):
    import matplotlib.pyplot as plt

    monkeypatch.setenv("D2L_LANG", lang)
    ax = memory_plots.step_by_category(readings(), MiB, MiB, 2 * MiB, title="t")
    ax2 = memory_plots.timelines({"0": ([0.0, 1.0], [0, MiB]), "2": ([0.0, 2.0], [0, MiB // 2])})
    fig = memory_plots.counted_vs_measured(["DDP", "FSDP"], ["a", "b"], [[1, 2], [3, 4]],
                                           [[1.1, 2], [3, 4.2]])
    texts = [ax.get_ylabel(), ax2.get_xlabel(), ax2.get_ylabel(), fig.axes[0].get_ylabel(),
             *[t.get_text() for t in ax.get_legend().get_texts()],
             *[t.get_text() for t in ax.get_xticklabels()]]
    assert all(texts)
    english = {"MiB at the mark", "time since the step began (ms)", "allocated (MiB)",
               "held by the process (MiB)", "parameters", "forward 1", "counted", "measured"}
    assert english <= set(i18n.LABELS)  # each has its Chinese, for the zh rendering
    assert all(any("\u4e00" <= ch <= "\u9fff" for ch in i18n.LABELS[e]) for e in english
               if e != "forward 1") and i18n.LABELS["forward 1"] == "前向 1"
    chinese = lang == "zh" and i18n.cjk_font() is not None and i18n.capture_dir() is None
    assert ax.get_ylabel() == ("各标记处的内存（MiB）" if chinese else "MiB at the mark")
    for f in (ax.figure, ax2.figure, fig):
        f.canvas.draw()
        with i18n.translated(f) as any_label:  # an English figure has a Chinese rendering
            assert any_label or chinese
        plt.close(f)
