"""d2l_ext.sync_profile and d2l_ext.sync_profile_mxnet: the trace rules and profiling helpers
that the host-device-sync chapter's two pages share, on real CPU profiles and on made-up
events."""

import operator
import subprocess
import sys
from pathlib import Path

import pytest

from d2l_ext import sync_profile, trace
from d2l_ext.trace import Event

torch = pytest.importorskip("torch")

MEASURING = "host-device-sync-measuring"


def _op(name, start, duration, track="host"):
    return Event(name, track, start, duration, "cpu_op")


def _step(i, start, duration):
    return Event(f"ProfilerStep#{i}", "host", start, duration, "user_annotation")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# --- the trace rules, on made-up events -------------------------------------------------------

def test_sync_points_keeps_the_outermost_syncing_operator_only():
    events = [_op("aten::_unique2", 0, 10), _op("aten::nonzero", 2, 3),
              _op("aten::nonzero", 20, 5)]
    assert [(e.name, e.start_us) for e in sync_profile.sync_points(events)] == [
        ("aten::_unique2", 0), ("aten::nonzero", 20)]


def test_an_assignment_counts_only_after_a_fresh_host_tensor_and_not_as_a_mask():
    fresh = [_op("aten::lift_fresh", 0, 1), _op("aten::slice", 2, 1),
             _op("aten::index_put_", 4, 5)]
    assert [e.name for e in sync_profile.sync_points(fresh)] == ["aten::index_put_"]
    masked = fresh + [_op("aten::masked_fill_", 5, 2)]
    assert sync_profile.sync_points(sorted(masked, key=lambda e: e.start_us)) == []
    computed = [_op("aten::add", 0, 1), _op("aten::index_put_", 4, 5)]
    assert sync_profile.sync_points(computed) == []
    other_thread = [_op("aten::lift_fresh", 0, 1, track="other"), _op("aten::index_put_", 4, 5)]
    assert sync_profile.sync_points(other_thread) == []


def test_a_host_tensor_made_earlier_and_assigned_later_is_a_known_miss():
    # host-device-sync.md ("The rule has limits"): `w = torch.tensor(0.0); u = x * 2;
    # z[3] = w` copies and waits on a GPU, but nothing marks it just before the assignment.
    events = [_op("aten::lift_fresh", 0, 1), _op("aten::mul", 2, 1), _op("aten::select", 4, 1),
              _op("aten::copy_", 6, 2)]
    assert sync_profile.sync_points(events) == []
    right_after = [e for e in events if e.name != "aten::mul"]  # the same, with w made just before
    assert [e.name for e in sync_profile.sync_points(right_after)] == ["aten::copy_"]


def test_a_copy_inside_another_operator_is_not_an_assignment():
    events = [_op("aten::lift_fresh", 0, 1), _op("aten::to", 2, 10), _op("aten::copy_", 3, 2)]
    assert sync_profile.sync_points(events) == []


def test_step_split_measures_b_from_the_first_sync_to_the_last():
    steps = [_step(0, 0, 1000), _step(1, 1000, 1000)]
    syncs = [_op("aten::nonzero", 100, 100), _op("aten::nonzero", 500, 100),
             _op("aten::nonzero", 1200, 100)]  # step 1: one sync, so no span B
    waits = [Event("cudaStreamSynchronize", "host", 150, 50, "cuda_runtime"),
             Event("cudaStreamSynchronize", "host", 550, 50, "cuda_runtime")]
    work = [Event("k", "gpu", 0, 400, "kernel")]
    costs = sync_profile.step_split(steps, syncs, waits, work, 2500)
    assert costs["B"] == [0.4, 0.0] and costs["waits"] == [0.1, 0.0]
    assert costs["host"] == [0.9, 1.0] and costs["host_B"] == [pytest.approx(0.35), 0.0]
    assert costs["device_B"] == [pytest.approx(0.2), 0.0]
    assert costs["device"] == [0.2] and costs["profiled"] == [1.25]


def test_step_split_refuses_a_trace_without_steps():
    with pytest.raises(ValueError, match="no profiled step"):
        sync_profile.step_split([], [], [], [], 0)


def test_in_order_runs_repeats_together_and_marks_none():
    assert sync_profile.in_order([]) == "–"
    assert sync_profile.in_order(["a", "b", "b", "b", "a"]).en == "a, b ×3, a"


def test_calm_profiles_leave_a_disturbed_one_out_and_merged_joins_the_rest():
    profiles = [{"syncs": 3.0, "order": "x", "B": [1.0], "profiled": [10.0]},
                {"syncs": 5.0, "order": "y", "B": [2.0], "profiled": [12.4]},
                {"syncs": 3.0, "order": "z", "B": [9.0], "profiled": [12.6]}]  # > 25% slower
    calm, costs = sync_profile.calm_costs({"v": profiles})
    assert calm["v"] == profiles[:2]
    assert costs["v"] == {"syncs": 4.0, "order": "x", "B": [1.0, 2.0], "profiled": [10.0, 12.4]}
    with pytest.raises(ValueError):
        sync_profile.calm_profiles([])


def test_in_turns_goes_forth_back_and_forth_after_what_is_done():
    calls = []
    found = sync_profile.in_turns(["a", "b", "c"], lambda name, k: calls.append((name, k)) or k,
                                  done={"a": ["first"]})
    assert calls == [("b", 0), ("c", 0), ("c", 1), ("b", 1), ("a", 1), ("a", 2), ("b", 2),
                     ("c", 2)]
    assert found == {"a": ["first", 1, 2], "b": [0, 1, 2], "c": [0, 1, 2]}
    assert sync_profile.turns(["x", "y"]) == ["x", "y", "y", "x", "x", "y"]


def test_kept_value_and_kept_run_read_a_gpu_record(monkeypatch):
    from d2l_ext import gpu_runs
    from d2l_ext.i18n import message

    figure = gpu_runs.Figure(en="t_host (ms)", zh="t_host（毫秒）", value=6.45, format=".2f")
    run = {"gpus": 1, "gpu": "NVIDIA H100", "machine": "1 x NVIDIA H100",
           "framework": "PyTorch 2.11", "date": "2026-11-24"}
    kept = gpu_runs.GpuRun(chapter="host-device-sync-measuring", run=run, commit="abc1234",
                           code_version="v1", figures=(figure,))
    assert sync_profile.kept_value(kept, message(en="t_host (ms)", zh="?")) == 6.45
    assert sync_profile.kept_value(kept, "t_host (ms)") == 6.45
    assert sync_profile.kept_value(kept, "no such figure") is None
    assert sync_profile.kept_value(None, "t_host (ms)") is None
    monkeypatch.setenv("D2L_CODE_VERSION", "v2")
    said = sync_profile.kept_run(kept)
    assert said.en == ("the book's GPU run (1 × NVIDIA H100, PyTorch 2.11, 2026-11-24, "
                       "an earlier version of this code)")
    assert said.zh.startswith("本书在 GPU 上的运行（1 块 NVIDIA H100") and "较早版本" in said.zh
    monkeypatch.setenv("D2L_CODE_VERSION", "v1")
    assert "earlier" not in sync_profile.kept_run(kept).en
    no_count = gpu_runs.GpuRun(chapter="x", run=dict(run, gpus=None), commit="abc1234",
                               code_version="v1", figures=())
    assert "(1 x NVIDIA H100, " in sync_profile.kept_run(no_count).en
    for record in (gpu_runs.load("host-device-sync"), gpu_runs.load(MEASURING)):
        assert record is None or sync_profile.kept_run(record).en.startswith("the book's GPU")


# --- the sizes and the drawings ---------------------------------------------------------------

def test_run_sizes_grow_from_smoke_to_cpu_to_gpu():
    smoke, cpu, gpu = (sync_profile.run_sizes(False, smoke=True), sync_profile.run_sizes(False),
                       sync_profile.run_sizes(True))
    assert sync_profile.run_sizes(True, smoke=True) == smoke
    assert (cpu.batch_size, cpu.size, cpu.num_steps) == (2, 32, 20)
    assert (gpu.batch_size, gpu.size, gpu.num_steps) == (32, 256, 50)
    for field in ("batch_size", "size", "num_steps", "active", "rounds"):
        assert getattr(smoke, field) <= getattr(cpu, field) <= getattr(gpu, field)


def test_draw_timeline_draws_rows_of_intervals_with_an_empty_row_and_odd_sizes():
    plt = _plt()
    events = [Event("forward", "a", 0, 40), Event("loss", "a", 40, 0),  # zero length
              Event("kernel", "b", 10, 5), Event("late", "b", 500, 10),  # out of the window
              Event("other", "not a row", 0, 100)]
    fig, ax = plt.subplots(figsize=(1.3, 0.7))  # a tiny figure
    texts = []
    rows = {"a": "row a", "b": "row b", "c": "row c"}  # c: no event
    out = sync_profile.draw_timeline(events, ax, rows, 0, 100,
                                     text=lambda e: texts.append(e.track) or e.name,
                                     spans=[(20, 30), (60, 60)], title="odd")
    assert out is ax and ax.get_title() == "odd" and len(ax.patches) == 2
    assert trace.row_names(ax) == ["row a", "row b", "row c"]
    assert set(texts) <= {"a", "b"}  # the text function sees the rows' keys
    assert any(t.get_text() == "no events" for t in ax.texts)
    fig.canvas.draw()
    plt.close(fig)
    fig, ax = plt.subplots()
    sync_profile.draw_timeline([], ax, {"a": "row a"}, 5, 5)  # nothing, in an empty window
    plt.close(fig)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_draw_timeline_names_the_rows_in_the_language_asked(monkeypatch, lang):
    from d2l_ext import i18n

    plt = _plt()
    monkeypatch.setenv("D2L_LANG", lang)
    monkeypatch.delenv("D2L_CAPTURE", raising=False)
    monkeypatch.setattr(i18n, "cjk_font", lambda: "DejaVu Sans")  # as if it drew Chinese
    rows = {"a": i18n.Text("host", "主机"), "b": "plain"}
    with plt.rc_context():
        fig, ax = plt.subplots()
        sync_profile.draw_timeline([Event("x", "a", 0, 10)], ax, rows, 0, 10)
        plt.close(fig)
    assert sorted(trace.row_names(ax)) == sorted(["host" if lang == "en" else "主机", "plain"])


def test_draw_gpu_syncs_draws_a_shipped_traces_syncs_and_the_idle_gaps():
    from d2l_ext import gputrace

    plt = _plt()
    events = gputrace.load("event_sync_a100")
    syncs = gputrace.syncs(events)
    rows = {"waits": "waits", "calls": "calls", "device": "device"}
    fig, ax = plt.subplots(figsize=(6, 2))
    out = sync_profile.draw_gpu_syncs(events, syncs[:4], ax, rows, kernel="K", title="t")
    gaps = [s for s in syncs[:4] if s.idle_end_us is not None and s.idle_end_us > s.call.end_us]
    assert out is ax and ax.get_title() == "t" and len(ax.patches) == len(gaps)
    assert sorted(trace.row_names(ax)) == ["calls", "device", "waits"]
    assert {sync_profile.gpu_trace_row(e) for e in events} <= {None, *rows}
    plt.close(fig)
    names = {sync_profile.innermost_op(s.call, events) for s in syncs}
    assert names and all(len(n) <= 26 for n in names)
    with pytest.raises(ValueError, match="no synchronisations"):
        sync_profile.draw_gpu_syncs(events, [], ax, rows)


def test_draw_step_times_draws_one_bar_per_timing_the_first_on_top():
    from d2l_ext.utils import Timing

    plt = _plt()
    timings = {"a": Timing((0.002, 0.003, 0.004)), "b": Timing((0.001,))}
    ax = sync_profile.draw_step_times(timings, "ms per step")
    bars = [p for p in ax.patches if p.get_width() > 0]
    assert [round(b.get_width(), 6) for b in bars] == [1.0, 3.0]  # b below, a on top
    assert ax.get_xlabel() == "ms per step"
    plt.close(ax.figure)


# --- real CPU profiles ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def training():
    from d2l_ext import segmentation

    torch.manual_seed(0)
    net = segmentation.SegmentationNet(num_hidden=1, num_classes=10)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.001)
    X, y = segmentation.random_batch(2, 7, 10, -1)  # an odd size
    return net, optimizer, X, y


@pytest.mark.parametrize(("variant", "syncs", "order"), [
    ("original", 6, "nonzero, index_put_, _unique2, nonzero ×3"),
    ("where", 4, "_unique2, nonzero ×3"), ("sort", 3, "nonzero ×3"), ("ignore_index", 0, "–")])
def test_step_costs_count_each_variants_syncs_in_a_cpu_profile(training, tmp_path, variant,
                                                                 syncs, order):
    from d2l_ext import segmentation

    net, optimizer, X, y = training
    loss_fn = segmentation.MaskedCrossEntropy(variant)
    path = str(tmp_path / f"{variant}.json")
    cpu = torch.device("cpu")
    sync_profile.profile_steps(
        lambda: sync_profile.train_step(net, optimizer, loss_fn, X, y), path,
        sync_profile.activities_for(cpu), active=2, device=cpu)
    costs = sync_profile.step_costs(path)
    assert costs["syncs"] == syncs and str(costs["order"]) == order
    assert len(costs["B"]) == 2 and costs["waits"] == [0.0, 0.0]  # a CPU: nothing waits
    assert costs["sync_calls"] == 0 and costs["launches"] == 0
    assert (costs["B"][0] > 0) == (syncs > 1)
    fig, ax = _plt().subplots(figsize=(5, 2))
    rows = {"phases": "phases", "syncs": "syncs", "waits": "waits", "device": "device"}
    empty = sync_profile.draw_last_step(path, ax, rows, title=variant)
    assert empty == (["waits", "device"] if syncs else ["syncs", "waits", "device"])
    assert trace.row_names(ax) == list(rows.values())  # in the order of `rows`
    assert ax.get_title() == variant and len(ax.patches) == (syncs > 1)  # B shaded
    _plt().close(fig)


def test_sync_points_find_an_element_assignment_not_a_slice_in_a_cpu_profile(tmp_path):
    from torch.profiler import profile, record_function

    from d2l_ext import trace

    z = torch.zeros(10)
    snippets = {"z[3] = 0.0": lambda: operator.setitem(z, 3, 0.0),
                "z[1:4] = 0.0": lambda: operator.setitem(z, slice(1, 4), 0.0),
                "z[z > 0] = 1.0": lambda: operator.setitem(z, z > 0, 1.0),
                "x.sum().item()": lambda: z.sum().item()}
    with profile(activities=sync_profile.activities_for(torch.device("cpu"))) as prof:
        for name, f in snippets.items():
            with record_function(name):
                f()
    path = str(tmp_path / "snippets.json")
    prof.export_chrome_trace(path)
    events = trace.load_trace(path)
    found = {}
    for span in (e for e in events if e.name in snippets):
        found[span.name] = [e.name for e in sync_profile.sync_points(events)
                            if span.start_us <= e.start_us < span.end_us]
    assert found == {"z[3] = 0.0": ["aten::copy_"], "z[1:4] = 0.0": [],
                     "z[z > 0] = 1.0": [], "x.sum().item()": ["aten::_local_scalar_dense"]}


def test_step_costs_and_profile_steps_refuse_bad_input(tmp_path):
    path = tmp_path / "empty.json"
    path.write_text('{"traceEvents": []}')
    with pytest.raises(ValueError, match="no profiled step"):
        sync_profile.step_costs(str(path))
    with pytest.raises(ValueError, match="at least one"):
        sync_profile.profile_steps(lambda: None, str(path), [], active=0)


# --- MXNet ------------------------------------------------------------------------------------

def test_the_mxnet_losses_agree_and_wait_as_documented(tmp_path):
    mx = pytest.importorskip("mxnet")
    from d2l_ext import sync_profile_mxnet as smx

    device = mx.cpu()
    mx.npx.random.seed(0)
    net = smx.make_net(device, num_hidden=1)
    X, y = smx.random_batch(2, 5, device)  # an odd size
    values = [float(f(net(X), y)) for f in smx.LOSSES.values()]
    assert max(values) - min(values) < 1e-5
    single = mx.np.full(y.shape, 3, dtype=y.dtype, ctx=device)
    assert [float(f(net(X), single)) for f in smx.LOSSES.values()] == [0.0, 0.0, 0.0]
    # MXNet's profiler is one per process, and an earlier test may have used it and dumped it
    # finished: profile the steps in a fresh process
    path = tmp_path / "trace_mxnet.json"
    script = f"""
import mxnet as mx
from d2l_ext import sync_profile_mxnet as smx
mx.npx.set_np()
device = mx.cpu()
mx.npx.random.seed(0)
net = smx.make_net(device, num_hidden=1)
trainer = mx.gluon.Trainer(net.collect_params(), "sgd", {{"learning_rate": 0.0}})
X, y = smx.random_batch(2, 5, device)
mx.profiler.set_config(profile_all=True, aggregate_stats=True, filename={str(path)!r})
domain = mx.profiler.Domain("steps")
for name, loss_fn in smx.LOSSES.items():
    smx.profile_steps(lambda f=loss_fn: smx.train_step(net, trainer, f, X, y), name, 2, domain)
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300,
                   cwd=Path(__file__).resolve().parents[1])
    domain = mx.profiler.Domain("steps")
    events = smx.load_events(str(path))
    counts = {name: smx.step_costs(events, name)["syncs"] for name in smx.LOSSES}
    assert counts == {"original": 3, "sort": 2, "no_blocking": 0}
    assert str(smx.step_costs(events, "original")["order"]).startswith("_npi_unique")
    fig, axes = _plt().subplots(2, 1, figsize=(6, 4))
    rows = {key: key.upper() for key in smx.ROWS}
    assert "waits" not in smx.draw_steps(events, "original", axes[0], rows, title="original")
    assert "waits" in smx.draw_steps(events, "no_blocking", axes[1], rows)
    assert trace.row_names(axes[0]) == list(rows.values())
    assert len(axes[0].patches) == 2 and not axes[1].patches  # B shaded in each step
    _plt().close(fig)
    with pytest.raises(ValueError, match="no recorded step"):
        smx.window(events, "absent")
    with pytest.raises(ValueError, match="at least one"):
        smx.profile_steps(lambda: None, "x", 0, domain)


def test_each_sync_page_keeps_the_gpu_figures_its_own_cells_measure():
    """The chapter's GPU record is split by page: the main page's counts (figure-ops,
    figure-calls, figure-b) and the section page's timings and debug-mode counts, under one
    run."""
    from d2l_ext import catalogue, gpu_runs

    main, section = gpu_runs.load("host-device-sync"), gpu_runs.load(MEASURING)
    assert main is not None and section is not None
    say = catalogue.say
    main_labels = {say(f"host-device-sync/figure-{key}").en for key in ("ops", "calls", "b")}
    assert {f.en for f in main.figures} <= main_labels
    variants = ("original", "where", "sort", "ignore_index")
    section_labels = {say("host-device-sync/figure-debug").en,
                      say("host-device-sync/figure-ratio", final="ignore_index").en,
                      say("host-device-sync/figure-t-host", final="ignore_index").en,
                      say("host-device-sync/figure-log-1").en,
                      say("host-device-sync/figure-log-4").en}
    section_labels |= {say("host-device-sync/figure-step", name=name).en
                       for name in ("model_only", *variants)}
    section_labels |= {say(f"host-device-sync/figure-{kind}", name=name).en
                       for kind in ("busy", "profiled") for name in ("original", "ignore_index")}
    assert {f.en for f in section.figures} <= section_labels
    assert (main.run, main.commit, main.code_version) == (
        section.run, section.commit, section.code_version)
    assert section.chapter == MEASURING and main.chapter == "host-device-sync"
