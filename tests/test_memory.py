"""d2l_ext.memory: the bytes a block allocates, read at marks, the same way on any device.

On a CPU the readings come from the profiler's allocator events; on an accelerator from the
caching allocator's counters, which these tests replace by a scripted stand-in.
"""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

from d2l_ext import memory  # noqa: E402

MiB = 2**20
CPU = torch.device("cpu")


def floats(mib: float) -> torch.Tensor:
    """A new float32 tensor of ``mib`` MiB."""
    return torch.empty(int(mib * MiB) // 4)


def test_readings_count_what_the_block_allocated_and_the_peak_between_marks():
    with memory.Tracker(CPU) as tracker:
        a = floats(1)
        tracker.mark("a")
        b = floats(2)
        del b  # a temporary: the peak sees it, the reading after it does not
        tracker.mark("temporary")
        c = floats(0.5)
        tracker.mark("c")
        del a
        tracker.mark("freed a")
    readings = tracker.readings
    assert [r.label for r in readings] == ["a", "temporary", "c", "freed a"]
    assert [r.allocated / MiB for r in readings] == pytest.approx([1, 1, 1.5, 0.5])
    assert [r.peak / MiB for r in readings] == pytest.approx([1, 3, 1.5, 1.5])
    assert all(r.reserved is None for r in readings)  # a CPU has no caching allocator
    assert tracker.peak() / MiB == pytest.approx(3)
    assert tracker.source == "profiler"
    del c


def test_tensors_from_before_the_block_and_earlier_trackers_do_not_count():
    """The profiler's own "Total Allocated" carries what an earlier session allocated and
    freed after it stopped; the tracker counts only this block's allocations and frees."""
    before = floats(4)  # allocated before any tracker: never counted
    with memory.Tracker(CPU) as first:
        kept = floats(1)
        first.mark("kept")
    del kept  # freed while no profiler runs: the profiler's running total never hears of it
    with memory.Tracker(CPU) as second:
        second.mark("start")
        x = floats(0.25)
        second.mark("x")
    assert first.readings[0].allocated == pytest.approx(MiB)
    assert [r.allocated / MiB for r in second.readings] == pytest.approx([0, 0.25])
    del before, x


def test_a_tracker_without_marks_and_marks_without_allocations():
    with memory.Tracker(CPU) as empty:
        pass
    assert empty.readings == [] and empty.peak() == 0
    with memory.Tracker(CPU) as idle:
        idle.mark("one")
        idle.mark("two")
    assert [(r.allocated, r.peak) for r in idle.readings] == [(0, 0), (0, 0)]


def test_allocations_of_pytorchs_own_threads_are_counted():
    """Autograd on a CPU and intra-op work belong to the block: a backward pass's
    gradients are counted (the thread-local profiler state follows PyTorch's work)."""
    w = torch.randn(512, 512, requires_grad=True)
    with memory.Tracker(CPU) as tracker:
        loss = (w @ w).sum()
        loss.backward()
        tracker.mark("backward")
    assert tracker.readings[0].allocated >= w.numel() * 4  # at least w.grad
    del loss


def test_readings_on_a_cpu_come_after_the_block_and_the_profiler_stops_on_errors():
    tracker = memory.Tracker(CPU)
    with pytest.raises(RuntimeError, match="after"):
        with tracker:
            tracker.mark("inside")
            tracker.readings  # noqa: B018 - on a CPU they exist only after the block
    with pytest.raises(RuntimeError, match="inside"):
        tracker.mark("outside")
    with pytest.raises(ValueError, match="boom"):
        with memory.Tracker(CPU):
            raise ValueError("boom")
    with memory.Tracker(CPU) as again:  # the profiler was stopped: a new one can start
        again.mark("fine")
    assert len(again.readings) == 1


def test_a_tracker_is_not_entered_twice():
    tracker = memory.Tracker(CPU)
    with tracker:
        with pytest.raises(RuntimeError, match="already in use"):
            tracker.__enter__()


class FakeAllocator:
    """A caching allocator's counters, scripted: allocations change ``allocated``, the peak
    follows until reset, ``reserved`` only grows."""

    def __init__(self, allocated: int = 0) -> None:
        self.allocated = self.peak = self.reserved = allocated
        self.resets = 0
        self.lock = threading.Lock()

    def alloc(self, nbytes: int) -> None:
        self.allocated += nbytes
        self.peak = max(self.peak, self.allocated)
        self.reserved = max(self.reserved, self.allocated)

    # the torch.accelerator functions the tracker calls
    def memory_allocated(self, index: int) -> int:
        assert index == 1
        return self.allocated

    def max_memory_allocated(self, index: int) -> int:
        return self.peak

    def memory_reserved(self, index: int) -> int:
        return self.reserved

    def reset_peak_memory_stats(self, index: int) -> None:
        self.resets += 1
        self.peak = self.allocated

    def current_device_index(self) -> int:
        return 1


def test_on_an_accelerator_the_counters_are_read_relative_to_the_start(monkeypatch):
    """The tracker reads the allocator's books at each mark: bytes since the block began
    (tensors from before it are the baseline), the peak since the previous mark (reset after
    each), and what the cache holds."""
    fake = FakeAllocator(allocated=10 * MiB)  # earlier tensors
    fake.peak = 50 * MiB  # an old peak, from before the block: must not show
    monkeypatch.setattr(torch, "accelerator", fake, raising=False)
    with memory.Tracker(torch.device("cuda")) as tracker:  # no index: the current device
        fake.alloc(3 * MiB)
        tracker.mark("three")
        fake.alloc(5 * MiB)
        fake.alloc(-5 * MiB)
        tracker.mark("temporary")
        fake.alloc(-3 * MiB)
        tracker.mark("freed")
    assert tracker.source == "allocator"
    assert [(r.allocated / MiB, r.peak / MiB, r.reserved / MiB) for r in tracker.readings] == [
        (3, 3, 13), (3, 8, 18), (0, 3, 18)]
    assert fake.resets == 4  # at the start and after each mark


def test_a_device_index_is_passed_to_the_counters(monkeypatch):
    fake = FakeAllocator()
    monkeypatch.setattr(torch, "accelerator", fake, raising=False)
    with memory.Tracker("cuda:1") as tracker:
        fake.alloc(MiB)
        tracker.mark("one")
    assert tracker.readings[0].allocated == MiB
    with pytest.raises(AssertionError):  # the fake checks the index it is given
        with memory.Tracker("cuda:0") as wrong:
            wrong.mark("zero")


def test_without_torch_accelerator_counters_cuda_uses_torch_cuda(monkeypatch):
    """Older PyTorch has the counters in torch.cuda only: CUDA works, other devices are
    refused with a message."""
    fake = FakeAllocator()
    monkeypatch.setattr(torch, "accelerator", None, raising=False)
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved",
                 "reset_peak_memory_stats"):
        monkeypatch.setattr(torch.cuda, name, getattr(fake, name))
    monkeypatch.setattr(torch.cuda, "current_device", fake.current_device_index)
    with memory.Tracker("cuda") as tracker:
        fake.alloc(2 * MiB)
        tracker.mark("two")
    assert tracker.readings[0].allocated == 2 * MiB
    with pytest.raises(ValueError, match="no memory counters for xpu"):
        memory.Tracker("xpu").__enter__()


def test_trackers_of_one_accelerator_do_not_nest_and_the_outer_peak_survives(monkeypatch):
    """An inner tracker would reset the peak the outer one is reading: it is refused, and the
    device is free again once the outer block ends (even by an error)."""
    fake = FakeAllocator()
    monkeypatch.setattr(torch, "accelerator", fake, raising=False)
    with memory.Tracker("cuda") as outer:
        fake.alloc(8 * MiB)
        fake.alloc(-8 * MiB)
        with pytest.raises(RuntimeError, match="cannot be nested"):
            memory.Tracker("cuda:1").__enter__()
        outer.mark("after a temporary")
    assert outer.readings[0].peak == 8 * MiB
    with pytest.raises(KeyError):
        with memory.Tracker("cuda"):
            raise KeyError("inside")
    with memory.Tracker("cuda") as again:
        again.mark("free again")
    assert again.readings[0].allocated == 0


def test_a_cpu_tracker_refuses_to_run_inside_a_profiler_or_another_cpu_tracker():
    """A second profiler session would stop the first (and a nested CPU tracker crashed the
    process when the outer one ended): it is refused, and the outer session goes on."""
    from d2l_ext import memory_budget

    with memory.Tracker(CPU) as outer:
        kept = floats(1)
        with pytest.raises(RuntimeError, match="inside another profiler session"):
            memory.Tracker(CPU).__enter__()
        with pytest.raises(RuntimeError, match="inside another profiler session"):
            memory_budget.growth(lambda: None, 1, CPU)
        outer.mark("one")
    assert outer.readings[0].allocated == MiB
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        with pytest.raises(RuntimeError, match="inside another profiler session"):
            memory.Tracker(CPU).__enter__()
        assert torch._C._autograd._profiler_enabled()  # the user's profiler still runs
    with memory.Tracker(CPU, source="malloc") as outside, memory.Tracker(CPU) as inside:
        del kept
        inside.mark("a malloc tracker around a profiler one is fine")
        outside.mark("both")


def test_counting_fake_tensors_never_asks_for_an_address():
    """Fake tensors (FakeTensorMode, as MemTracker and FSDPMemTracker use) have meta
    storages: counted by storage, views once, and without the deprecated data_ptr()."""
    import warnings

    from torch._subclasses.fake_tensor import FakeTensorMode

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with FakeTensorMode():
            x, y = torch.empty(10, 10), torch.empty(5)
            assert memory.tensor_bytes([x, x[1:], x.t(), y]) == 400 + 20
            net = torch.nn.Linear(10, 3)
            with memory.SavedTensors(exclude=[net]) as saved:
                net(x).relu().sum()
    assert saved.nbytes == 400 + 10 * 3 * 4  # the input and ReLU's output


# ---------------------------------------------------------------------- the CPU's timeline
def test_the_timeline_follows_every_change_and_ends_at_the_last_reading():
    with memory.Tracker(CPU) as tracker:
        a = floats(1)
        b = floats(2)
        tracker.mark("both")
        del b
        tracker.mark("a")
        late = floats(4)  # after the last mark: not part of the timeline
    times, sizes, marks = tracker.timeline()
    assert times == sorted(times) and len(marks) == 2 and marks == sorted(marks)
    assert max(sizes) / MiB == pytest.approx(3)
    assert sizes[-1] == tracker.readings[-1].allocated
    assert all(t <= marks[-1] for t in times)
    del a, late


def test_a_timeline_needs_a_cpu_and_the_end_of_the_block(monkeypatch):
    tracker = memory.Tracker(CPU)
    with tracker:
        with pytest.raises(RuntimeError, match="after"):
            tracker.timeline()
    monkeypatch.setattr(torch, "accelerator", FakeAllocator(), raising=False)
    with memory.Tracker("cuda:1") as gpu:
        gpu.mark("x")
    with pytest.raises(RuntimeError, match="_record_memory_history"):
        gpu.timeline()


# ---------------------------------------------------------------------- counting
def test_tensor_bytes_counts_each_storage_once():
    x = torch.zeros(1000)
    assert memory.tensor_bytes([x]) == 4000
    assert memory.tensor_bytes([x, x, x[10:20], x.view(10, 100)]) == 4000  # views share it
    assert memory.tensor_bytes([x, torch.zeros(10, dtype=torch.float64)]) == 4080
    assert memory.tensor_bytes([torch.zeros(7, dtype=torch.bfloat16)]) == 14  # odd size
    assert memory.tensor_bytes([]) == 0


def test_parameters_gradients_and_buffers():
    net = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.BatchNorm1d(5))
    numbers = 3 * 5 + 5 + 5 + 5  # linear weight and bias, BatchNorm weight and bias
    assert memory.parameter_bytes(net) == numbers * 4
    # buffers: running mean and variance (float32), num_batches_tracked (one int64)
    assert memory.parameter_bytes(net, buffers=True) == numbers * 4 + 10 * 4 + 8
    assert memory.gradient_bytes(net) == 0
    net(torch.randn(4, 3)).sum().backward()
    assert memory.gradient_bytes(net) == numbers * 4


@pytest.mark.parametrize("make, per_parameter", [
    (lambda p: torch.optim.SGD(p, lr=0.1), 0),  # plain SGD keeps nothing
    (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), 1),
    (lambda p: torch.optim.Adam(p), 2),
    (lambda p: torch.optim.AdamW(p, foreach=False), 2),
])
def test_optimizer_state_is_counted_after_the_first_step(make, per_parameter):
    net = torch.nn.Linear(100, 10)
    optimizer = make(net.parameters())
    assert memory.optimizer_state_bytes(optimizer) == 0  # no state before the first step
    net(torch.randn(2, 100)).sum().backward()
    optimizer.step()
    # Adam also keeps a step counter per parameter: a float32 scalar each
    counters = 2 * 4 if isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW) else 0
    assert memory.optimizer_state_bytes(optimizer) == (
        per_parameter * memory.parameter_bytes(net) + counters)


def test_saved_tensors_are_what_backward_needs_each_storage_once():
    x = torch.randn(64, 32)
    w = torch.randn(32, 16, requires_grad=True)
    with memory.SavedTensors(exclude=[x, w]) as saved:
        h = torch.relu(x @ w)  # the product saves x (excluded); relu saves its result
        z = (h * h).sum()  # saves h twice: one storage
    assert saved.nbytes == 64 * 16 * 4 and saved.count == 1
    with memory.SavedTensors() as everything:
        torch.relu(x @ w).sum()
    # x needs no gradient, so w is not saved: only what the backward pass will use
    assert everything.nbytes == (64 * 32 + 64 * 16) * 4
    with torch.no_grad(), memory.SavedTensors() as nothing:
        torch.relu(x @ w)
    assert nothing.nbytes == 0 and nothing.count == 0
    after = torch.relu(x @ w)  # the hooks are gone after the block
    assert saved.count == 1
    z.backward()
    del after


def test_saved_tensors_of_a_network_match_the_count_by_layers():
    """An MLP of Linear + ReLU layers keeps one batch x width tensor per ReLU (the next
    Linear saves the same tensor as its input) and log-softmax's output for the loss."""
    batch, width, layers = 8, 24, 3
    net = torch.nn.Sequential(torch.nn.Linear(10, width), torch.nn.ReLU(),
                              *[m for _ in range(layers - 1)
                                for m in (torch.nn.Linear(width, width), torch.nn.ReLU())],
                              torch.nn.Linear(width, 5))
    X, y = torch.randn(batch, 10), torch.randint(0, 5, (batch,))
    with memory.SavedTensors(exclude=[*net.parameters(), X, y]) as saved:
        loss = torch.nn.functional.cross_entropy(net(X), y)
    # cross-entropy's negative log-likelihood also saves a scalar (the total weight)
    assert saved.nbytes - (layers * batch * width + batch * 5) * 4 in (0, 4)
    loss.backward()


# ---------------------------------------------------------------------- issue 30's library bugs
def test_a_tensor_from_an_earlier_block_freed_in_a_later_one_is_not_a_negative_allocation():
    with memory.Tracker(CPU) as first:
        a = floats(1)
        first.mark("a")
    with memory.Tracker(CPU) as second:
        del a  # allocated in the first block: its free is not this block's business
        second.mark("freed an old tensor")
        b = floats(0.5)
        second.mark("b")
    assert first.readings[0].allocated == MiB
    assert [r.allocated / MiB for r in second.readings] == pytest.approx([0, 0.5])
    assert [r.peak / MiB for r in second.readings] == pytest.approx([0, 0.5])
    del b


def test_a_stale_size_never_subtracts_an_old_tensors_bytes():
    """The profiler remembers the size of every block it saw allocated, also after a free it
    did not see: a 1 MB tensor made later at the same address read as a 4 MB free."""
    coincided = 0
    for _ in range(3):
        with memory.Tracker(CPU):
            a = floats(4)
            address = a.data_ptr()
        del a  # freed while no profiler runs
        b = floats(1)  # often at the same address, allocated while no profiler runs
        coincided += b.data_ptr() == address
        with memory.Tracker(CPU) as tracker:
            del b
            tracker.mark("freed")
        assert tracker.readings[0].allocated == 0
        assert tracker.readings[0].peak == 0
        if coincided:  # the case the test is about has happened
            break
    if not coincided:
        pytest.skip("the allocator never reused the address here")


def test_frees_count_only_for_addresses_allocated_in_the_block_and_with_their_size():
    event = lambda ts, nbytes, addr: {"ts": ts, "name": "[memory]",  # noqa: E731
                                      "args": {"Bytes": nbytes, "Addr": addr,
                                               "Device Type": 0}}
    events = [event(1, -4_000_000, 7),  # a free of an address this block never allocated
              event(2, 1000, 8),  # allocated here ...
              event(3, -1000, 8),  # ... and freed: counted
              event(4, 500, 8),  # the address reused
              event(5, -4000, 8),  # a free whose size disagrees: the allocation's size counts
              event(6, 64, 9),
              event(7, 32, 10, ) | {"args": {"Bytes": 32, "Addr": 10, "Device Type": 1}}]
    assert memory._changes(events) == [(2, 1000), (3, -1000), (4, 500), (5, -500), (6, 64)]


def test_counting_on_the_meta_device_sizes_a_model_without_allocating_it():
    with torch.device("meta"):
        net = torch.nn.Sequential(torch.nn.Linear(10, 30), torch.nn.ReLU(),
                                  torch.nn.Linear(30, 10), torch.nn.BatchNorm1d(10))
    real = torch.nn.Sequential(torch.nn.Linear(10, 30), torch.nn.ReLU(),
                               torch.nn.Linear(30, 10), torch.nn.BatchNorm1d(10))
    assert memory.parameter_bytes(net) == memory.parameter_bytes(real) == (
        (10 * 30 + 30 + 30 * 10 + 10 + 10 + 10) * 4)
    assert memory.parameter_bytes(net, buffers=True) == memory.parameter_bytes(real, True)
    w = net[0].weight
    assert memory.tensor_bytes([w, w[1:], w.view(-1), w.t()]) == 1200  # views: one storage
    big = torch.empty(10**12, device="meta")  # 4 TB: counted, never allocated
    assert memory.tensor_bytes([big, big[::2], w]) == 4 * 10**12 + 1200
    assert memory.tensor_bytes([torch.empty(0, device="meta"), torch.empty(0)]) == 0
    optimizer = torch.optim.Adam(net.parameters())
    assert memory.optimizer_state_bytes(optimizer) == 0


def test_sparse_and_odd_tensors_count_the_storages_behind_them():
    dense = torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 3.0]])
    coo = dense.to_sparse()  # indices: 2 x 3 int64, values: 3 float32
    assert memory.tensor_bytes([coo]) == 2 * 3 * 8 + 3 * 4
    csr = torch.sparse_csr_tensor(torch.tensor([0, 1, 3]), torch.tensor([1, 0, 2]),
                                  torch.tensor([1.0, 2.0, 3.0]), (2, 3))
    assert memory.tensor_bytes([csr]) == 3 * 8 + 3 * 8 + 3 * 4  # crow, col, values
    # converted from COO, the column indices are a view of COO's 2 x 3 indices: all 48 bytes
    assert memory.tensor_bytes([dense.to_sparse_csr()]) == 3 * 8 + 2 * 3 * 8 + 3 * 4
    assert memory.tensor_bytes([coo, coo, csr]) == 60 + 60
    assert memory.tensor_bytes([torch.zeros(3, dtype=torch.bool)]) == 3
    assert memory.tensor_bytes([torch.zeros(5, dtype=torch.complex64)]) == 40
    x = torch.zeros(10)
    assert memory.tensor_bytes([x[3:4]]) == 40  # a view holds its whole storage


def test_saved_tensors_do_not_break_a_forward_pass_that_saves_a_sparse_tensor():
    sparse = torch.tensor([[0.0, 1.0, 0.0], [2.0, 0.0, 3.0]]).to_sparse()
    w = torch.randn(3, 4, requires_grad=True)
    with memory.SavedTensors(exclude=[w]) as saved:
        out = torch.sparse.mm(sparse, w)  # autograd saves the sparse matrix for w's gradient
    assert saved.nbytes == 2 * 3 * 8 + 3 * 4 and saved.count == 2
    out.sum().backward()
    assert w.grad is not None


def test_saved_tensors_leave_out_a_modules_buffers_batchnorms_running_statistics():
    batch, width = 8, 5
    net = torch.nn.Sequential(torch.nn.Linear(6, width), torch.nn.BatchNorm1d(width),
                              torch.nn.ReLU())
    X = torch.randn(batch, 6)
    with memory.SavedTensors(exclude=[net, X]) as saved:
        net(X).sum()
    # the linear layer's output (BatchNorm's input), the batch's mean and inverse standard
    # deviation (BatchNorm keeps them for backward), ReLU's output; not the running statistics
    assert saved.nbytes == (2 * batch * width + 2 * width) * 4
    with memory.SavedTensors(exclude=[*net.parameters(), X]) as with_buffers:
        net(X).sum()
    assert with_buffers.nbytes == saved.nbytes + 2 * width * 4


def test_the_timeline_export_that_the_docstring_names_exists_and_loads(tmp_path):
    import re
    import warnings

    from torch.profiler import ProfilerActivity, profile
    named = set(re.findall(r"profile\.(\w+)", memory.load_timeline.__doc__ + memory.__doc__))
    assert named and all(hasattr(profile, name) for name in named), named
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                 with_stack=True) as prof:
        net = torch.nn.Linear(100, 50)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        for _ in range(2):
            net(torch.randn(16, 100)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
    path = tmp_path / "cpu.raw.json.gz"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # deprecated, still there in 2.13
        prof.export_memory_timeline(str(path), device="cpu")
    times, sizes = memory.load_timeline(str(path))
    named = dict(zip(memory.CATEGORIES, max(sizes, key=sum), strict=True))
    assert named["parameter"] == named["optimizer state"] == (100 * 50 + 50) * 4


# ---------------------------------------------------------------------- raw timelines
def write_raw(path, events):
    import gzip
    import json
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as f:
        json.dump(events, f)


@pytest.mark.parametrize("name", ["t.raw.json", "t.raw.json.gz"])
def test_load_timeline_sums_bytes_by_category_over_time(tmp_path, name):
    path = tmp_path / name
    write_raw(path, [[-1, 1, 100, 0],  # a parameter from before the profile
                     [2_000_000, 2, 50, 4],  # an activation, 1 ms later
                     [1_000_000, 2, 30, 5],  # a gradient (events need not be sorted)
                     [3_000_000, 4, -50, 4],  # the activation freed
                     [3_000_000, 2, 8, 7]])  # same time: one row
    times, sizes = memory.load_timeline(str(path))
    assert times == [0, 1, 2]
    parameter, activation, gradient, unknown = 0, 4, 5, 7
    assert [s[parameter] for s in sizes] == [100, 100, 100]
    assert [s[gradient] for s in sizes] == [30, 30, 30]
    assert [s[activation] for s in sizes] == [0, 50, 0]
    assert [s[unknown] for s in sizes] == [0, 0, 8]
    assert memory.CATEGORIES[activation] == "activation"


def test_load_timeline_refuses_what_is_not_a_raw_timeline(tmp_path):
    path = tmp_path / "bad.json"
    write_raw(path, {"traceEvents": []})
    with pytest.raises(ValueError, match="not a raw memory timeline"):
        memory.load_timeline(str(path))
    write_raw(path, [[0, 2, 10, 9]])
    with pytest.raises(ValueError, match="category index 9"):
        memory.load_timeline(str(path))


def test_the_shipped_timeline_is_resnet50_with_momentum_at_batch_32():
    """The book's reading of the HolisticTraceAnalysis timeline (see its PROVENANCE.md)."""
    from importlib import resources
    path = resources.files("d2l_ext") / "data/memory_timelines/hta_memory_timeline.raw.json.gz"
    times, sizes = memory.load_timeline(str(path))
    at_peak = max(sizes, key=sum)
    named = dict(zip(memory.CATEGORIES, at_peak, strict=True))
    assert named["optimizer state"] == 25_557_032 * 4
    assert named["parameter"] == (25_557_032 + 2 * 26_560) * 4
    assert named["input"] == 32 * 3 * 224 * 224 * 4 + 32 * 1000 * 4
    assert named["activation"] > 2e9 and times[-1] > 0
    # "unknown" at the peak: one 128 MiB block and ResNet-50's 53 BatchNorm step counters
    assert named["unknown"] == 2**27 + 53 * 8


def test_the_shipped_timeline_was_recorded_by_the_cuda_caching_allocator():
    """Every allocation and free recorded during the run (actions 2 and 4) is a multiple of
    512 bytes, the CUDA caching allocator's smallest block; the CPU's allocator reports
    exact sizes."""
    import gzip
    import json
    from importlib import resources
    path = resources.files("d2l_ext") / "data/memory_timelines/hta_memory_timeline.raw.json.gz"
    with gzip.open(str(path), "rt") as f:
        raw = json.load(f)
    made = [e for e in raw if e[1] in (2, 4)]
    assert len(made) == 6690 and all(e[2] % 512 == 0 for e in made)
    with memory.Tracker(CPU) as tracker:
        x = torch.zeros(3)  # 12 bytes: not rounded on a CPU
        tracker.mark("x")
    assert tracker.readings[0].allocated == 12
    del x


# ---------------------------------------------------------------------- the C library's books
needs_glibc = pytest.mark.skipif(memory.malloc_in_use() is None, reason="needs glibc")


def free_in_another_thread(tensors: list) -> None:
    """Drop the last reference to the tensors from a thread the profiler does not follow (as
    a communication library's thread does when its work completes)."""
    worker = threading.Thread(target=tensors.clear)
    worker.start()
    worker.join()


@needs_glibc
def test_frees_on_other_threads_escape_the_profiler_but_not_malloc():
    """The reason for source="malloc": the profiler's running total keeps a tensor that a
    thread it does not profile freed; the C library's count lets it go."""
    readings = {}
    for source in ("profiler", "malloc"):
        with memory.Tracker(CPU, source=source) as tracker:
            held = [floats(32)]
            tracker.mark("allocated")
            free_in_another_thread(held)
            tracker.mark("freed elsewhere")
        readings[source] = [r.allocated / MiB for r in tracker.readings]
    assert readings["profiler"] == pytest.approx([32, 32])  # the free was not seen
    allocated, freed = readings["malloc"]
    assert allocated == pytest.approx(32, abs=1) and abs(freed) < 1


@needs_glibc
def test_malloc_readings_are_read_at_each_mark_and_have_no_separate_peak():
    with memory.Tracker(CPU, source="malloc") as tracker:
        a = floats(16)
        tracker.mark("a")
        assert tracker.readings[0].allocated / MiB == pytest.approx(16, abs=1)  # at once
        b = floats(8)
        del b
        tracker.mark("temporary gone")
    first, second = tracker.readings
    assert second.allocated / MiB == pytest.approx(16, abs=1)
    assert [r.peak for r in tracker.readings] == [r.allocated for r in tracker.readings]
    assert tracker.source == "malloc" and first.reserved is None
    with pytest.raises(RuntimeError, match="profiler"):
        tracker.timeline()
    del a


def test_a_source_must_fit_the_device(monkeypatch):
    with pytest.raises(ValueError, match="does not read cpu memory"):
        memory.Tracker(CPU, source="allocator")
    with pytest.raises(ValueError, match="does not read cuda memory"):
        memory.Tracker("cuda", source="malloc")
    monkeypatch.setattr(memory, "_MALLINFO2", None)
    assert memory.malloc_in_use() is None
    with pytest.raises(ValueError, match="glibc"):
        memory.Tracker(CPU, source="malloc")


# ---------------------------------------------------------------------- the page's script
@pytest.fixture(scope="module")
def memory_lab(chapter_module):
    """The sharding page's memory_lab.py, importable here and in the ranks."""
    return chapter_module("memory-sharding", "memory_lab.py")


@pytest.fixture(scope="module")
def sharded(memory_lab):
    from d2l_ext import comm

    strategies = ["DDP", "ZeRO-1", "FSDP, reshard_after_forward=False", "FSDP"]
    # width 512, depth 3: 1.3 M parameters, large against the processes' other allocations
    return {s: comm.spawn(memory_lab.sharded_run, 2, s, 512, 3, 16) for s in strategies}


@needs_glibc
def test_the_pages_sharding_strategies_train_alike_and_keep_what_they_shard(sharded):
    """Every strategy ends two steps with DDP's parameters, and between steps a process
    keeps about 16, 12 and 6 bytes per parameter under DDP, ZeRO-1 and FSDP (with the
    processes' other allocations, a few MiB, on top): a strategy that did not shard, or a
    Tracker that missed frees, fails."""
    numbers = 784 * 512 + 512 + 2 * (512 * 512 + 512) + 512 * 10 + 10
    ddp = sharded["DDP"][0]["params"]
    kept = {}
    for strategy, ranks in sharded.items():
        for result in ranks:
            assert len(result["params"]) == len(ddp)
            assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(result["params"], ddp))
            assert len(result["losses"]) == 2 and result["losses"][1] < result["losses"][0]
            labels = [label for label, _, _ in result["readings"]]
            assert labels[0] == "wrapped" and labels[-1] == "zero_grad 2"
        kept[strategy] = max(r["readings"][-1][1] for r in ranks) / numbers
    # the processes' other allocations (gloo's buffers, Python objects of modules imported
    # on first use) add a few MiB that differ a little between strategies: wide margins
    assert kept["DDP"] - kept["ZeRO-1"] == pytest.approx(4, abs=2)  # half of Adam's 8
    assert kept["ZeRO-1"] - kept["FSDP"] > 2  # counted: 6 (buckets, half the weights)
    assert kept["FSDP"] == pytest.approx(kept["FSDP, reshard_after_forward=False"], abs=3)
    assert 6 <= kept["FSDP"] < 6 + 12


# ---------------------------------------------------------------- the chapter's shared MLP
@pytest.mark.parametrize("width, depth", [(16, 1), (32, 3)])
def test_the_mlps_counts_are_its_parameters_and_its_saved_tensors(width, depth):
    net = memory.mlp(width, depth, inputs=20, classes=5)
    assert sum(p.numel() for p in net.parameters()) == memory.mlp_numbers(width, depth, 20, 5)
    assert memory.parameter_bytes(net) == 4 * memory.mlp_numbers(width, depth, 20, 5)
    X, y = torch.randn(7, 1, 4, 5), torch.zeros(7, dtype=torch.long)
    with memory.SavedTensors(exclude=[*net.parameters(), X, y]) as saved:
        torch.nn.functional.cross_entropy(net(X), y)
    # and the loss's total weight, a float32 scalar that the count leaves out
    assert saved.nbytes == memory.mlp_activations(7, width, depth, classes=5) + 4
    assert memory.mlp_activations(7, width, depth, classes=5, nbytes=2) == (saved.nbytes - 4) // 2


@pytest.mark.parametrize("depth", [0, -1])
def test_the_mlp_refuses_fewer_than_one_hidden_layer(depth):
    with pytest.raises(ValueError, match="at least one hidden layer"):
        memory.mlp(8, depth)


def test_step_memory_leaves_the_callers_random_stream_alone():
    X, y = torch.randn(4, 1, 28, 28), torch.randint(0, 10, (4,))
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    memory.step_memory(lambda: memory.mlp(8, 1), X, y)
    assert torch.equal(torch.rand(3), expected)


def test_step_memory_never_reseeds_an_accelerator(monkeypatch):
    """fork_rng(devices=[]) restores only the CPU's generator: step_memory must not touch
    CUDA's (torch.manual_seed would reseed every CUDA device), and it builds the same model
    every time."""
    reseeded = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda seed: reseeded.append(seed))
    monkeypatch.setattr(torch.cuda, "manual_seed", lambda seed: reseeded.append(seed))
    X, y = torch.randn(4, 1, 28, 28), torch.randint(0, 10, (4,))
    first = memory.step_memory(lambda: memory.mlp(8, 1), X, y)
    assert memory.step_memory(lambda: memory.mlp(8, 1), X, y) == first
    assert reseeded == []


def test_step_memory_measures_adams_state_and_the_second_forward_pass():
    width, depth, batch = 64, 2, 16
    X, y = torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
    memory.warm_up(lambda: memory.mlp(width, depth), X, y)
    m = memory.step_memory(lambda: memory.mlp(width, depth), X, y)
    numbers = memory.mlp_numbers(width, depth)
    counters = 4 * 2 * (depth + 1)  # Adam's float32 step counter per tensor, on a CPU
    assert m["state"] == 4 * numbers + 8 * numbers + counters  # parameters, Adam's moments
    assert abs(m["activations"] - memory.mlp_activations(batch, width, depth)) <= 16  # loss
    assert m["where"] in ("forward", "backward", "step") and m["peak"] > m["state"]
