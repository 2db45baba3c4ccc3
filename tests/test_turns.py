"""d2l_ext.turns: timing in turns, blocks of calls, and the verdict on two timings.

The block rules are tested against a clock that only the work moves (``clock``), so that a
busy machine cannot change what the tests see."""

from types import SimpleNamespace

import pytest

from d2l_ext import turns, utils
from d2l_ext.i18n import message
from d2l_ext.utils import Timing


class FakeClock:
    """A clock that stands still until the work advances it."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def work(self, seconds: float, then=None):
        """A function that takes ``seconds`` on this clock (and calls ``then()``)."""
        def f():
            self.now += seconds
            if then is not None:
                then()
        return f


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    for module in (turns, utils):  # the modules that read the time of a block
        monkeypatch.setattr(module, "time", SimpleNamespace(perf_counter=fake.perf_counter))
    return fake


def _barrier_counter():
    calls = []
    return calls, lambda: calls.append("barrier")


def test_functions_are_timed_in_turns_after_one_warm_up_each():
    order = []
    _, barrier = _barrier_counter()
    timer = turns.TurnTimer(barrier, min_block=1e-9)  # every call is one block
    timings = timer({"a": lambda: order.append("a"), "b": lambda: order.append("b")},
                    repeats=3)
    assert set(timings) == {"a", "b"}
    assert all(len(t.times) == 3 for t in timings.values())
    # warm-up a, b; then the first timing of each (one call), then a, b, a, b in turns
    assert order == ["a", "b"] + ["a", "b"] * 3


def test_short_work_is_timed_in_blocks_that_last_min_block(clock):
    count = {"n": 0}
    short = clock.work(0.001, lambda: count.update(n=count["n"] + 1))
    timer = turns.TurnTimer(lambda: None, min_block=0.02)
    timing = timer.once(short)
    calls = timer.block_calls[short]
    assert calls * 0.001 >= 0.02 - 1e-12  # the block lasted min_block, not one short call
    assert calls < 0.02 / 0.001 * 10  # ... and not ten times longer
    assert timing.repetitions == calls
    assert timing.min == pytest.approx(0.001)  # seconds per call, not per block
    before = count["n"]
    timer.once(short)
    assert count["n"] - before == calls  # the same block size every repeat


def test_long_work_is_one_call_per_repeat(clock):
    timer = turns.TurnTimer(lambda: None, min_block=0.005)
    f = clock.work(0.01)
    timer.once(f)
    assert timer.block_calls[f] == 1


def test_each_repeat_starts_and_ends_with_a_barrier():
    barriers, barrier = _barrier_counter()
    timer = turns.TurnTimer(barrier, min_block=1e-9)
    timer({"x": lambda: None}, repeats=4)
    assert len(barriers) == 2 * 4  # warm-up has none; each timed block has two


def test_calls_per_block_grows_until_the_block_is_long(clock):
    # one call: 0.002 s, so the next block is min(0.02 / 0.002 x 1.2, 10) = 10 times larger,
    # and 10 calls last 0.02 s
    assert turns.calls_per_block(clock.work(0.002), lambda: None, min_block=0.02) == 10
    assert turns.calls_per_block(clock.work(0.0001), lambda: None, min_block=0.02) == 240
    assert turns.calls_per_block(lambda: None, lambda: None, min_block=1.0, max_calls=50) == 50


@pytest.mark.parametrize("bad", [{"repeats": 0}, {"functions": {}}])
def test_bad_input_is_refused_with_a_reason(bad):
    timer = turns.TurnTimer(lambda: None)
    with pytest.raises(ValueError, match="repeats|at least one"):
        timer(bad.get("functions", {"a": lambda: None}), repeats=bad.get("repeats", 1))
    with pytest.raises(ValueError, match="positive"):
        turns.TurnTimer(lambda: None, min_block=0)


def test_versus_follows_the_ranges_in_both_languages():
    fast, slow = Timing((1.0, 1.1, 1.2)), Timing((2.0, 2.1, 2.2))
    overlapping = Timing((1.1, 2.05, 2.5))
    name = message(en="compiled", zh="编译后")
    said = turns.versus(name, fast, "eager", slow)
    assert "faster" in said.en and "in every run" in said.en and "快" in said.zh
    assert "ran 1.91× as fast" in said.en and "编译后" in said.zh
    said = turns.versus("eager", slow, "compiled", fast)
    assert "slower" in said.en and "took 1.91× as long" in said.en and "慢" in said.zh
    said = turns.versus("a", fast, "b", overlapping)
    assert "overlap" in said.en and "看不出差别" in said.zh
    with pytest.raises(ValueError, match="positive"):
        turns.versus("a", Timing((0.0,)), "b", fast)


def test_both_and_joined():
    assert turns.both("plain") == ("plain", "plain")
    assert turns.both(message(en="a", zh="甲")) == ("a", "甲")
    text = turns.joined([message(en="a", zh="甲"), message(en="b", zh="乙")], ", ", "，")
    assert (text.en, text.zh) == ("a, b", "甲，乙")
    assert turns.joined([], ", ", "，").en == ""


def test_calibrated_blocks_keep_the_order_and_one_call_stays_one(clock):
    """With blocks of several calls the functions still take turns; a function that lasts
    min_block on its own is timed one call at a time; the Timings carry the block size, and
    the calibrations are forgotten after the call (nothing kept alive)."""
    order = []
    short = clock.work(0.001, lambda: order.append("s"))
    long = clock.work(0.012, lambda: order.append("L"))
    timer = turns.TurnTimer(lambda: None, min_block=0.01)
    timings = timer({"s": short, "L": long}, repeats=3)
    assert timings["L"].repetitions == 1 and timings["s"].repetitions >= 2
    calls = timings["s"].repetitions
    runs = "".join(order[2:])  # after the warm-up of each
    # the first turn calibrates short (growing blocks) then times long once; after that the
    # blocks alternate: `calls` short ones, one long one
    assert runs.endswith(("s" * calls + "L") * 2)
    assert timer.block_calls == {}


def test_timing_uses_the_same_block_rule(clock):
    from d2l_ext import timing

    assert timing.MIN_BLOCK is turns.MIN_BLOCK
    assert timing.calls_per_block(clock.work(0.002), "cpu", min_block=0.02) == 10
