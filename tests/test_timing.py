"""d2l_ext.timing: the book's timing rules, on a CPU and on a scripted GPU.

The scripted GPU is a small simulation of one CUDA stream: the host's clock advances as the
host issues work (``time.perf_counter`` is replaced by it), each kernel starts when the stream
reaches it and the device is free, events take the device time at which the stream reaches
them, and ``synchronize`` moves the host's clock to the end of the queue. With it the tests
check what the rules are for: a device time that does not depend on the host's pace, warm-up
costs kept out, blockers that outlast the issuing.
"""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from d2l_ext import timing  # noqa: E402
from d2l_ext.utils import Timing  # noqa: E402


class ScriptedGpu:
    """One simulated CUDA stream and the host that feeds it (seconds)."""

    def __init__(self, clock_hz: float = 1.5e9, queue: int | None = None) -> None:
        self.host = 0.0
        self.free_at = 0.0  # when the device has finished everything queued so far
        self.clock_hz = clock_hz
        self.log: list[str] = []
        self.queue = queue  # how many launched kernels may wait to start (None: no limit)
        self.starts: list[float] = []  # start times of the kernels queued so far

    def enqueue(self, seconds: float) -> float:
        """Queue a kernel now; return when it ends on the device. With a full launch queue
        the host first waits until the oldest waiting kernel starts."""
        if self.queue is not None:
            waiting = [t for t in self.starts if t > self.host]
            if len(waiting) >= self.queue:
                self.host = waiting[-self.queue]
            self.starts = [t for t in self.starts if t > self.host]
        start = max(self.host, self.free_at)
        self.free_at = start + seconds
        self.starts.append(start)
        return self.free_at

    def issue(self, host_seconds: float, device_seconds: float, name: str = "f") -> None:
        self.host += host_seconds
        self.enqueue(device_seconds)
        self.log.append(name)

    # the three calls d2l_ext.timing makes
    def event(self):
        gpu = self

        class Event:
            at: float | None = None

            def record(self) -> None:
                gpu.log.append("record")
                self.at = gpu.enqueue(0.0)

            def elapsed_time(self, other) -> float:
                return (other.at - self.at) * 1e3  # milliseconds, as CUDA events

        return Event()

    def synchronize(self, device) -> None:
        self.log.append("sync")
        self.host = max(self.host, self.free_at)

    def sleep(self, cycles: int) -> None:
        self.log.append("blocker")
        self.host += 5e-6
        self.enqueue(cycles / self.clock_hz)


@pytest.fixture
def gpu(monkeypatch):
    scripted = ScriptedGpu()
    monkeypatch.setattr(timing, "CUDA", scripted)
    monkeypatch.setattr(timing.time, "perf_counter", lambda: scripted.host)
    monkeypatch.setattr(timing, "_CYCLES_PER_SECOND", {})
    return scripted


CUDA0 = torch.device("cuda", 0)


def kernel(gpu: ScriptedGpu, host_us: float, device_us: float, first_call_ms: float = 0.0):
    """A call that costs the host `host_us` to issue and the device `device_us` to run; its
    first call also costs the host `first_call_ms` (loading the kernel, growing the pool)."""
    calls = []

    def f():
        extra = first_call_ms * 1e-3 if not calls else 0.0
        calls.append(1)
        gpu.issue(host_us * 1e-6 + extra, device_us * 1e-6)

    f.calls = calls
    return f


def test_device_time_is_the_devices_even_when_the_host_is_slower(gpu):
    f = kernel(gpu, host_us=20, device_us=5)
    measured = timing.device_time(f, CUDA0)
    assert measured.median == pytest.approx(5e-6, rel=1e-6)
    assert measured.repetitions >= timing.MIN_CALLS


def test_without_a_blocker_the_events_would_measure_the_host(gpu):
    """The control: the same events with no blocker in front read the host's pace."""
    f = kernel(gpu, host_us=20, device_us=5)
    f()
    gpu.synchronize(CUDA0)
    start, end = gpu.event(), gpu.event()
    start.record()
    for _ in range(100):
        f()
    end.record()
    gpu.synchronize(CUDA0)
    assert start.elapsed_time(end) / 1e3 / 100 == pytest.approx(20e-6, rel=0.01)


def test_split_time_names_the_side_that_limits(gpu):
    host_bound = timing.split_time(kernel(gpu, host_us=20, device_us=5), CUDA0)
    assert host_bound.device.median == pytest.approx(5e-6, rel=1e-6)
    assert host_bound.host.median == pytest.approx(20e-6, rel=1e-6)
    assert host_bound.wall.median == pytest.approx(20e-6, rel=0.01)
    assert host_bound.bound == "host"
    device_bound = timing.split_time(kernel(gpu, host_us=10, device_us=50), CUDA0)
    assert device_bound.device.median == pytest.approx(50e-6, rel=1e-6)
    assert device_bound.wall.median == pytest.approx(50e-6, rel=0.01)
    assert device_bound.bound == "device"


def test_every_timed_window_queues_the_blocker_before_the_events_and_ends_with_a_barrier(gpu):
    f = kernel(gpu, host_us=20, device_us=5)
    timing.device_time(f, CUDA0, calls=100, repeats=3)
    log = " ".join(gpu.log)
    windows = log.split("blocker record ")[1:]
    assert len(windows) >= 3
    for window in windows[-3:]:
        calls = window.split(" record")[0].split()
        assert calls == ["f"] * 100  # back to back, nothing else between the events
        assert window.split(" record", 1)[1].split()[0] == "sync"


def test_the_first_calls_costs_stay_out_of_every_timing(gpu):
    """The exact call is warmed up, before anything is timed: a 30 ms first call (lazy
    loading) is in no measurement."""
    for measure in (timing.device_time, timing.time_per_call):
        gpu.log.clear()
        f = kernel(gpu, host_us=5, device_us=40, first_call_ms=30)
        measured = measure(f, CUDA0, warmup=3)
        assert measured.max == pytest.approx(40e-6, rel=0.01)
        assert gpu.log[:4] == ["f", "f", "f", "sync"]


def test_time_per_call_times_blocks_that_last_at_least_min_block(gpu):
    f = kernel(gpu, host_us=5, device_us=40)
    measured = timing.time_per_call(f, CUDA0, min_block=0.05)
    assert measured.repetitions * 40e-6 >= 0.05
    assert measured.median == pytest.approx(40e-6, rel=0.01)
    one_shot = timing.time_per_call(f, CUDA0, min_block=0.0)
    assert one_shot.repetitions == 1  # what the rule forbids: one call between barriers


def test_a_blocker_too_short_for_the_issuing_is_made_longer(gpu, monkeypatch):
    """If the host issues more slowly than the first estimate, the next blocker is longer."""
    f = kernel(gpu, host_us=20, device_us=5)
    slow = {"on": False}
    original = gpu.issue

    def issue(host_seconds, device_seconds, name="f"):
        original(host_seconds * (10 if slow["on"] else 1), device_seconds, name)

    monkeypatch.setattr(gpu, "issue", issue)
    # the first estimate of the issuing is taken at 20 us per call; then the host slows down
    calls_before = len(f.calls)
    original_issue = timing._issue_seconds

    def estimate_then_slow(*args, **kwargs):
        seconds = original_issue(*args, **kwargs)
        slow["on"] = True
        return seconds

    monkeypatch.setattr(timing, "_issue_seconds", estimate_then_slow)
    measured = timing.split_time(f, CUDA0, calls=100, repeats=3)
    assert len(f.calls) > calls_before
    assert measured.device.max == pytest.approx(5e-6, rel=1e-6)  # no window waited
    assert measured.host.median == pytest.approx(200e-6, rel=1e-6)


def test_the_blocker_lasts_as_long_as_asked(gpu):
    timing.block_device(CUDA0, 0.010)
    assert gpu.free_at - gpu.host == pytest.approx(0.010, rel=0.01)


def test_arguments_that_break_a_rule_are_refused(gpu):
    f = kernel(gpu, host_us=1, device_us=1)
    with pytest.raises(ValueError, match="calls must be at least 1"):
        timing.device_time(f, CUDA0, calls=0)
    with pytest.raises(ValueError, match="warmup must be at least 1"):
        timing.time_per_call(f, CUDA0, warmup=0)
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        timing.split_time(f, CUDA0, repeats=0)


def test_on_a_cpu_the_three_times_are_the_wall_time_of_real_work():
    def f():
        deadline = time.perf_counter() + 2e-4
        while time.perf_counter() < deadline:
            pass

    split = timing.split_time(f, "cpu", repeats=3)
    assert split.on_cpu and split.bound == "one"
    assert split.device is split.host is split.wall
    assert split.wall.min >= 2e-4
    # a block of back-to-back calls, not one call (how many depends on the machine's load)
    assert split.wall.repetitions > 10


def test_timing_says_for_itself_whether_it_was_disturbed():
    tight = Timing((0.0425, 0.0425, 0.0426))
    noisy = Timing((0.010, 0.014, 0.015, 0.016))
    assert not tight.disturbed and tight.typical == tight.median
    assert noisy.disturbed and noisy.typical == noisy.min
    with pytest.raises(ValueError, match="repetitions"):
        Timing((1.0,), repetitions=0)


def test_a_call_that_waits_for_the_device_is_found_and_not_escalated(gpu):
    """A step with a synchronisation in it: the host cannot issue it behind a blocker. The
    split says so, its events span the device's waits, and the blockers stay short."""
    def f():
        gpu.issue(10e-6, 2e-3)
        gpu.synchronize(CUDA0)  # e.g. a .item() in the step

    split = timing.split_time(f, CUDA0, calls=2, repeats=3)
    assert split.syncs and split.bound == "sync"
    assert split.device.median == pytest.approx(2e-3 + 10e-6, rel=0.01)
    assert gpu.host < 5.0  # no blocker grew to seconds


def test_calls_none_chooses_a_window_of_at_least_ten_milliseconds(gpu):
    """A 4 ms step: 3 calls between the events; a 5 us operation: the 100-call cap."""
    step = timing.split_time(kernel(gpu, host_us=500, device_us=4000), CUDA0, calls=None)
    assert step.device.repetitions == 3 and not step.syncs
    assert step.device.median == pytest.approx(4e-3, rel=1e-6)
    tiny = timing.split_time(kernel(gpu, host_us=2, device_us=5), CUDA0, calls=None)
    assert tiny.device.repetitions == timing.MIN_CALLS


def step_of_kernels(gpu: ScriptedGpu, kernels: int, host_ms: float, device_ms: float):
    """A training step: ``kernels`` launches costing the host and the device these totals."""
    def step():
        for _ in range(kernels):
            gpu.issue(host_ms * 1e-3 / kernels, device_ms * 1e-3 / kernels)
    return step


@pytest.mark.parametrize("host_ms, device_ms, bound", [(10, 7, "host"), (8, 11, "device")])
def test_the_ladders_split_of_a_step_of_hundreds_of_kernels_fits_the_launch_queue(
        gpu, host_ms, device_ms, bound):
    """With CUDA's launch queue (about 1,000 kernels), 100 calls of a 300-kernel step fill it:
    the host waits behind the blocker and the step reads as one that waits. The ladder's few
    calls per window leave the split its meaning."""
    from d2l_ext import ladder

    gpu.queue = 1_024
    step = step_of_kernels(gpu, 300, host_ms, device_ms)
    split = timing.split_time(step, CUDA0, calls=ladder.SPLIT_CALLS, repeats=3, warmup=1)
    assert not split.syncs and split.bound == bound
    assert split.device.median == pytest.approx(device_ms * 1e-3, rel=1e-3)
    assert split.host.median == pytest.approx(host_ms * 1e-3, rel=1e-3)
    crowded = timing.split_time(step, CUDA0, calls=100, repeats=3, warmup=1)
    assert crowded.syncs  # the control: too many calls for the queue


@pytest.mark.parametrize("unit, digits, zh", [
    ("s", 3, "0.011 秒（0.010\u20131,234.500）"),
    ("ms", 1, "11.0 毫秒（10.0\u20131,234,500.0）"),
    ("us", 0, "11,000 微秒（10,000\u20131,234,500,000）"),
])
def test_timing_text_in_chinese_names_each_unit_in_chinese(monkeypatch, unit, digits, zh):
    """What a zh page prints for a timing: the unit in Chinese (秒, 毫秒, 微秒), the range in
    full-width parentheses, thousands separated; the English stays ``ms (…)``."""
    t = Timing((0.011, 0.010, 1234.5))
    assert t.text(unit, digits).zh == zh
    en_unit = {"us": "\u00b5s"}.get(unit, unit)  # microseconds are written µs
    assert t.text(unit, digits).en.startswith(f"{zh.split(' ')[0]} {en_unit} (")
    monkeypatch.setenv("D2L_LANG", "zh")
    assert t.text(unit, digits) == zh  # printed as the reader's language says
