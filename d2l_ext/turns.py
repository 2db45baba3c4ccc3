"""Timing settings in turns, and saying what two timings show (the tuning chapter's pages).

Settings that are compared with each other are timed *in turns* (a, b, c, a, b, c, ...),
after one warm-up call each, so that a slow spell of the machine falls on all of them alike
rather than on whichever ran last. Each timed repeat is a *block* of back-to-back calls that
lasts at least ``min_block`` seconds between two barriers (or a single call, where one lasts
that long): a single short call between two barriers would time the launch and the barrier,
not the work. The module imports no framework: the caller passes its barrier
(``d2l.synchronize``), so both tabs of a page use the same rules.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Iterable, Mapping

from d2l_ext.i18n import Text, message
from d2l_ext.utils import Timing, measure

#: The shortest block of calls timed between two barriers, in seconds (the book's rule,
#: shared with :mod:`d2l_ext.timing`).
MIN_BLOCK = 0.05


def block_seconds(f: Callable[[], object], barrier: Callable[[], object], calls: int) -> float:
    """Seconds that ``calls`` back-to-back calls of ``f()`` take between two barriers."""
    barrier()
    start = time.perf_counter()
    for _ in range(calls):
        f()
    barrier()
    return time.perf_counter() - start


def calls_per_block(f: Callable[[], object], barrier: Callable[[], object],
                    min_block: float = MIN_BLOCK, max_calls: int = 1_000_000) -> int:
    """How many back-to-back calls of ``f()`` last at least ``min_block`` seconds between two
    barriers, found by timing growing blocks (``f`` should be warmed up)."""
    calls = 1
    while True:
        seconds = block_seconds(f, barrier, calls)
        if seconds >= min_block or calls >= max_calls:
            return calls
        grow = min_block / seconds * 1.2 if seconds > 0 else 10.0
        calls = min(max_calls, max(calls + 1, math.ceil(calls * min(grow, 10.0))))


class TurnTimer:
    """Times functions in turns; each repeat of each function is one block of calls.

    ``barrier()`` waits until the device has finished all queued work. The number of calls
    per block is found once per function at its first timing and kept until the end of the
    call that times it, so every repeat of a function times the same amount of work; the
    Timings returned carry it as ``repetitions``.
    """

    def __init__(self, barrier: Callable[[], object], min_block: float = MIN_BLOCK) -> None:
        if min_block <= 0:
            raise ValueError(f"min_block must be positive (seconds), got {min_block}.")
        self.barrier = barrier
        self.min_block = min_block
        self.block_calls: dict[Callable[[], object], int] = {}

    def once(self, f: Callable[[], object]) -> Timing:
        """One timed run of ``f``, in seconds per call (``repetitions``: calls in the block)."""
        if f not in self.block_calls:
            first = measure(f, self.barrier, repeats=1, warmup=0)
            if first.min >= self.min_block:
                self.block_calls[f] = 1
                return first
            self.block_calls[f] = calls_per_block(f, self.barrier, self.min_block)
        calls = self.block_calls[f]
        return Timing((block_seconds(f, self.barrier, calls) / calls,), repetitions=calls)

    def __call__(self, functions: Mapping[Hashable, Callable[[], object]],
                 repeats: int = 5) -> dict[Hashable, Timing]:
        """Time each of ``functions`` ``repeats`` times, in turns, after one warm-up call each."""
        if repeats < 1:
            raise ValueError(f"repeats must be at least 1, got {repeats}.")
        if not functions:
            raise ValueError("give at least one function to time (a dict: name -> function).")
        for f in functions.values():
            f()
        times: dict[Hashable, list[float]] = {name: [] for name in functions}
        try:
            for _ in range(repeats):
                for name, f in functions.items():
                    times[name] += self.once(f).times
            return {name: Timing(tuple(t), repetitions=self.block_calls[f])
                    for (name, t), f in zip(times.items(), functions.values())}
        finally:  # forget the calibrations, and with them what the functions hold alive
            for f in functions.values():
                self.block_calls.pop(f, None)


def both(name: Text | str) -> tuple[str, str]:
    """The English and the Chinese of a message (a plain name is the same in both)."""
    return getattr(name, "en", name), getattr(name, "zh", name)


def joined(texts: Iterable[Text], en: str, zh: str) -> Text:
    """Messages joined by a separator: ``en`` in English and ``zh`` in Chinese."""
    texts = list(texts)
    return message(en=en.join(t.en for t in texts), zh=zh.join(t.zh for t in texts))


def versus(name: Text | str, a: Timing, other: Text | str, b: Timing) -> Text:
    """What two timings show, judged by their ranges: ``name`` (timed ``a``) was faster than
    ``other`` (timed ``b``) in every run, slower in every run, or the ranges overlap; with
    the ratio of the medians. A sentence in both languages."""
    if a.median <= 0 or b.median <= 0:
        raise ValueError("compare timings of work that took time (both medians positive).")
    (v_en, v_zh), (o_en, o_zh) = both(name), both(other)
    ratio = b.median / a.median
    if ratio >= 1:
        medians = (f"by the medians, the first ran {ratio:.2f}\u00d7 as fast",
                   f"按中位数，前者的速度是后者的 {ratio:.2f} 倍")
    else:  # the first is the slower: say how much longer it took, not "0.56x as fast"
        medians = (f"by the medians, the first took {1 / ratio:.2f}\u00d7 as long",
                   f"按中位数，前者的用时是后者的 {1 / ratio:.2f} 倍")
    if a.clearly_faster(b):
        return message(en=f"\u201c{v_en}\u201d was faster than \u201c{o_en}\u201d in every run "
                          f"({medians[0]}).",
                       zh=f"“{v_zh}”每一次都比“{o_zh}”快（{medians[1]}）。")
    if b.clearly_faster(a):
        return message(en=f"\u201c{v_en}\u201d was slower than \u201c{o_en}\u201d in every run "
                          f"({medians[0]}).",
                       zh=f"“{v_zh}”每一次都比“{o_zh}”慢（{medians[1]}）。")
    return message(en=f"\u201c{v_en}\u201d and \u201c{o_en}\u201d: the ranges overlap "
                      f"({medians[0]}), no clear difference.",
                   zh=f"“{v_zh}”与“{o_zh}”的范围重叠（{medians[1]}），看不出差别。")
