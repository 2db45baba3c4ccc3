"""Tests of d2l_ext.gputrace: on small hand-made traces whose answers are known exactly, and on
the real GPU traces the book ships (d2l_ext/data/gpu_traces), recorded by others."""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from d2l_ext import gputrace as g
from d2l_ext import trace
from d2l_ext.trace import busy_time

DATA = Path(g.__file__).parent / "data" / "gpu_traces"


# ---------------------------------------------------------------------------------------------
# Hand-made traces


def x(cat, name, pid, tid, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def flow(phase, flow_id, pid, tid, ts, cat="ac2g", name="ac2g"):
    event = {"ph": phase, "id": flow_id, "pid": pid, "tid": tid, "ts": ts, "cat": cat,
             "name": name}
    if phase == "f":
        event["bp"] = "e"
    return event


def meta(what, pid, tid, **args):
    return {"ph": "M", "name": what, "pid": pid, "tid": tid, "args": args}


def launch(call, corr, ts, dur, kernel_cat, kernel, tid, start, kdur, flows=True, **kargs):
    """A runtime call on host thread 100 and the device event it caused (new generation)."""
    events = [x("cuda_runtime", call, 100, 100, ts, dur, correlation=corr),
              x(kernel_cat, kernel, 0, tid, start, kdur, correlation=corr, **kargs)]
    if flows:
        events += [flow("s", corr, 100, 100, ts), flow("f", corr, 0, tid, start)]
    return events


def new_trace() -> dict:
    """A trace of the current profiler: two streams, five pieces of work, two syncs, a join."""
    ev = [meta("process_labels", 0, 0, labels="GPU 0"),
          meta("process_labels", 100, 0, labels="CPU"),
          meta("thread_name", 0, 7, name="stream 7 "), meta("thread_name", 0, 9, name="stream 9 "),
          x("user_annotation", "ProfilerStep#1", 100, 100, 0, 100),
          x("user_annotation", "ProfilerStep#2", 100, 100, 100, 30),
          x("cpu_op", "aten::mm", 100, 100, 0, 26, **{"External id": 1}),
          # a forward-backward flow with the id of a launch flow: not a launch
          flow("s", 1, 100, 100, 0, cat="fwdbwd", name="fwdbwd"),
          flow("f", 1, 0, 9, 60, cat="fwdbwd", name="fwdbwd")]
    ev += launch("cudaLaunchKernel", 1, 10, 5, "kernel", "k1", 7, 20, 30, device=0, stream=7)
    ev += launch("cudaLaunchKernel", 2, 16, 4, "kernel", "k2", 7, 50, 20)  # stream from tid
    ev += launch("cudaLaunchKernel", 3, 21, 4, "kernel", "k3", 9, 60, 20, flows=False,
                 device=0, stream=9)
    # as real traces have it: an "f" flow on a host call, with no "s"
    ev += [x("cuda_runtime", "cudaEventRecord", 100, 100, 26, 1, correlation=5),
           flow("f", 5, 100, 100, 26)]
    ev += launch("cudaStreamWaitEvent", 6, 27, 1, "cuda_sync", "Stream Wait Event", 9, 28, 1,
                 device=0, stream=9, wait_on_stream=7, wait_on_cuda_event_record_corr_id=5,
                 cuda_sync_kind="Stream Wait Event")
    ev += launch("cudaDeviceSynchronize", 7, 30, 51, "cuda_sync", "Context Sync", -1, 30, 51,
                 device=0, stream=-1, cuda_sync_kind="Context Sync")
    ev += [x("cpu_op", "aten::item", 100, 100, 84, 12)]
    ev += launch("cudaMemcpyAsync", 8, 85, 10, "gpu_memcpy", "Memcpy DtoH (Device -> Pageable)",
                 7, 90, 2, device=0, stream=7)
    ev += [x("cpu_op", "optimizer.step", 100, 101, 96, 12)]  # another host thread
    ev += launch("cudaLaunchKernel", 9, 100, 4, "kernel", "k4", 7, 110, 10, device=0, stream=7)
    ev += [x("Trace", "PyTorch Profiler (0)", "Spans", "PyTorch Profiler", 0, 130),
           {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": 130}]
    return {"schemaVersion": 1, "traceEvents": ev}


def old_trace() -> dict:
    """A trace of kineto 2021: string tids, stream tids "stream 7", flows async/launch."""
    def call(name, corr, ts, dur):
        return x("Runtime", name, 200, "200", ts, dur, correlation=corr,
                 **{"external id": 1})

    def flows(corr, ts, start):
        return [flow("s", corr, 200, 200, ts, cat="async", name="launch"),
                flow("f", corr, 0, "stream 7", start, cat="async", name="launch")]

    ev = [meta("process_labels", 0, 0, labels="GPU 0"),
          meta("process_labels", 200, 0, labels="CPU"),
          x("Operator", "ProfilerStep#3", 200, "200", 0, 50),
          x("Operator", "aten::to", 200, "200", 0, 12, **{"External id": 1}),
          call("cudaMemcpyAsync", 10, 1, 10),
          x("Memcpy", "Memcpy HtoD (Pageable -> Device)", 0, "stream 7", 3, 6, device=0,
            correlation=10),
          *flows(10, 1, 3),
          call("cudaStreamSynchronize", 11, 11, 1),
          call("cudaLaunchKernel", 12, 15, 2),
          x("Kernel", "conv", 0, "stream 7", 20, 10, device=0, stream=7, correlation=12),
          *flows(12, 15, 20),
          call("cudaMemsetAsync", 13, 18, 1),
          x("Memset", "Memset (Device)", 0, "stream 7", 30, 1, device=0, stream=7,
            correlation=13),
          *flows(13, 18, 30)]
    return {"schemaVersion": 1, "traceEvents": ev}


@pytest.fixture(scope="module")
def new(tmp_path_factory) -> list[g.GpuEvent]:
    file = tmp_path_factory.mktemp("new") / "new.json.gz"  # read gzipped
    file.write_bytes(gzip.compress(json.dumps(new_trace()).encode()))
    return g.read(file)


@pytest.fixture(scope="module")
def old(tmp_path_factory) -> list[g.GpuEvent]:
    file = tmp_path_factory.mktemp("old") / "old.json"  # read plain
    file.write_text(json.dumps(old_trace()))
    return g.read(file)


def named(events, name):
    (found,) = [e for e in events if e.name == name]
    return found


def test_classify_both_generations():
    assert [g.classify(c) for c in ("Runtime", "Kernel", "Memcpy", "Memset", "Operator")] == [
        "runtime", "kernel", "memcpy", "memset", "op"]
    assert [g.classify(c) for c in ("cuda_runtime", "kernel", "gpu_memcpy", "gpu_memset",
                                    "cuda_sync", "cpu_op", "user_annotation")] == [
        "runtime", "kernel", "memcpy", "memset", "sync", "op", "annotation"]
    assert g.classify("Trace") == g.classify("python_function") == ""


def test_events_tracks_and_fields(new, old):
    k1, k2 = named(new, "k1"), named(new, "k2")
    assert isinstance(k1, trace.Event)
    assert (k1.kind, k1.device, k1.stream, k1.track) == ("kernel", 0, 7, "GPU 0 stream 7")
    assert (k2.device, k2.stream) == (0, 7)  # from the GPU process and the stream's tid
    sync = named(new, "Context Sync")
    assert (sync.kind, sync.stream, sync.track) == ("sync", -1, "GPU 0")
    mm = named(new, "aten::mm")
    assert (mm.kind, mm.on_device, mm.thread, mm.track, mm.external_id) == (
        "op", False, 100, "CPU thread 100", 1)
    assert named(new, "PyTorch Profiler (0)").kind == ""
    assert [e.start_us for e in new] == sorted(e.start_us for e in new)
    copy = named(old, "Memcpy HtoD (Pageable -> Device)")
    assert (copy.kind, copy.device, copy.stream, copy.track) == ("memcpy", 0, 7, "GPU 0 stream 7")
    conv = named(old, "conv")
    assert (conv.kind, conv.correlation, conv.flow) == ("kernel", 12, 12)
    step = named(old, "ProfilerStep#3")
    assert (step.kind, step.thread, step.track) == ("op", 200, "CPU thread 200")
    assert named(old, "cudaLaunchKernel").external_id == 1


def test_flows_bind_only_launch_pairs(new):
    assert named(new, "k1").flow == 1 and named(new, "cudaEventRecord").flow is None
    assert named(new, "k3").flow is None  # its only flow is a forward-backward one


def test_launches_and_leads(new, old):
    links = g.launches(new)
    assert [(link.call.name, link.work.name, link.via, link.lead_us) for link in links] == [
        ("cudaLaunchKernel", "k1", "flow", 10), ("cudaLaunchKernel", "k2", "flow", 34),
        ("cudaLaunchKernel", "k3", "correlation", 39),
        ("cudaMemcpyAsync", "Memcpy DtoH (Device -> Pageable)", "flow", 5),
        ("cudaLaunchKernel", "k4", "flow", 10)]
    assert [link.delay_us for link in links] == [5, 30, 35, -5, 6]
    assert g.lead_stats(links) == {"count": 5, "min": 5, "median": 10, "mean": 19.6, "max": 39}
    assert g.lead_stats([])["count"] == 0
    assert [link.work.name for link in g.launches(new, kinds=("sync",))] == [
        "Stream Wait Event", "Context Sync"]
    assert [link.work.name for link in g.launches(new, start_us=16, end_us=85)] == ["k2", "k3"]
    assert [(link.via, link.lead_us) for link in g.launches(old)] == [
        ("flow", 2), ("flow", 5), ("flow", 12)]


def test_queue_depth_exact(new):
    links = g.launches(new)
    assert g.queue_depth(links) == [(10, 1), (16, 2), (21, 3), (50, 2), (70, 1), (80, 0),
                                    (85, 1), (92, 0), (100, 1), (120, 0)]
    assert g.queue_depth(links, until="start") == [(10, 1), (16, 2), (20, 1), (21, 2), (50, 1),
                                                   (60, 0), (85, 1), (90, 0), (100, 1), (110, 0)]
    assert g.queue_depth(links, stream=9) == [(21, 1), (80, 0)]
    stats = g.depth_stats(g.queue_depth(links), 0, 130)
    assert stats["max"] == 3
    assert stats["mean"] == pytest.approx(180 / 130)
    assert stats["empty_fraction"] == pytest.approx(33 / 130)
    assert g.depth_stats(g.queue_depth(links), 21, 50) == {
        "max": 3, "mean": 3.0, "empty_fraction": 0.0}
    with pytest.raises(ValueError):
        g.queue_depth(links, until="middle")


def test_queue_depth_counts_a_handover_once():
    """One piece ends as the next call starts: the queue holds one, never two."""
    def ev(name, start, dur, device=None):
        return g.GpuEvent(name, "t", start, dur, kind="kernel" if device is not None
                          else "runtime", device=device, stream=0 if device is not None else None)
    links = [g.Launch(ev("a", 0, 1), ev("ka", 5, 5, 0), "flow"),
             g.Launch(ev("b", 10, 1), ev("kb", 12, 3, 0), "flow")]
    assert g.queue_depth(links) == [(0, 1), (15, 0)]
    assert g.depth_stats(g.queue_depth(links))["max"] == 1


def test_steps_and_idle(new, old):
    steps = g.steps(new)
    assert [(s.number, s.duration_us, s.busy_us, s.idle_us) for s in steps] == [
        (1, 100, 62, 38), (2, 30, 10, 20)]
    assert steps[0].idle_fraction == pytest.approx(0.38)
    (step,) = g.steps(old)
    assert (step.number, step.busy_us, step.idle_us) == (3, 17, 33)


def test_gaps_and_what_the_host_did(new):
    found = g.gaps(new, 0, 130)
    assert [(gap.start_us, gap.end_us) for gap in found] == [(0, 20), (92, 110), (80, 90),
                                                             (120, 130)]
    assert sum(gap.duration_us for gap in found) == 130 - busy_time(g.work(new))
    assert found[0].doing == "aten::mm"
    assert found[1].host == (("optimizer.step", 12), ("cudaLaunchKernel", 4),
                             ("aten::item", 4), ("cudaMemcpyAsync", 3))
    assert found[2].doing == "aten::item"
    assert found[3].host == () and found[3].doing == ""
    assert [(gap.start_us, gap.end_us) for gap in g.gaps(new)] == [(92, 110), (80, 90)]
    assert len(g.gaps(new, 0, 130, min_us=15)) == 2 and len(g.gaps(new, 0, 130, top=1)) == 1
    assert g.idle_spans([], 0, 5) == [(0, 5)] and g.idle_spans([]) == []


def test_idle_split_by_launched_work(new):
    """Idle with work launched but not started (the call began, the work had not), and idle
    with nothing launched: gaps (0, 20), (80, 90), (92, 110), (120, 130)."""
    split = g.idle_split(new, 0, 130)
    assert (split.launched_us, split.empty_us) == (10 + 5 + 10, 10 + 5 + 8 + 10)
    assert split.idle_us == 130 - busy_time(g.work(new))
    assert g.idle_split(new, 92, 110) == g.IdleSplit(10, 8)
    assert g.idle_split(new, 25, 45) == g.IdleSplit(0, 0)  # k1 ran throughout
    assert g.idle_split([], 0, 5) == g.IdleSplit(0, 5)


def test_syncs(new, old):
    found = g.syncs(new)
    assert [(s.call.name, s.wait_us, s.device_event.name, s.idle_start_us, s.idle_end_us,
             s.idle_after_us, s.gap_us) for s in found] == [
        ("cudaDeviceSynchronize", 51, "Context Sync", 80, 90, 9, 10),
        ("cudaMemcpyAsync", 10, "Memcpy DtoH (Device -> Pageable)", 92, 110, 15, 18)]
    (sync,) = g.syncs(old)  # the host-to-device copy is not one
    assert (sync.call.name, sync.wait_us, sync.device_event, sync.idle_after_us, sync.gap_us) == (
        "cudaStreamSynchronize", 1, None, 8, 11)


def test_streams_busy_overlap_and_joins(new):
    assert g.stream_busy(new) == {7: 62, 9: 20}
    assert g.overlap(new, 7, 9) == g.overlap(new, 9, 7) == 10
    assert g.overlap(new, 7, 9, 65, 130) == 5
    assert g.stream_busy(new, 65, 130) == {7: 17, 9: 15}
    (join,) = g.joins(new)
    assert (join.call.name, join.marker.name, join.stream, join.on_stream) == (
        "cudaStreamWaitEvent", "Stream Wait Event", 9, 7)
    assert join.record is named(new, "cudaEventRecord")


# ---------------------------------------------------------------------------------------------
# The shipped real traces


def test_names_load_and_unknown_name():
    files = sorted(p.name for p in DATA.glob("*.json.gz"))
    assert sorted(g.SHIPPED[n][0] for n in g.names()) == files
    with pytest.raises(KeyError) as err:
        g.load("resnet50_v100")
    assert all(n in str(err.value) for n in g.names())


def provenance_rows() -> dict[str, str]:
    """PROVENANCE.md's table: file -> its row, with "as above" replaced by the row above's
    source."""
    rows, previous = {}, ""
    for line in (DATA / "PROVENANCE.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`([^`]+\.json\.gz)`", cells[0]) if len(cells) == 5 else None
        if not match:
            continue
        if cells[1].startswith("as above"):
            cells[1] = previous
        previous = cells[1]
        rows[match.group(1)] = " | ".join(cells)
    return rows


def test_provenance_agrees_with_provenance_md():
    rows = provenance_rows()
    assert sorted(rows) == sorted(p.name for p in DATA.glob("*.json.gz"))
    for name in g.names():
        file, gpu, source, licence = g.SHIPPED[name]
        row = rows[file]
        repo, commit = (part.strip() for part in source.split("@"))
        assert commit in row and repo.split("/")[-1] in row, name
        assert licence in row, name
        assert gpu.removeprefix("GPU ").split(" (")[0] in row, name
        line = g.provenance(name)
        assert "\n" not in line and all(s in line for s in (gpu, source, licence))


def test_gpu_names_agree_with_the_traces():
    for name in g.names():
        devices = g.metadata(name).get("deviceProperties")
        gpu = g.SHIPPED[name][1]
        if devices:
            assert devices[0]["name"] == gpu, name
        else:
            assert "not named" in gpu and name == "nccl_rank0_sampled"


def test_reader_agrees_with_trace_load_trace(tmp_path):
    for name in ("event_sync_a100", "alexnet_a100_sync"):
        plain = tmp_path / f"{name}.json"
        plain.write_bytes(gzip.decompress(g.path(name).read_bytes()))
        theirs = Counter((e.name, e.start_us, e.duration_us, e.category)
                         for e in trace.load_trace(plain))
        ours = Counter((e.name, e.start_us, e.duration_us, e.category) for e in g.load(name))
        assert ours == theirs, name


def test_real_vocabulary():
    kinds = Counter(e.kind for e in g.load("resnet50_v100_num_workers_0"))
    assert kinds == {"op": 11820, "runtime": 5961, "kernel": 4402, "memset": 158, "memcpy": 6}
    kinds = Counter(e.kind for e in g.load("alexnet_a100_sync"))
    assert kinds == {"runtime": 361, "op": 359, "kernel": 79, "sync": 41, "memcpy": 16,
                     "annotation": 8, "memset": 3, "": 1}
    assert {e.track for e in g.work(g.load("resnet50_v100_num_workers_0"))} == {"GPU 0 stream 7"}
    assert g.stream_busy(g.load("nccl_rank0_sampled")).keys() == {7, 23, 25, 84, 203}


def test_real_resnet_steps_with_and_without_loader_workers():
    for name, expected in [
            ("resnet50_v100_num_workers_0", [(6, 173992, 99343), (7, 176918, 97843),
                                             (8, 181259, 107276)]),
            ("resnet50_v100_num_workers_4", [(6, 123884, 100419), (7, 126824, 101801),
                                             (8, 126272, 104727)])]:
        events = g.load(name)
        steps = g.steps(events)
        assert [(s.number, s.duration_us, s.busy_us) for s in steps] == expected, name
        for s in steps:
            found = g.gaps(events, s.start_us, s.end_us)
            assert sum(gap.duration_us for gap in found) == pytest.approx(s.idle_us)
            if name.endswith("_0"):  # the device waits for the loader in the training process
                assert s.idle_fraction > 0.4 and found[0].duration_us > 55000
                assert found[0].doing.startswith("enumerate(DataLoader)#_SingleProcess")
            else:
                assert s.idle_fraction < 0.2 and found[0].duration_us < 2400


def test_real_launch_links():
    for name in g.names():
        events = g.load(name)
        links = g.launches(events)
        assert all(link.lead_us >= 0 for link in links), name  # no work before its call
        assert len({id(link.work) for link in links}) == len(links), name
        assert all(link.call.start_us <= link.work.start_us for link in links), name
    via = Counter(link.via for link in g.launches(g.load("alexnet_a100_sync")))
    assert via == {"flow": 98}
    via = Counter(link.via for link in g.launches(g.load("nccl_rank0_sampled")))
    assert via == {"correlation": 1204}  # this trace has no flow events
    # the ResNet trace was cut at step 6: the work it did not link was launched before that
    events = g.load("resnet50_v100_num_workers_0")
    linked = {id(link.work) for link in g.launches(events)}
    unlinked = [e for e in g.work(events) if id(e) not in linked]
    first_call = min(e.correlation for e in events if e.kind == "runtime")
    assert len(unlinked) == 542 and all(e.correlation < first_call for e in unlinked)


def test_real_lead_and_queue_depth_of_alexnet():
    events = g.load("alexnet_a100_sync")
    window = [e for e in events if e.name.endswith("|measure|forward]")][-1]
    links = g.launches(events, start_us=window.start_us, end_us=window.end_us)
    assert g.lead_stats(links) == {"count": 40, "min": 12, "median": 878.5, "mean": 819.85,
                                   "max": 1539}
    series = g.queue_depth(g.launches(events))
    assert min(d for _, d in series) >= 0 and series[-1][1] == 0
    assert g.depth_stats(series, window.start_us, window.end_us)["max"] == 19


def test_real_syncs():
    found = g.syncs(g.load("event_sync_a100"))
    assert [(s.call.name, s.wait_us, s.device_event.name) for s in found] == [
        ("cudaMemcpyAsync", 29, "Memcpy DtoH (Device -> Pageable)"),
        ("cudaStreamSynchronize", 6, "Stream Sync"),
        ("cudaEventSynchronize", 34, "Event Sync"),
        ("cudaDeviceSynchronize", 8, "Context Sync")]
    assert (found[1].idle_after_us, found[1].gap_us) == (84, 100)
    # the event sync returned 8 µs after the 36 µs spin kernel it waited for ended
    assert found[2].call.end_us - found[2].idle_start_us == 8
    assert found[2].idle_after_us is None  # no more work in the trace
    names = Counter(s.call.name for s in g.syncs(g.load("alexnet_a100_sync")))
    assert names == {"cudaStreamSynchronize": 16, "cudaDeviceSynchronize": 5}


def test_real_streams_and_joins():
    events = g.load("event_sync_multi_stream_a100")
    (join,) = g.joins(events)
    assert (join.stream, join.on_stream, join.record.name, join.record.correlation) == (
        24, 20, "cudaEventRecord", 1385)
    assert g.stream_busy(events) == {20: 124, 24: 124, 28: 124}
    assert g.overlap(events, 20, 24) == g.overlap(events, 24, 28) == 0
    joins = g.joins(g.load("alexnet_a100_sync"))
    assert len(joins) == 34 and sum(j.marker is not None for j in joins) == 20
    events = g.load("nccl_rank0_sampled")
    for step, expected in zip(g.steps(events), (23169, 36148)):
        busy = g.stream_busy(events, step.start_us, step.end_us)
        both = g.overlap(events, 7, 84, step.start_us, step.end_us)
        assert both == expected and both <= min(busy[7], busy[84])
        assert both == g.overlap(events, 84, 7, step.start_us, step.end_us)


def test_real_idle_split_of_the_nccl_trace():
    """Most of rank 0's idle time had work launched that had not started: the longest gap of
    step 551 had backward kernels queued through nearly all of it. The file holds no event,
    stream-wait or synchronisation call that could say what they waited on."""
    events = g.load("nccl_rank0_sampled")
    splits = [g.idle_split(events, s.start_us, s.end_us) for s in g.steps(events)]
    assert [(s.launched_us, s.empty_us) for s in splits] == [(205508, 123124), (195561, 158391)]
    assert [s.idle_us for s in splits] == [s.idle_us for s in g.steps(events)]
    step = g.steps(events)[0]
    longest = g.gaps(events, step.start_us, step.end_us, top=1)[0]
    assert g.idle_split(events, longest.start_us, longest.end_us) == g.IdleSplit(56227, 387)
    calls = Counter(e.name for e in events if e.kind == "runtime")
    assert calls == {"cudaLaunchKernel": 1154, "cudaMemcpyAsync": 40, "cudaMemsetAsync": 10}


# ---------------------------------------------------------------------------------------------
# Cross-checks with HolisticTraceAnalysis, where it is installed


@pytest.fixture(scope="module")
def hta(tmp_path_factory):
    pytest.importorskip("hta")
    import logging

    from hta.trace_analysis import TraceAnalysis

    logging.getLogger("hta").setLevel(logging.ERROR)

    def analysis(name):
        folder = tmp_path_factory.mktemp(name)
        (folder / g.SHIPPED[name][0]).write_bytes(g.path(name).read_bytes())
        return TraceAnalysis(trace_dir=str(folder))
    return analysis


def test_hta_idle_time_and_queue_length(hta):
    """HTA's idle time (of work launched before the last step) and its queue length per
    stream (launched, not yet started) agree with ours, on the 2021 ResNet-50 trace."""
    name = "resnet50_v100_num_workers_0"
    analysis, events = hta(name), g.load(name)
    last = g.steps(events)[-1]
    links = g.launches(events, end_us=last.start_us)
    device_work = [link.work for link in links]
    span = max(e.end_us for e in device_work) - min(e.start_us for e in device_work)
    (row,) = analysis.get_temporal_breakdown(visualize=False).to_dict("records")
    assert row["kernel_time(us)"] == span == 297539
    assert row["idle_time(us)"] == span - busy_time(device_work) == 96315
    series = analysis.get_queue_length_time_series(ranks=[0])[0]
    theirs = series.sort_values("ts", kind="stable").groupby("ts")["queue_length"].last()
    changes, depth = [], 0
    for t, value in theirs.items():
        if value != depth:
            changes.append((float(t), int(value)))
            depth = value
    ours = g.queue_depth(links, until="start", stream=7)
    assert len(ours) == len(changes) == 6006
    shift = ours[0][0] - changes[0][0]  # HTA counts time from the trace's first event
    assert [(t + shift, d) for t, d in changes] == ours


def test_hta_kernel_launch_stats(hta):
    name = "alexnet_a100_sync"
    stats = hta(name).get_cuda_kernel_launch_stats(visualize=False)[0]
    theirs = {int(r["correlation"]): (r["cpu_duration"], r["gpu_duration"], r["launch_delay"])
              for r in stats.to_dict("records")}
    ours = {link.work.correlation: (link.call.duration_us, link.work.duration_us,
                                    max(link.delay_us, 0.0)) for link in g.launches(g.load(name))}
    assert len(ours) == 98 and ours == theirs
