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
