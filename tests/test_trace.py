"""d2l_ext.trace: Chrome trace files read into events and drawn as a timeline."""

import json
import subprocess
import sys

import pytest

from d2l_ext import trace


def write(tmp_path, events, wrap=True):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events} if wrap else events))
    return path


def test_complete_and_begin_end_events(tmp_path):
    path = write(tmp_path, [
        {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": 10.0, "dur": 5.0, "tid": 1},
        {"ph": "X", "name": "gemm", "cat": "kernel", "ts": 12, "dur": 30, "tid": 7},
        {"ph": "B", "name": "outer", "ts": 0, "pid": 1, "tid": 2},
        {"ph": "B", "name": "inner", "ts": 1, "pid": 1, "tid": 2},
        {"ph": "E", "ts": 3, "pid": 1, "tid": 2},
        {"ph": "E", "ts": 9, "pid": 1, "tid": 2},
        {"ph": "M", "name": "process_name", "pid": 1},  # metadata: no time, skipped
    ])
    events = trace.load_trace(path)
    assert [(e.name, e.track, e.start_us, e.duration_us) for e in events] == [
        ("outer", "CPU thread 2", 0.0, 9.0), ("inner", "CPU thread 2", 1.0, 2.0),
        ("aten::mm", "CPU thread 1", 10.0, 5.0), ("gemm", "GPU stream 7", 12.0, 30.0)]
    assert events[-1].end_us == 42.0


def test_a_bare_list_of_events_is_read_too(tmp_path):
    path = write(tmp_path, [{"ph": "X", "name": "a", "ts": 1, "dur": 1}], wrap=False)
    assert [e.name for e in trace.load_trace(path)] == ["a"]


def test_a_file_that_is_not_a_trace_says_what_to_do(tmp_path):
    path = tmp_path / "step.json"
    path.write_text("not json")
    with pytest.raises(ValueError, match="export_chrome_trace"):
        trace.load_trace(path)


def bar_texts(ax):
    """The texts drawn on a timeline's bars and rows, not the rows' names."""
    return [t for t in ax.texts if t.get_text() not in trace.row_names(ax)]


def test_plot_rows_window_and_labels(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    events = [trace.Event("long op", "CPU thread 1", 0, 1000),
              trace.Event("tiny", "CPU thread 1", 1000, 1),
              trace.Event("kernel", "GPU stream 7", 200, 700),
              trace.Event("a name far longer than its bar", "GPU stream 7", 920, 60)]
    ax = trace.plot_timeline(events, min_duration_us=10)
    assert trace.row_names(ax) == ["CPU thread 1", "GPU stream 7"]
    assert {t.get_text() for t in bar_texts(ax)} == {"long op", "kernel"}
    assert ax.get_xlim() == (0.0, 1.0)  # milliseconds
    with pytest.raises(ValueError, match="no events"):
        trace.plot_timeline(events, start_us=5000)
    with pytest.raises(ValueError, match="no events"):
        trace.plot_timeline(events, tracks=["a row without events"])


def test_plot_marks_empty_rows_and_keeps_short_events_visible():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = [trace.Event("step", "host", 0, 10_000), trace.Event("sync", "waits", 500, 1)]
    ax = trace.plot_timeline(events, tracks=["host", "waits", "device"], start_us=0,
                             end_us=10_000)
    notes = [t for t in ax.texts if t.get_text() == "no events"]
    assert [round(t.get_position()[1]) for t in notes] == [2]  # the third row, "device"
    widths = sorted(w for c in ax.collections for w in (p.get_extents().width
                                                        for p in c.get_paths()))
    assert widths[0] == pytest.approx(0.002 * 10)  # 1 us drawn as 0.2 % of a 10 ms window
    plt.close("all")
    ax = trace.plot_timeline(events, tracks=["device"], start_us=0, end_us=10_000)
    assert [t.get_text() for t in bar_texts(ax)] == ["no events"]  # a window with nothing in it
    plt.close("all")


def test_a_real_pytorch_trace(tmp_path):
    torch = pytest.importorskip("torch")
    x = torch.randn(64, 64)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with torch.profiler.record_function("my step"):
            (x @ x).relu()
    path = tmp_path / "step.json"
    prof.export_chrome_trace(str(path))
    events = trace.load_trace(path)
    names = {e.name for e in events}
    assert {"my step", "aten::mm", "aten::relu"} <= names
    step = next(e for e in events if e.name == "my step")
    mm = next(e for e in events if e.name == "aten::mm")
    assert step.start_us <= mm.start_us and mm.end_us <= step.end_us


def test_mxnet_devices_name_the_rows(tmp_path):
    path = write(tmp_path, [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "cpu/0"}},
        {"ph": "B", "name": "_np_dot", "cat": "operator", "ts": 0, "pid": 0, "tid": 987654321},
        {"ph": "E", "name": "_np_dot", "cat": "operator", "ts": 4, "pid": 0, "tid": 987654321},
        {"ph": "B", "name": "_npi_add", "cat": "operator", "ts": 1, "pid": 0, "tid": 5},
        {"ph": "E", "name": "_npi_add", "cat": "operator", "ts": 2, "pid": 0, "tid": 5},
    ])
    assert [(e.name, e.track) for e in trace.load_trace(path)] == [
        ("_np_dot", "cpu/0 thread 1"), ("_npi_add", "cpu/0 thread 2")]


def test_async_events_are_matched_by_process_category_and_id(tmp_path):
    path = write(tmp_path, [
        {"ph": "M", "name": "process_name", "pid": 9, "args": {"name": "MXNET_C_API"}},
        {"ph": "b", "name": "outer", "cat": "api", "id": 1, "ts": 0, "pid": 9, "tid": 4},
        {"ph": "b", "name": "call", "cat": "api", "id": 2, "ts": 1, "pid": 9, "tid": 5},
        {"ph": "b", "name": "inner", "cat": "api", "id": 1, "ts": 2, "pid": 9, "tid": 4},
        {"ph": "e", "name": "inner", "cat": "api", "id": 1, "ts": 3, "pid": 9, "tid": 4},
        {"ph": "e", "name": "call", "cat": "api", "id": 2, "ts": 4, "pid": 9, "tid": 5},
        {"ph": "e", "name": "stray end", "cat": "api", "id": 3, "ts": 5, "pid": 9},
        {"ph": "b", "name": "other category", "cat": "task", "id": 1, "ts": 6, "pid": 9},
        {"ph": "e", "name": "outer", "cat": "api", "id": 1, "ts": 10, "pid": 9, "tid": 4},
        {"ph": "e", "name": "other category", "cat": "task", "id": 1, "ts": 12, "pid": 9},
        {"ph": "S", "name": "legacy", "cat": "old", "id": "0x1", "ts": 20},
        {"ph": "F", "name": "legacy", "cat": "old", "id": "0x1", "ts": 26},
        {"ph": "b", "name": "never ends", "cat": "api", "id": 7, "ts": 30, "pid": 9},
        {"ph": "i", "name": "instant", "ts": 31, "pid": 9},
    ])
    events = trace.load_trace(path)
    assert [(e.name, e.start_us, e.duration_us) for e in events] == [
        ("outer", 0, 10), ("call", 1, 3), ("inner", 2, 1), ("other category", 6, 6),
        ("legacy", 20, 6)]
    tracks = {e.name: e.track for e in events}
    assert tracks["outer"] == tracks["inner"] == "MXNET_C_API thread 1"  # the process, named
    assert tracks["call"] == "MXNET_C_API thread 2" and tracks["legacy"] == "old thread 1"
    rows = trace.load_trace(path, track=lambda e: "async" if e["ph"] in "bS" else None)
    assert len(rows) == 5 and {e.track for e in rows} == {"async"}


def test_a_trace_still_being_written_is_read(tmp_path):
    event = {"ph": "X", "name": "a", "ts": 1, "dur": 2}
    for text in (json.dumps({"traceEvents": [event, event]})[:-2],  # '{"traceEvents": [...'
                 json.dumps([event, event])[:-1] + ",\n",  # '[..., ' (the ']' is optional)
                 json.dumps([event])):
        path = tmp_path / "open.json"
        path.write_text(text)
        assert [e.name for e in trace.load_trace(path)] in (["a", "a"], ["a"])
    path.write_text('{"traceEvents": [{"ph": "X", "na')  # cut inside an event: not a trace
    with pytest.raises(ValueError, match="not a JSON trace"):
        trace.load_trace(path)


def test_a_real_mxnet_trace(tmp_path, numpy_too_new):
    """Operators (begin/end), the C API calls and profiler tasks (async), a wait for all
    arrays (async, MXNDArrayWaitAll), from a file left open by dump(finished=False)."""
    if numpy_too_new:
        pytest.skip("MXNet 1.9.1 needs numpy < 1.24")
    pytest.importorskip("mxnet")
    path = tmp_path / "mx.json"
    # MXNet's profiler is one per process, and an earlier test may have used it and dumped
    # it finished: record in a fresh process
    script = f"""
import mxnet as mx
from mxnet import np, npx
npx.set_np()
mx.profiler.set_config(profile_all=True, aggregate_stats=False, filename={str(path)!r})
mx.profiler.set_state("run")
task = mx.profiler.Task(mx.profiler.Domain("book"), "my step")
task.start()
a = np.ones((64, 64))
b = np.dot(a, a)
b[b > 1].wait_to_read()  # boolean indexing: the host waits for the result's size
task.stop()
npx.waitall()
mx.profiler.set_state("stop")
mx.profiler.dump(finished=False)  # the file is left without its closing brackets
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    events = trace.load_trace(path)
    names = {e.name for e in events}
    assert {"_np_dot", "_contrib_boolean_mask", "MXNDArrayWaitAll", "my step"} <= names
    assert all(e.duration_us >= 0 for e in events)
    by_name = {e.name: e for e in events}
    assert by_name["MXNDArrayWaitAll"].category == "MXNET_C_API"
    assert by_name["MXNDArrayWaitAll"].track.startswith("MXNET_C_API thread")
    step = by_name["my step"]
    assert step.track.startswith("book thread") and step.category == "book"
    assert step.start_us <= by_name["_np_dot"].start_us < step.end_us
    # MXNet writes each operator twice: begin/end on its device, async on "operator"
    assert {e.track.split(" thread")[0] for e in events if e.name == "_np_dot"} == {
        "cpu/0", "operator"}


def test_a_track_of_none_leaves_the_event_out(tmp_path):
    path = write(tmp_path, [
        {"ph": "B", "name": "outer", "ts": 0, "pid": 1, "tid": 2},
        {"ph": "B", "name": "skip me", "ts": 1, "pid": 1, "tid": 2},
        {"ph": "E", "ts": 2, "pid": 1, "tid": 2},
        {"ph": "E", "ts": 5, "pid": 1, "tid": 2},
        {"ph": "X", "name": "skip me too", "ts": 3, "dur": 1},
    ])
    events = trace.load_trace(path, track=lambda e: None if "skip" in e["name"] else "row")
    assert [(e.name, e.track, e.duration_us) for e in events] == [("outer", "row", 5.0)]


def test_busy_time_counts_overlapping_events_once_within_the_window():
    events = [trace.Event("a", "s1", 0, 10), trace.Event("b", "s2", 5, 10),  # overlap: 0-15
              trace.Event("inside b", "s2", 6, 2), trace.Event("c", "s1", 20, 5),  # 20-25
              trace.Event("empty", "s1", 30, 0)]
    assert trace.busy_time(events) == 20
    assert trace.busy_time(list(reversed(events))) == 20  # any order
    assert trace.busy_time(events, start_us=12) == 3 + 5
    assert trace.busy_time(events, 12, 22) == 3 + 2
    assert trace.busy_time(events, end_us=5) == 5
    assert trace.busy_time(events, 15, 20) == 0 and trace.busy_time([]) == 0


@pytest.fixture
def reader(monkeypatch):
    """Set the reader's language (no capture)."""
    monkeypatch.delenv("D2L_CAPTURE", raising=False)
    return lambda lang: monkeypatch.setenv("D2L_LANG", lang)


def test_the_timelines_own_texts_are_in_the_readers_language(reader, monkeypatch):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from d2l_ext import i18n

    events = [trace.Event("step", "host", 0, 10_000)]
    monkeypatch.setattr(i18n, "cjk_font", lambda: "WenQuanYi Micro Hei")
    for lang, empty, axis in (("en", "no events", "time (ms)"), ("zh", "无事件", "时间（毫秒）")):
        reader(lang)
        ax = trace.plot_timeline(events, tracks=["host", "device"], start_us=0, end_us=10_000)
        assert empty in [t.get_text() for t in ax.texts] and ax.get_xlabel() == axis
        plt.close("all")
    # a run that fills both editions draws English and renders the figure again in Chinese,
    # the rows' names too (tick labels would come back from their formatter when drawn)
    reader("en")
    rows = [i18n.label(en="host: steps", zh="主机：各步"), "stream 7 (no label)"]
    ax = trace.plot_timeline(events, tracks=rows, start_us=0, end_us=10_000)
    with i18n.translated(ax.figure):
        ax.figure.canvas.draw()
        assert ax.get_xlabel() == "时间（毫秒）" and "无事件" in [t.get_text() for t in ax.texts]
        assert trace.row_names(ax) == ["主机：各步", "stream 7 (no label)"]
    assert ax.get_xlabel() == "time (ms)" and trace.row_names(ax) == rows
    plt.close("all")


def test_bars_can_carry_a_text_of_their_own_that_must_fit():
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = [trace.Event("forward", "host", 0, 5_000), trace.Event("update", "host", 8_000, 1_500)]
    texts = {"forward": "前向传播", "update": "一个写不下的很长很长的名字"}
    ax = trace.plot_timeline(events, start_us=0, end_us=10_000, text=lambda e: texts[e.name])
    # 13 characters would fit the 1.5 ms bar, but they take 26 columns: Chinese is twice as wide
    assert [t.get_text() for t in bar_texts(ax)] == ["前向传播"]
    plt.close("all")
    events[1] = trace.Event("update", "host", 7_000, 3_000)
    ax = trace.plot_timeline(events, start_us=0, end_us=10_000, text=lambda e: texts[e.name])
    assert [t.get_text() for t in bar_texts(ax)] == ["前向传播", texts["update"]]
    plt.close("all")


def test_overlap_time_of_two_sides_counts_each_side_once():
    backward = [trace.Event("layer 3", "main", 0, 10), trace.Event("layer 2", "main", 12, 8),
                trace.Event("inside layer 2", "main", 14, 2)]  # nested: no extra time
    reduces = [trace.Event("bucket 1", "gloo 1", 5, 10),  # 5-15: 5 + 3 within backward
               trace.Event("bucket 2", "gloo 2", 8, 4),  # inside bucket 1: counted once
               trace.Event("bucket 3", "gloo 1", 25, 5)]  # after backward: disjoint
    assert trace.overlap_time(reduces, backward) == 8
    assert trace.overlap_time(backward, reduces) == 8  # symmetric
    assert trace.busy_time(reduces) == 15 and sum(e.duration_us for e in reduces) == 19
    assert trace.overlap_time(reduces, backward, start_us=6, end_us=13) == 4 + 1
    assert trace.overlap_time(reduces[2:], backward) == 0  # disjoint
    assert trace.overlap_time(reduces, []) == 0 and trace.overlap_time([], []) == 0
    inner = [trace.Event("x", "a", 2, 3)]  # nested in one event of the other side
    assert trace.overlap_time(inner, [trace.Event("y", "b", 0, 100)]) == 3


def test_one_row_per_thread_with_its_own_busy_time(tmp_path):
    """A DDP step as torch's profiler writes it: the main thread, and gloo's all-reduces on
    two worker threads that run at the same time."""
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = write(tmp_path, [
        {"ph": "X", "name": "autograd::engine::evaluate_function: AddmmBackward0",
         "cat": "cpu_op", "ts": 0, "dur": 40, "pid": 1, "tid": 1},
        {"ph": "X", "name": "gloo:all_reduce", "cat": "cpu_op", "ts": 10, "dur": 30,
         "pid": 1, "tid": 21},
        {"ph": "X", "name": "gloo:all_reduce", "cat": "cpu_op", "ts": 20, "dur": 30,
         "pid": 1, "tid": 22},
        {"ph": "X", "name": "gloo:all_reduce", "cat": "cpu_op", "ts": 60, "dur": 10,
         "pid": 1, "tid": 21},
    ])
    events = trace.load_trace(path)
    rows = trace.by_track(events)
    assert list(rows) == ["CPU thread 1", "CPU thread 21", "CPU thread 22"]
    assert [len(r) for r in rows.values()] == [1, 2, 1]
    reduces = [e for e in events if e.name == "gloo:all_reduce"]
    assert {t: trace.busy_time(r) for t, r in rows.items() if t != "CPU thread 1"} == {
        "CPU thread 21": 40, "CPU thread 22": 30}
    assert trace.busy_time(reduces) == 50  # 10-50 and 60-70, not 30 + 30 + 10
    assert trace.overlap_time(reduces, rows["CPU thread 1"]) == 30  # 10-40
    ax = trace.plot_timeline(events, tracks=list(rows))
    assert trace.row_names(ax) == list(rows)  # each thread on a row of its own
    plt.close("all")
