"""Chapter "GPU basics": the hand-built DataParallel the page teaches gives the one-device
result (and exercise 5's answer is what it gives with BatchNorm), the roofline counts each
operation's FLOPs and bytes right, takes each roof from the fastest timing of its best probe
and flags only the points that write-allocate cannot explain, the memory cells show the
training sawtooth on a CPU (MXNet's in a fresh process, so the cell can run again), the
memory counters fall back to torch.cuda on an older PyTorch, the Hogwild conclusions follow
the timings, and the page's Hogwild script learns in every configuration, speaks the reader's
language and fails cleanly. The copies and the roofline time by the library's rules
(d2l.time_per_call); on a GPU the copies are read against that GPU's own datasheet, and the
prose cites the figures kept from the book's GPU run (d2l_ext/data/gpu_runs/gpu-basics.json),
whose labels line up with the page's table and which leaves out the copy that the earlier
code timed wrongly."""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The chapter's pages (English): the main page, then its section page.
PAGES = [ROOT / "chapters" / "en" / f"{name}.md" for name in ("gpu-basics", "gpu-basics-streams")]


def _cell(framework: str | None, marker: str) -> str:
    """The chapter's one code cell of ``framework`` (``None``: shared) that contains ``marker``,
    with the collapsed cells right after it (its formatting, split off so that the page
    collapses it): the two run as one."""
    pytest.importorskip("yaml", reason="the book tools need the full environment")
    sys.path.insert(0, str(ROOT / "tools"))
    from page_cells import cell_with_presentation
    from pipeline import sources

    cells = [cell for page in PAGES for cell in sources.parse(page).cells]
    return cell_with_presentation(cells, marker, framework)


def _run_cells(framework: str, markers: tuple[str, ...], names: dict) -> dict:
    """Execute the page's code cells of ``framework`` that contain the markers, in order."""
    for marker in markers:
        exec(_cell(framework, marker), names)
    return names


def _torch_names() -> dict:
    torch = pytest.importorskip("torch")
    from d2l_ext import torch as d2l
    from d2l_ext.utils import text_table

    return _run_cells("torch", ("def data_parallel(", "one_device = outputs_and_grads"), {
        "torch": torch, "nn": torch.nn, "F": torch.nn.functional, "d2l": d2l,
        "text_table": text_table})


def test_the_pages_data_parallel_equals_one_device_torch():
    import torch

    from d2l_ext import parallel

    names = _torch_names()
    assert len(names["devices"]) == 2
    assert names["replicate"] is parallel.replicate  # without two GPUs: the stand-ins
    (label, outputs, gradients), = names["dp_rows"]
    assert label == "hand-built, cpu, cpu"
    assert outputs < 1e-6 and gradients < 1e-4
    # an odd batch, and one smaller than the number of devices
    data_parallel, lenet = names["data_parallel"], names["lenet"]
    for batch in (5, 1):
        X = torch.randn(batch, 1, 28, 28)
        torch.testing.assert_close(data_parallel(lenet, X, [torch.device("cpu")] * 3), lenet(X))


def test_exercise_5s_answer_is_what_the_pages_code_gives_torch():
    """With a BatchNorm layer in training mode, the page's two-device forward pass differs
    from one device's (each slice is normalised with its own statistics)."""
    import torch
    from torch import nn

    names = _torch_names()
    torch.manual_seed(0)
    bn_net = nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.BatchNorm2d(6), nn.ReLU(),
                           nn.Flatten(), nn.Linear(6 * 28 * 28, 10))
    X = torch.randn(16, 1, 28, 28)
    got = names["data_parallel"](bn_net, X, names["devices"])
    assert not torch.allclose(got, bn_net(X), atol=1e-4)


def test_the_pages_data_parallel_equals_one_device_mxnet(numpy_too_new):
    if numpy_too_new:
        pytest.skip("MXNet needs numpy < 1.24")
    mx = pytest.importorskip("mxnet")
    from mxnet import autograd, gluon, init, np, npx

    from d2l_ext import mxnet as d2l
    from d2l_ext.utils import text_table

    npx.set_np()
    names = _run_cells("mxnet", ("def data_parallel(", "def make_lenet("), {
        "mx": mx, "autograd": autograd, "gluon": gluon, "init": init, "np": np, "d2l": d2l,
        "text_table": text_table})
    (label, outputs, gradients), = names["dp_rows"]
    assert label == "hand-built, cpu(0), cpu(1)"
    assert outputs < 1e-5 and gradients < 1e-4

    # exercise 5: with BatchNorm in training mode the outputs differ from one device's
    def bn_net():
        net = gluon.nn.Sequential()
        net.add(gluon.nn.Conv2D(6, 5, padding=2), gluon.nn.BatchNorm(),
                gluon.nn.Activation("relu"), gluon.nn.Dense(10))
        return net

    X, y, devices = names["X"], names["y"], names["devices"]
    one, many = bn_net(), bn_net()
    one.initialize(init.Xavier(), ctx=devices[0])
    one(X)
    many.initialize(ctx=devices)
    many(X)
    for p_one, p_many in zip(one.collect_params().values(), many.collect_params().values()):
        p_many.set_data(p_one.data())
    with autograd.record():
        one_out = one(X)
    out, _ = names["data_parallel"](many, X, y, names["loss"], devices)
    assert names["relative_difference"](out, one_out) > 1e-3


def _framework_names(framework: str, numpy_too_new: bool) -> dict:
    """The names the page's cells of ``framework`` expect, on the CPU, at smoke size."""
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from d2l_ext.utils import significant, text_table

    if framework == "torch":
        torch = pytest.importorskip("torch")
        from d2l_ext import memory
        from d2l_ext import torch as d2l
        from d2l_ext.timing import calls_per_block

        names = {"torch": torch, "F": torch.nn.functional, "d2l": d2l, "memory": memory,
                 "warnings": warnings, "device": torch.device("cpu"),
                 "calls_per_block": calls_per_block}
    else:
        if numpy_too_new:
            pytest.skip("MXNet needs numpy < 1.24")
        mx = pytest.importorskip("mxnet")
        from mxnet import autograd, gluon, init, np, npx

        from d2l_ext import mxnet as d2l

        npx.set_np()
        names = {"mx": mx, "np": np, "npx": npx, "autograd": autograd, "gluon": gluon,
                 "init": init, "d2l": d2l, "json": json, "os": os, "subprocess": subprocess,
                 "sys": sys, "device": mx.cpu(), "on_gpu": False}
    from d2l_ext import datasheets

    names.update(smoke=True, plt=plt, text_table=text_table, significant=significant,
                 datasheets=datasheets,
                 statistics=statistics, device_name="CPU",
                 # what the copy cells leave for the roofline: a CPU's one row, no datasheet
                 copies={"host → host": (10.0, 9.0, 11.0)},
                 copy_names={"host → host": d2l.message(en="host → host",
                                                         zh="主机内存 → 主机内存")},
                 sheet=None, example=datasheets.SHEETS["H100 SXM"])
    return names


def _shared_cell(marker: str) -> str:
    return _cell(None, marker)


@pytest.mark.parametrize("framework", ["torch", "mxnet"])
def test_the_pages_roofline_counts_flops_and_bytes(framework, numpy_too_new):
    """The page's roofline cells at smoke size: each operation's intensity is the one its
    formula gives, the roof above it is min(peak, intensity x bandwidth), the bound named is
    the side of the ridge point it falls on, each roof is the fastest round of its best probe
    (not a median, not the last size), every probe, point and product has one rate per round,
    each point's share is read against the roofs of its own rounds, and the ranges hold their
    medians."""
    import matplotlib.pyplot as plt

    names = _framework_names(framework, numpy_too_new)
    _run_cells(framework, ("def in_rounds(",), names)
    exec(_shared_cell("ridge = peak / bandwidth"), names)
    plt.close("all")
    n, m, sizes = names["n"], names["m"], names["sizes"]
    expected = [1 / 12, 2 * m * m / (4 * (m * m + 2 * m)), *(s / 6 for s in sizes)]
    points, ridge = names["points"], names["ridge"]
    assert [p["intensity"] for p in points] == pytest.approx(expected)
    assert points[0]["flops"] == n and points[0]["written"] == 4 * n
    for p in points:
        assert p["roof"] == pytest.approx(min(names["peak"], p["intensity"] * names["bandwidth"]))
        assert p["bound"] == ("memory" if p["intensity"] < ridge else "compute")
        assert p["slowest"] <= p["rate"] <= p["fastest"]
        assert p["allowed"] >= 1
        assert len(p["rounds"]) == names["rounds"] == 5
        shares = [p["rounds"][k] / min(names["peak_rounds"][k],
                                       p["intensity"] * names["roof_rounds"][k])
                  for k in names["steady"]]  # a disturbed round left out (N6)
        assert p["share"] == pytest.approx(statistics.median(shares))
        assert p["share_low"] <= p["share"] <= p["share_high"]
    products, probes = names["products"], names["memory_probes"]
    assert set(products) == set(names["roof_sizes"]) and len(products) > 1
    assert names["peak"] == max(r["fastest"] for r in products.values())  # the best, not the last
    assert set(probes) == {"copy", "sum"}
    assert names["bandwidth"] == max(r["fastest"] for r in probes.values())
    assert probes["copy"]["bytes"] == 8 * n and probes["sum"]["bytes"] == 4 * n
    assert names["roof_rounds"] == probes[names["probe"]]["rounds"]
    assert names["peak_rounds"] == [max(r["rounds"][k] for r in products.values())
                                    for k in range(5)]
    assert "、" in names["memory_bound"].zh and ", " in names["memory_bound"].en


def _roofline_with(memory_probes, points, drift=(1.0,) * 5, device="cpu", machine=(1.0,) * 5):
    """Run the page's shared roofline cell on made-up measurements in five rounds: a compute
    roof of 100 GFLOP/s at the largest size tried (its median; 105 in its fastest round), the
    given memory probes (their fastest rounds, GB/s), the memory's speed in each round
    relative to its fastest (``drift``: it moves the probes and the memory-bound points
    alike), and points (op, FLOPs, bytes, bytes written, share: the rate against the roof of
    its own round)."""
    import matplotlib.pyplot as plt
    import torch

    names = _framework_names("torch", False)
    names.update(device=torch.device(device), rounds=5)
    n, top = 2**20, max(drift)

    def timed(rounds):
        return dict(rounds=list(rounds), rate=statistics.median(rounds), slowest=min(rounds),
                    fastest=max(rounds))

    def product(rate):  # ``machine``: the products' speed in each round (a disturbance)
        return timed([rate * k * d for k, d in zip((0.9, 1.0, 1.05, 1.0, 0.95), machine)])

    probes = {name: dict(bytes=(8 if name == "copy" else 4) * n,
                         written=(4 * n if name == "copy" else 0),
                         **timed([fastest * d / top for d in drift]))
              for name, fastest in memory_probes.items()}
    products = {64: product(50e9), 128: product(100e9)}
    roof = max(probes.values(), key=lambda r: r["fastest"])["rounds"]
    peaks = products[128]["rounds"]
    made = [dict(op=op, flops=flops, bytes=nbytes, written=written,
                 **timed([share * min(p, flops / nbytes * b) for p, b in zip(peaks, roof)]))
            for op, flops, nbytes, written, share in points]
    names.update(memory_probes=probes, products=products, roof_sizes=(64, 128), points=made)
    exec(_shared_cell("ridge = peak / bandwidth"), names)
    plt.close("all")
    return names


N, M = 2**20, 1024
ADD = ("x + y", N, 12 * N, 4 * N)
MV = ("A @ v", 2 * M * M, 4 * (M * M + 2 * M), 4 * M)


def test_the_roofline_flags_only_what_write_allocate_cannot_explain():
    """Against a copy's roof, write-allocate lets x + y reach 1.125 of it and A @ v 1.5;
    against a sum's roof, nothing may pass. A point beyond that is named, with the reason;
    the roofs come from the fastest round of the faster probe, and a best size at the end of
    the range says that the compute roof may lie higher."""
    copy_roof = _roofline_with({"copy": 30e9, "sum": 20e9}, [(*ADD, 1.12), (*MV, 1.45)])
    assert copy_roof["probe"] == "copy" and copy_roof["bandwidth"] == 30e9
    assert copy_roof["peak"] == pytest.approx(100e9 * 1.05)  # the fastest round, not the median
    added, product = copy_roof["points"]
    assert added["allowed"] == pytest.approx(1.125)
    assert product["allowed"] == pytest.approx(1.5, rel=0.01)
    assert added["share"] == pytest.approx(1.12) and product["share"] == pytest.approx(1.45)
    assert copy_roof["beyond_roof"].en.startswith("No memory-bound point")
    assert "may lie higher" in copy_roof["plateau"].en and copy_roof["plateau"].zh
    assert not copy_roof["roof_drifted"] and "no clear drift" in copy_roof["roof_spread_text"].en

    too_fast = _roofline_with({"copy": 30e9, "sum": 20e9}, [(*ADD, 1.2), (*MV, 1.45)])
    beyond = too_fast["beyond_roof"]
    assert "`x + y`" in beyond.en and "A @ v" not in beyond.en and "`x + y`" in beyond.zh
    assert "Either the roof's probes" in beyond.en and "this run cannot tell which" in beyond.en
    assert "is possible" in beyond.en and "这个数据点" in beyond.zh and "内存的带宽" in beyond.zh

    sum_roof = _roofline_with({"copy": 30e9, "sum": 40e9}, [(*ADD, 1.05), (*MV, 0.9)])
    assert sum_roof["probe"] == "sum" and sum_roof["probe_text"].zh == "求和"
    assert [p["allowed"] for p in sum_roof["points"]] == [1.0, 1.0]
    assert "`x + y`" in sum_roof["beyond_roof"].en


def test_the_roofline_reads_each_point_against_its_own_rounds_roof():
    """The memory bandwidth halves for three of the five rounds (as a review measured on a
    shared machine): each point is read against its own round's roof, so the drift moves
    its rate but not its share; the roof's spread is reported, and a point still above its
    round's roof is named with that reason, not read."""
    drift = (0.5, 0.5, 0.5, 1.0, 1.0)
    drifting = _roofline_with({"copy": 30e9, "sum": 60e9}, [(*ADD, 0.9), (*MV, 0.5)], drift)
    added = drifting["points"][0]
    assert added["share"] == pytest.approx(0.9) and added["share_high"] == pytest.approx(0.9)
    assert added["rate"] / added["roof"] == pytest.approx(0.45)  # a median against the best
    assert drifting["roof_drifted"] and (drifting["roof_low"], drifting["roof_high"]) == (30, 60)
    assert "moved between the rounds, from 30.0 to 60.0 GB/s" in drifting["roof_spread_text"].en
    assert drifting["beyond_roof"].en.startswith("No memory-bound point")

    still_above = _roofline_with({"copy": 30e9, "sum": 60e9}, [(*ADD, 1.3), (*MV, 0.5)], drift)
    beyond = still_above["beyond_roof"].en
    assert "`x + y` (a median 130% of its round's roof)" in beyond
    assert "cannot tell which" in beyond and "from 30.0 to 60.0 GB/s" in beyond


def test_a_round_in_which_everything_slowed_is_a_disturbance_not_a_bandwidth():
    """In round 3 the products slowed with the memory probes: that round is called
    disturbed and left out of the roof's range and the shares, and the roof is not said to
    have drifted."""
    slowed = (1.0, 1.0, 0.5, 1.0, 1.0)
    names = _roofline_with({"copy": 30e9, "sum": 20e9}, [(*ADD, 0.9), (*MV, 0.5)], slowed,
                           machine=slowed)
    assert names["disturbed"] == [2] and names["steady"] == [0, 1, 3, 4]
    assert not names["roof_drifted"] and (names["roof_low"], names["roof_high"]) == (30, 30)
    text = names["roof_spread_text"]
    assert text.en.startswith("In round 3 of 5, the products slowed as well")
    assert "no clear drift" in text.en and "第 3 遍" in text.zh
    assert names["left_out"].en == "; round 3 left out: the products slowed too"
    assert names["points"][0]["share"] == pytest.approx(0.9)

    memory_only = _roofline_with({"copy": 30e9, "sum": 20e9}, [(*ADD, 0.9), (*MV, 0.5)],
                                 slowed)  # the products kept their speed: the memory moved
    assert memory_only["disturbed"] == [] and memory_only["roof_drifted"]


def test_on_a_gpu_the_roofline_allows_no_point_above_its_roof():
    """Write-allocate is a CPU's allowance: on a GPU even a copy's roof allows nothing."""
    on_gpu = _roofline_with({"copy": 3000e9, "sum": 2000e9}, [(*ADD, 1.1), (*MV, 0.5)],
                            device="cuda")
    assert [p["allowed"] for p in on_gpu["points"]] == [1.0, 1.0]
    assert "`x + y`" in on_gpu["beyond_roof"].en
    assert "write-allocate" not in on_gpu["beyond_roof"].en
    assert "写分配" not in on_gpu["beyond_roof"].zh


@pytest.mark.parametrize("framework", ["torch", "mxnet"])
def test_the_pages_timings_repeat_short_operations(framework, numpy_too_new, monkeypatch):
    """`in_rounds` repeats an operation until a timing lasts at least `seconds` and divides
    the work of all the repeats by it, once per round: a 1 ms operation of work 1 runs at 1000
    per second in every round (on a clock that only the operation advances, so that a busy
    machine cannot change the answer). PyTorch's finds its block of back-to-back calls with
    the library's calls_per_block (d2l.time_per_call's rule), after a warm-up."""
    from d2l_ext import utils

    names = _framework_names(framework, numpy_too_new)
    _run_cells(framework, ("def in_rounds(",), names)
    calls, clock = [], [0.0]
    monkeypatch.setattr(utils.time, "perf_counter", lambda: clock[0])  # the one time module

    def one_ms():
        calls.append(1)
        clock[0] += 0.001

    result = names["in_rounds"]({"one_ms": (one_ms, 1.0)})["one_ms"]
    reps = round(names["seconds"] / 0.001)
    if framework == "torch":  # 3 warm-up calls; a block of 1 call, then one 1.2 x as long
        block = math.ceil(reps * 1.2)  # as the 1 ms needs to last `seconds`: the block's size
        assert len(calls) == 3 + 1 + block + 5 * block  # then one block of that size a round
        assert names["rate"](one_ms, 1.0)["rate"] == pytest.approx(1000)
    else:
        assert len(calls) == 1 + 1 + 5 * reps  # the first timing (and its warm-up), then five
    assert result["rounds"] == pytest.approx([1000] * 5)
    for statistic in ("rate", "slowest", "fastest"):
        assert result[statistic] == pytest.approx(1000)


@pytest.mark.parametrize("combine", ["add", "split", "device", "max"])
def test_the_crossover_adds_the_fixed_cost_only_where_the_two_sides_take_turns(combine):
    """On a CPU the fixed cost and the data's time add up; on a CUDA GPU the host issues the
    next operation while the GPU runs this one, so a loop costs the larger of the two and the
    crossover is where the GPU's time reaches the host's issue time (review N2)."""
    from d2l_ext import torch as d2l
    from d2l_ext.utils import text_table

    names = {"d2l": d2l, "text_table": text_table, "launch_rows": [["one by one", 10.0, 9.0, 11.0]],
             "combine": combine,
             "per_op": 10e-6, "host_us": 10.0, "device_us": 4.0, "roof_low": 2000.0,
             "roof_high": 2000.0, "roof_drifted": False,
             "fixed": {"add": 10e-6, "split": 6e-6, "device": 0.0, "max": 10e-6}[combine]}
    exec(_shared_cell("def kilobytes(seconds):"), names)
    text = names["crossover_text"]
    if combine == "add":
        assert "add up" in text.en and "twice the fixed cost" in text.en
        assert "20,000 kB" in text.en and "要相加" in text.zh
    elif combine == "split":
        assert "not their sum" in text.en and "twice" not in text.en
        assert "12,000 kB more" in text.en and "10.0 µs" in text.en and "4.0 µs" in text.en
        assert "而不是两者之和" in text.zh and "12,000 kB" in text.zh
    elif combine == "device":
        assert "bound by the GPU" in text.en and "受限于 GPU" in text.zh
    else:
        assert "not their sum" in text.en and "20,000 kB" in text.en


@pytest.mark.parametrize("framework", ["torch", "mxnet"])
def test_the_pages_memory_cells_show_the_sawtooth_on_a_cpu(framework, numpy_too_new, tmp_path,
                                                          monkeypatch, chapter_script):
    """The memory experiment runs on a CPU (the profiler counts the allocations): the
    momentum buffers appear at the first step and stay, so the second step peaks higher
    than the first and the third repeats the second. MXNet's runs as the page's script, in
    a fresh process, and leaves no profiler trace behind."""
    import matplotlib.pyplot as plt

    names = _framework_names(framework, numpy_too_new)
    if framework == "torch":
        _run_cells(framework, ("def memory_during_training(",), names)
    else:
        monkeypatch.chdir(tmp_path)
        (tmp_path / "memory_steps.py").write_text(
            chapter_script("gpu-basics", "memory_steps.py"), encoding="utf-8")
        _run_cells(framework, ('"memory_steps.py", "--batch-size"',), names)
    exec(_shared_cell("step_peaks = ["), names)
    plt.close("all")
    readings, per_step, param_mib = names["readings"], names["per_step"], names["param_mib"]
    first = 2 if framework == "torch" else 1
    assert len(readings) == first + 3 * per_step
    phases = [r[0] for r in readings]
    after_step = [r[1] for r, phase in zip(readings, phases) if phase == "step"]
    assert len(after_step) == 3
    start = readings[first - 1][1]
    # the first step adds the momentum buffers (as large as the weights), and they stay
    before_step = readings[phases.index("step") - 1][1]
    assert after_step[0] - before_step == pytest.approx(param_mib, rel=0.05)
    assert after_step[1] == pytest.approx(after_step[2], abs=0.01) and after_step[1] > start
    p1, p2, p3 = names["step_peaks"]
    assert p1 < p2 and p2 == pytest.approx(p3, abs=0.01)
    for _, allocated, peak, reserved in readings:
        assert peak >= allocated - 1e-9 and reserved is None  # no caching allocator on a CPU
    if framework == "torch":
        assert phases[:2] == ["weights", "batch"]
        assert readings[0][1] == pytest.approx(param_mib, rel=0.01)  # buffers are tiny
    else:
        assert sorted(p.name for p in tmp_path.iterdir()) == ["memory_steps.json",
                                                              "memory_steps.py"]
        _run_cells(framework, ("rise = step_peaks[1]",), names)
        assert names["rise"] == pytest.approx(p2 - p1)
        assert names["rise_text"].en and names["rise_text"].zh


def test_mxnet_profiler_is_configured_only_in_the_script():
    """MXNet's profiler takes its configuration once per process (a second set_config after
    a dump fails): the page configures it only in the script that runs in a fresh process,
    so that the memory cell can run again in the same kernel."""
    assert _cell("mxnet", "profiler.set_config").startswith("%%writefile memory_steps.py")


class _FakeCounters:
    """The memory functions of one API (torch.accelerator's or torch.cuda's), recorded."""

    def __init__(self, calls: list, name: str) -> None:
        self.calls, self.name = calls, name

    def __getattr__(self, function: str):
        def call(*args):
            self.calls.append(f"{self.name}.{function}")
            return (3 * 2**30, 8 * 2**30) if "info" in function else 2**30
        return call


@pytest.mark.parametrize("new_enough", [True, False])
def test_the_counters_cell_falls_back_to_torch_cuda_on_an_older_pytorch(new_enough):
    """On a GPU, the cell after training reads torch.accelerator's counters where PyTorch has
    them (2.13) and torch.cuda's (mem_get_info included) where it does not."""
    from types import SimpleNamespace

    from d2l_ext import torch as d2l

    calls: list[str] = []
    accelerator = _FakeCounters(calls, "accelerator")
    if not new_enough:
        accelerator = SimpleNamespace()  # an old PyTorch: no memory functions there
    fake_torch = SimpleNamespace(accelerator=accelerator, cuda=_FakeCounters(calls, "cuda"))
    names = {"torch": fake_torch, "d2l": d2l, "device": SimpleNamespace(type="cuda"),
             "MiB": 2**20, "param_mib": 100.0}
    _run_cells("torch", ("empty_cache, memory_info = torch.accelerator",), names)
    api = "accelerator" if new_enough else "cuda"
    assert {c.split(".")[0] for c in calls} == {api}
    assert f"{api}.empty_cache" in calls
    assert (f"{api}.get_memory_info" if new_enough else "cuda.mem_get_info") in calls


@pytest.fixture
def hogwild(tmp_path, fmnist_dir, chapter_script):
    """Run the page's hogwild.py on a slice of Fashion-MNIST in ``tmp_path``."""
    pytest.importorskip("torch")
    script = chapter_script("gpu-basics-streams", "hogwild.py")
    (tmp_path / "hogwild.py").write_text(script, encoding="utf-8")

    def run(*args: str, lang: str = "en") -> subprocess.CompletedProcess:
        env = dict(os.environ, D2L_DATA_DIR=str(fmnist_dir), D2L_LANG=lang)
        return subprocess.run(
            [sys.executable, "hogwild.py", "--num-train", "2000", "--num-test", "1000", *args],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    return run


def test_the_pages_hogwild_script_learns_in_every_configuration(hogwild, tmp_path):
    """Each configuration trains a fresh model (the parent, which never trains, sees it learn:
    the shared one, or the first process's own in the private control), the same total work,
    timed once per round, the rounds round-robin over the configurations; the lines speak
    Chinese for a Chinese reader."""
    done = hogwild("--runs", "1x2", "2x1", "2x1-private", "--repeats", "2", "--epochs", "2",
                   lang="zh")
    assert done.returncode == 0, done.stderr[-2000:]
    one, two, private = json.loads((tmp_path / "hogwild.json").read_text())
    assert (one["processes"], one["threads"], two["processes"], two["threads"]) == (1, 2, 2, 1)
    assert (one["private"], two["private"], private["private"]) == (False, False, True)
    assert private["processes"] == 2
    for result in (one, two, private):
        assert result["examples"] == 2000 and result["epochs"] == 2
        assert len(result["seconds"]) == 2 and len(result["accuracy_after"]) == 2
        assert result["accuracy_before"] < 0.2  # chance is 0.1
        assert min(result["accuracy_after"]) > 0.5
    assert one["accuracy_after"][0] == one["accuracy_after"][1]  # one process: deterministic
    assert "2 个进程、每个进程 1 个线程：在 2,000 张图像上训练 2 轮，运行 2 次，中位数 " \
        in done.stdout
    assert "2 个进程、每个进程 1 个线程、各训练一个自己的模型：" in done.stdout
    assert "process" not in done.stdout and " 秒（" in done.stdout


def test_a_wrong_hogwild_configuration_is_refused(hogwild):
    done = hogwild("--runs", "2x1-locked")
    assert done.returncode != 0 and "write PxT or PxT-private" in done.stderr
    done = hogwild("--runs", "2x1-locked", lang="zh")  # the reader's language
    assert done.returncode != 0 and "请写成 PxT 或 PxT-private" in done.stderr


def test_a_failing_hogwild_process_is_reported_and_leaves_no_result(hogwild, tmp_path):
    done = hogwild("--runs", "2x1", "--batch-size", "0")
    assert done.returncode != 0
    assert "2 training processes failed: " in done.stderr
    assert not (tmp_path / "hogwild.json").exists()


def _hogwild_conclusions(seconds: dict, after: dict) -> dict:
    """Run the page's Hogwild table cell on made-up results (seconds of each round and test
    accuracies after training, per configuration; the last, 2x1p, is the private control)."""
    from d2l_ext import torch as d2l
    from d2l_ext.utils import false_alarm, paired_verdict, text_table

    hogwild = [dict(processes=int(c[0]), threads=int(c[2]), private=c.endswith("p"),
                    seconds=seconds[c], accuracy_before=0.1, accuracy_after=after[c])
               for c in ("1x1", "1x2", "2x1", "2x1p")]
    names = {"d2l": d2l, "text_table": text_table, "hogwild": hogwild, "smoke": False,
             "paired_verdict": paired_verdict, "false_alarm": false_alarm, "cores": 2}
    text = PAGES[1].read_text(encoding="utf-8")  # the table's words, from its collapsed cell
    exec(re.search(r"^model_word = \{.*?\}\n", text, re.M | re.S).group(0), names)
    return _run_cells("torch", ("def compared(a, b):",), names)


def test_the_hogwild_conclusions_follow_the_timings():
    """The comparisons read the ratio of two configurations' times within each round (a
    drift of the machine falls on both alike) and call one faster or slower only if every
    round agrees; each explanation matches the outcome it explains, and the private control
    says what sharing cost."""
    # the machine slows down over the rounds: every configuration's range overlaps every
    # other's, but 2x1 beats 1x1 and the private control beats 2x1 in every round
    names = _hogwild_conclusions(
        {"1x1": [5.0, 6.0, 7.0, 8.0, 9.0], "1x2": [6.0, 7.0, 8.0, 9.0, 10.0],
         "2x1": [4.0, 5.0, 6.0, 6.5, 7.5], "2x1p": [3.0, 4.0, 4.5, 5.5, 6.0]},
        {"1x1": [0.85], "1x2": [0.85], "2x1": [0.84], "2x1p": [0.83]})
    assert names["versus_one"].en == "faster in each of the 5 rounds (1.17× to 1.25× the speed)"
    assert names["versus_one"].zh == "在全部 5 遍中都更快（速度是对照的 1.17–1.25 倍）"
    assert names["threads_vs_one"].en == "slower in each of the 5 rounds (1.11× to 1.20× the time)"
    assert "slower" in names["threads_reason"].en and "gained" in names["processes_reason"].en
    assert "cache-line contention" in names["sharing_text"].en
    assert "faster in each of the 5 rounds" in names["sharing_text"].en
    assert "对照" in names["sharing_text"].zh
    assert "did not stop the model from learning" in names["learned"].en
    assert names["chance"] == pytest.approx(2 / 32)

    names = _hogwild_conclusions(
        {"1x1": [5.0, 5.5, 6.0], "1x2": [4.0, 4.5, 4.9], "2x1": [4.0, 5.8, 5.5],
         "2x1p": [4.1, 5.7, 5.6]},
        {"1x1": [0.85], "1x2": [0.85], "2x1": [0.70], "2x1p": [0.8]})
    assert names["versus_one"].en.startswith("not clearly different (faster in some rounds")
    assert names["versus_one"].zh.startswith("没有明显差别")
    assert "faster" in names["threads_reason"].en
    assert "did not clearly gain" in names["processes_reason"].en
    assert "cost nothing this run could measure" in names["sharing_text"].en
    assert "cost accuracy" in names["learned"].en and names["learned"].zh


def test_a_hogwild_verdict_needs_an_effect_above_the_machines_drift():
    """A configuration ahead in every round but by less than 3 % in some gets no verdict;
    sharing that cost much in some rounds and nothing in others gives no one cost of sharing,
    and the ratios that moved between rounds are named, with an expectation as their cause."""
    steady = [5.0, 5.0, 5.0, 5.0, 5.0]
    names = _hogwild_conclusions(
        {"1x1": steady, "1x2": [4.0] * 5, "2x1": steady, "2x1p": [4.95, 4.9, 4.95, 4.9, 4.95]},
        {"1x1": [0.85], "1x2": [0.85], "2x1": [0.84], "2x1p": [0.83]})
    assert names["verdict"](names["private"], names["processes"]) == "no clear difference"
    assert "faster in every round, but by less than 3% in some" in names["sharing_text"].en
    assert "cost nothing this run could measure" in names["sharing_text"].en
    assert "每一遍都更快" in names["sharing_text"].zh
    assert names["spread_text"] == ""  # 1x2 against 1x1: 1.25 in every round

    names = _hogwild_conclusions(
        {"1x1": steady, "1x2": [4.0] * 5, "2x1": steady, "2x1p": [3.6, 3.6, 4.95, 5.0, 5.05]},
        {"1x1": [0.85], "1x2": [0.85], "2x1": [0.84], "2x1p": [0.83]})
    sharing = names["sharing_text"]
    # round 5: the shared model ran faster than the private ones, which the page says
    assert ("up to 39% of the time in rounds 1, 2, but the shared model took 1% less time in "
            "round 5") in sharing.en
    assert "no one cost of sharing" in sharing.en and "cache-line contention" in sharing.en
    assert "第 1、2 遍" in sharing.zh and "是共享模型少用了 1% 的时间" in sharing.zh
    assert "The ratios moved between rounds" in names["spread_text"].en
    assert "an expectation" in names["spread_text"].en and "预期" in names["spread_text"].zh


def _copy_tables(gpu_name, copies, capsys):
    """Run the page's shared copy-table and bounds cells on made-up rates (GB/s: median,
    slowest, fastest) of a run on the GPU named ``gpu_name``."""
    import matplotlib.pyplot as plt

    names = _framework_names("torch", False)
    names.update(size_mib=256, MiB=2**20, gpu_name=gpu_name, copies=copies)
    exec(_shared_cell('copy_names = {"host → host"'), names)
    exec(_shared_cell("sheet = datasheets.for_gpu(gpu_name)"), names)
    plt.close("all")
    return names, capsys.readouterr().out


GPU_COPIES = {"host → host": (23.6, 21.5, 26.3), "pageable host → GPU": (7.1, 6.3, 7.1),
              "pin (cached block), then copy → GPU": (18.1, 17.9, 19.1),
              "pin (new block), then copy → GPU": (1.5, 0.9, 1.6),
              "pinned host → GPU": (54.0, 53.8, 54.2), "GPU → pinned host": (54.3, 54.2, 54.4),
              "GPU → GPU (same)": (1480.0, 1470.0, 1490.0)}


def test_on_a_known_gpu_the_copies_are_read_against_its_own_datasheet(capsys):
    """With a GPU that the book's table of datasheets knows, the bounds table reads the
    pinned copy against PCIe (each generation and the GPU's datasheet) and the copy within
    the GPU against half its memory bandwidth; the lesson compares each pinned way with the
    pageable copy, by the measured rates."""
    names, out = _copy_tables("NVIDIA H100 80GB HBM3", GPU_COPIES, capsys)
    assert names["sheet"].name == "H100 SXM" and "is the table's H100 SXM" in names["whose"].en
    measured = {name.en: got for name, _, got in names["link_rates"]}
    assert measured["PCIe 4.0 ×16, one direction"] == pytest.approx(54.0e9)
    assert measured["H100 SXM datasheet: PCIe, one direction"] == pytest.approx(54.0e9)
    assert measured["H100 SXM datasheet: NVLink, one direction"] is None  # maybe not NVLink
    memory_row = next(en for en in measured if "memory" in en)
    assert measured[memory_row] == pytest.approx(1480e9)
    assert "84%" in out and "88%" in out  # 54.0 of 64 GB/s, 1480 of 3350 / 2 GB/s
    lesson = names["copy_lesson"]
    assert "memory pinned once ran at 7.6 times it" in lesson.en
    assert "cached block and then copying ran at 2.5 times" in lesson.en
    assert "new block and then copying ran at 0.21 times" in lesson.en
    assert "7.6 倍" in lesson.zh and "0.21 倍" in lesson.zh
    plt_ax = names["ax"]
    assert plt_ax.get_xscale() == "log"  # the rates span 1.5 to 1,490 GB/s


def test_an_unknown_gpu_or_a_cpu_gets_no_datasheet_share(capsys):
    names, out = _copy_tables("NVIDIA L40S", GPU_COPIES, capsys)
    assert names["sheet"] is None and names["example"].name == "H100 SXM"
    assert "not in the table" in names["whose"].en and "仅供参照" in names["whose"].zh
    measured = {name.en: got for name, _, got in names["link_rates"]}
    assert [en for en, got in measured.items() if got is not None] == [
        "PCIe 3.0 ×16, one direction", "PCIe 4.0 ×16, one direction",
        "PCIe 5.0 ×16, one direction"]  # the generations, not another GPU's datasheet
    names, out = _copy_tables(None, {"host → host": (23.6, 21.5, 26.3)}, capsys)
    assert all(got is None for *_, got in names["link_rates"])
    assert names["copy_lesson"] == "" and "this run has no GPU" in names["whose"].en


def _record_names():
    """The names the page's record-citing cells need, as a CPU run leaves them."""
    import torch

    from d2l_ext import datasheets, memory
    from d2l_ext import torch as d2l
    from d2l_ext.utils import text_table

    names = {"torch": torch, "d2l": d2l, "memory": memory, "datasheets": datasheets,
             "text_table": text_table, "device": torch.device("cpu"), "MiB": 2**20,
             "param_mib": 42.6}
    _run_cells("torch", ("beyond_mib = outside_mib = None",), names)
    return names


def test_the_prose_cites_the_kept_gpu_figures_with_their_machine_and_date():
    """On a CPU, the memory section cites the book's GPU run (the workspaces and the memory
    outside the allocator) with its machine, framework and date, from the record."""
    from d2l_ext import gpu_runs

    record = gpu_runs.load("gpu-basics")
    names = _record_names()
    assert names["beyond_mib"] is None and names["outside_mib"] is None  # not on a CPU
    beyond = names["record_beyond_text"]
    run = record.run
    assert f"{run['gpus']} × {run['gpu']}" in beyond.en and run["date"] in beyond.en
    assert f"{run['gpus']} 块 {run['gpu']}" in beyond.zh and " x " not in beyond.zh
    assert record.run["framework"] in beyond.zh
    assert f"{names['recorded_beyond']:.1f} MiB" in beyond.en
    assert f"{names['recorded_outside']:.0f} MiB" in names["record_outside_text"].en


def test_the_gpu_record_lines_up_with_the_pages_table_and_leaves_out_the_wrong_copy(capsys):
    """Every figure kept from the book's H100 run has a row of the page's table (the same
    English label), the copy within the GPU that the earlier code timed wrongly is not kept,
    and the page reads the kept figures against the GPU's own datasheet."""
    from d2l_ext import datasheets, gpu_runs

    record = gpu_runs.load("gpu-basics")
    assert record.commit == "ec40dc2" and record.source
    labels = {f.en for f in record.figures}
    assert "copy GPU → GPU, bytes copied (GB/s)" not in labels
    names = _record_names()
    names.update(beyond_mib=None, outside_mib=None, copies={"host → host": (9.0, 8.0, 10.0)},
                 bandwidth=20e9, peak=100e9, ridge=5.0, best_products={"fp32": 100e9},
                 per_op=2e-6, host_us=2.0, device_us=2.0, num_ops=1000, replay=None)
    capsys.readouterr()
    _run_cells("torch", ("gpu_figures = [", 'd2l.gpu_runs.table("gpu-basics"'), names)
    out = capsys.readouterr().out
    rows = {line.split("  ")[0] for line in out.splitlines()[1:]}
    assert labels <= rows  # no kept figure is shown on a row of its own, unmatched
    pinned = next(line for line in out.splitlines() if line.startswith("copy pinned host"))
    kept_pinned = record.value("copy pinned host → GPU (GB/s)")
    assert pinned.split()[-2:] == ["\u2013", f"{kept_pinned:.1f}"]
    sheet = datasheets.for_gpu(record.run["gpu"])
    text = names["record_sheet_text"]
    share = record.value("copy pinned host → GPU (GB/s)") * 1e9 / sheet.pcie
    assert f"{share:.0%} of the {sheet.pcie / 1e9:.0f} GB/s of PCIe" in text.en
    share = record.value("compute roof, float32 products (TFLOP/s)") * 1e12 / sheet.fp32
    assert f"{share:.0%} of the {sheet.fp32 / 1e12:.0f} TFLOP/s of float32" in text.en
    assert "no copy within the GPU" in names["record_gap_text"].en


def test_the_kept_copies_explain_a_row_faster_than_its_two_hops():
    """The record's cached-block row (18.1 GB/s) beat the estimate from the host copy and
    the pinned transfer done one after the other (16.4 GB/s): the sentence says so, and why
    the estimate is rough, instead of calling the row the same thing."""
    import time

    names = _record_names()
    names.update(smoke=True, time=time)
    _run_cells("torch", ("def pin_then_copy(",), names)
    text = names["record_copy_text"]
    assert "16.4 GB/s" in text.en and "faster than that estimate" in text.en
    assert "about 27 GB/s" in text.en and "separate single copies" in text.en
    assert "比这个估计还快" in text.zh and "16.4 GB/s" in text.zh and "->" not in text.zh


def test_a_record_of_this_code_is_not_blamed_on_single_copies():
    """The single-copy explanation belongs to the record made at ec40dc2: a record of later
    code whose cached-block row still beat the estimate says only that the rows were timed
    at different moments."""
    import dataclasses
    import time

    names = _record_names()
    names.update(smoke=True, time=time,
                 gpu_run=dataclasses.replace(names["gpu_run"], commit="abc1234"))
    _run_cells("torch", ("def pin_then_copy(",), names)
    text = names["record_copy_text"]
    assert "faster than that estimate" in text.en and "separate single copies" not in text.en
    assert "timed at different moments" in text.en and "不同的时刻" in text.zh


def test_mxnet_reads_the_gpus_name_from_nvidia_smi_only_when_it_is_unambiguous(
        numpy_too_new):
    """MXNet names no GPU: the page asks nvidia-smi, and takes the name only when every GPU
    of the machine has it and none is split into MIG slices (else: no datasheet share)."""
    import time
    from types import SimpleNamespace

    names = _framework_names("mxnet", numpy_too_new)
    names.update(MiB=2**20, time=time)
    _run_cells("mxnet", ("def gpu_name_from_nvidia_smi(",), names)
    assert names["gpu_name"] is None  # no GPU: nvidia-smi is not asked

    def fake(stdout, returncode=0):
        def run(*args, **kwargs):
            if stdout is None:
                raise FileNotFoundError("nvidia-smi")
            return SimpleNamespace(stdout=stdout, returncode=returncode)
        return SimpleNamespace(run=run, SubprocessError=subprocess.SubprocessError)

    name = names["gpu_name_from_nvidia_smi"]
    for stdout, returncode, expected in (
            ("NVIDIA H100 80GB HBM3, Disabled\nNVIDIA H100 80GB HBM3, Disabled\n", 0,
             "NVIDIA H100 80GB HBM3"),
            ("Tesla T4, [N/A]\n", 0, "Tesla T4"),
            ("NVIDIA H100 80GB HBM3, Disabled\nNVIDIA A100-SXM4-40GB, Disabled\n", 0, None),
            ("NVIDIA A100-SXM4-40GB, Enabled\n", 0, None),
            ("", 9, None), (None, 0, None)):
        names["subprocess"] = fake(stdout, returncode)
        assert name() == expected, stdout
