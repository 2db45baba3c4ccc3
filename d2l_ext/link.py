"""Emulated network links for the processes of one machine (the communication chapter, PyTorch).

On a loopback every byte is copied by the cores that also compute: all processes share one
medium, and neither a ring's spread bytes nor DDP's overlap can show. ``EmulatedLinks`` gives
every rank of a gloo group a link of its own, full duplex, with a latency and a rate: a
message of ``n`` bytes from rank ``a`` to rank ``b`` occupies ``a``'s sending side and
``b``'s receiving side for ``latency + n / rate`` seconds, after both are free. The bytes
themselves still travel over the loopback, at once; the receiver and the sender then sleep
until the emulated transfer ends, so the cores are free while bytes are "on the wire" (as
they are while a network card or NCCL moves them). Where the loopback is slower than the
emulated link, its own time shows through.

The processes must run on one machine: they share the schedule (an array in shared memory)
and the clock (``time.monotonic``, which Linux, macOS and Windows keep system-wide).
"""

from __future__ import annotations

import math
import multiprocessing
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from d2l_ext.i18n import Text, message
from d2l_ext.utils import Timing

__all__ = ["EmulatedLinks", "hidden_lesson", "overlap_bound", "overlap_close", "ratio_lesson",
           "reserve", "typical_spread"]

#: gloo tags of the small message that carries a transfer's end time, and of the bytes that
#: follow it (not 0, the tag of a user's own sends to the same peer).
_HEADER_TAG, _DATA_TAG = 7301, 7302


def reserve(free: list[float], src: int, dst: int, seconds: float, now: float) -> float:
    """Book a transfer of ``seconds`` from rank ``src`` to rank ``dst`` in the schedule
    ``free`` (for each rank: its sending side's free time at ``2 * rank``, its receiving
    side's at ``2 * rank + 1``); return the time the transfer ends. It starts when both
    sides are free, and not before ``now``."""
    start = max(now, free[2 * src], free[2 * dst + 1])
    end = start + seconds
    free[2 * src] = free[2 * dst + 1] = end
    return end


def _check_tensor(tensor) -> None:
    import torch

    if tensor.layout != torch.strided or tensor.device.type != "cpu":
        raise ValueError("EmulatedLinks sends dense CPU tensors (gloo's rule); got a "
                         f"{tensor.layout} tensor on {tensor.device}.")
    if not tensor.is_contiguous():
        raise ValueError("EmulatedLinks sends contiguous tensors (gloo's rule): pass "
                         "tensor.contiguous(), and copy a received one back where it belongs.")


def _sleep_until(end: float) -> None:
    delay = end - time.monotonic()
    if delay > 0:
        time.sleep(delay)  # releases the core: nothing computes for the link


class _Paced:
    """A request that completes when its messages have arrived and the emulated transfer
    has ended (``end()`` gives its end time once the messages have arrived)."""

    def __init__(self, requests: list, end: Callable[[], float], keep: Any = None) -> None:
        self._requests, self._end, self._keep = requests, end, keep

    def wait(self) -> bool:
        for request in self._requests:
            request.wait()
        _sleep_until(self._end())
        return True


class EmulatedLinks:
    """One emulated link per rank, for ``world_size`` ranks of a gloo group on this machine.

    Make it before ``comm.spawn`` and pass it to the ranks as an argument; in a rank,
    ``send``/``recv``/``isend``/``irecv`` replace ``torch.distributed``'s, ``all_reduce``
    is a ring all-reduce that takes the ring's time on these links, and ``ddp_hook()`` is a
    DDP communication hook that does the same for each bucket, in the background.

    ``rate``: bytes per second in each direction; ``latency``: seconds per message.
    """

    def __init__(self, world_size: int, rate: float, latency: float) -> None:
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be a positive integer, got {world_size!r}.")
        if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
            raise ValueError(f"rate must be a positive number of bytes per second, got {rate!r}.")
        if not (isinstance(latency, (int, float)) and math.isfinite(latency) and latency >= 0):
            raise ValueError(f"latency must be a number of seconds >= 0, got {latency!r}.")
        self.world_size, self.rate, self.latency = world_size, float(rate), float(latency)
        # The schedule, shared by all ranks: passed to them while they start (comm.spawn).
        self._free = multiprocessing.get_context("spawn").Array("d", 2 * world_size)
        self._worker: threading.Thread | None = None
        self._jobs: queue.Queue | None = None
        self._ring_free = 0.0

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.update(_worker=None, _jobs=None, _ring_free=0.0)  # a process's own
        return state

    def __repr__(self) -> str:
        return (f"EmulatedLinks(world_size={self.world_size}, rate={self.rate:g} B/s, "
                f"latency={self.latency * 1e6:g} us)")

    # -- the model -------------------------------------------------------------------------
    def message_time(self, nbytes: float) -> float:
        """Seconds for one message of ``nbytes`` on an idle link."""
        return self.latency + nbytes / self.rate

    def ring_time(self, nbytes: float, k: int | None = None) -> float:
        """Seconds for a ring all-reduce of ``nbytes`` among ``k`` ranks (default: all):
        2 (k - 1) messages of n / k bytes, all ranks sending at once."""
        k = self.world_size if k is None else k
        return 2 * (k - 1) * self.message_time(nbytes / k)

    def server_time(self, nbytes: float, k: int | None = None) -> float:
        """Seconds for an all-reduce of ``nbytes`` through one of ``k`` ranks: k - 1 messages
        into its link, one after the other, then k - 1 out of it."""
        k = self.world_size if k is None else k
        return 2 * (k - 1) * self.message_time(nbytes)

    # -- point to point ----------------------------------------------------------------------
    def _group(self) -> tuple[Any, int]:
        import torch.distributed as dist

        if not dist.is_initialized():
            raise RuntimeError("EmulatedLinks works inside a process group: call it in the "
                               "ranks that comm.spawn starts.")
        if dist.get_backend() != "gloo":
            raise RuntimeError("EmulatedLinks emulates links between CPU processes: start "
                               "the group with backend='gloo' (NCCL's GPUs have real links).")
        if dist.get_world_size() != self.world_size:
            size = dist.get_world_size()
            raise RuntimeError(f"these links are for {self.world_size} ranks; the group has "
                               f"{size}. Make EmulatedLinks({size}, ...).")
        return dist, dist.get_rank()

    def isend(self, tensor, dst: int) -> _Paced:
        """Start sending ``tensor`` to rank ``dst``; ``wait()`` returns when the emulated
        transfer has ended."""
        import torch

        dist, rank = self._group()
        _check_tensor(tensor)  # before booking: a refused send must not hold the link
        seconds = self.message_time(tensor.numel() * tensor.element_size())
        with self._free.get_lock():
            end = reserve(self._free, rank, dst, seconds, time.monotonic())
        header = torch.tensor([end], dtype=torch.float64)
        requests = [dist.isend(header, dst, tag=_HEADER_TAG),
                    dist.isend(tensor, dst, tag=_DATA_TAG)]
        return _Paced(requests, lambda: end, keep=header)

    def irecv(self, tensor, src: int) -> _Paced:
        """Start receiving ``tensor`` from rank ``src``; ``wait()`` returns when the emulated
        transfer has ended."""
        import torch

        dist, _ = self._group()
        _check_tensor(tensor)
        header = torch.zeros(1, dtype=torch.float64)
        requests = [dist.irecv(header, src, tag=_HEADER_TAG),
                    dist.irecv(tensor, src, tag=_DATA_TAG)]
        return _Paced(requests, lambda: float(header[0]))

    def batch_isend_irecv(self, ops: list) -> list[_Paced]:
        """Start the sends and receives in ``ops`` (``torch.distributed.P2POp``, as for
        ``torch.distributed.batch_isend_irecv``) on the emulated links; one request each."""
        return [self.isend(op.tensor, op.peer) if getattr(op.op, "__name__", "") == "isend"
                else self.irecv(op.tensor, op.peer) for op in ops]

    def send(self, tensor, dst: int) -> None:
        """Send ``tensor`` to rank ``dst``, returning when the emulated transfer has ended."""
        self.isend(tensor, dst).wait()

    def recv(self, tensor, src: int) -> None:
        """Receive ``tensor`` from rank ``src``, returning when the emulated transfer ended."""
        self.irecv(tensor, src).wait()

    # -- all-reduce ----------------------------------------------------------------------------
    def _start_all_reduce(self, tensor) -> Callable[[], float]:
        """Start gloo's all-reduce of ``tensor`` and of the ranks' start times; return a
        function that waits for both and gives the emulated ring's end time."""
        import torch

        dist, _ = self._group()
        stamp = torch.tensor([time.monotonic()], dtype=torch.float64)
        header = dist.all_reduce(stamp, op=dist.ReduceOp.MAX, async_op=True)
        payload = dist.all_reduce(tensor, async_op=True)
        seconds = self.ring_time(tensor.numel() * tensor.element_size())

        def end() -> float:  # called in order: every rank books the same times
            header.wait()
            start = max(float(stamp[0]), self._ring_free)  # the last rank to arrive
            self._ring_free = start + seconds
            payload.wait()
            return self._ring_free
        return end

    def all_reduce(self, tensor) -> None:
        """Sum ``tensor`` over the ranks, in place, in the time a ring takes on these links."""
        self._drain()
        end = self._start_all_reduce(tensor)
        _sleep_until(end())

    def _drain(self) -> None:
        if self._jobs is not None:
            self._jobs.join()

    def _serve(self) -> None:
        while True:
            end, tensor, future = self._jobs.get()
            try:
                _sleep_until(end())
                future.set_result(tensor)
            except BaseException as error:  # noqa: BLE001 - handed to DDP, which raises it
                future.set_exception(error)
            finally:
                self._jobs.task_done()

    def ddp_hook(self) -> Callable:
        """A DDP communication hook: each bucket averaged by a ring all-reduce that ends when
        the emulated ring would, waited for by a thread of this process, so that backward
        goes on meanwhile (``ddp.register_comm_hook(None, links.ddp_hook())``)."""
        import torch

        def hook(state, bucket):
            import torch.distributed as dist

            if self._worker is None:
                self._jobs = queue.Queue()
                self._worker = threading.Thread(target=self._serve, daemon=True)
                self._worker.start()
            tensor = bucket.buffer().div_(dist.get_world_size())
            end = self._start_all_reduce(tensor)
            future = torch.futures.Future()
            self._jobs.put((end, tensor, future))
            return future
        return hook


# ---- reading the emulated runs (the communication chapter) ---------------------------------------

def ratio_lesson(measured: Mapping[int, float], model: Mapping[int, float],
                 slack: float = 0.25) -> Text:
    """What server / ring on emulated links says, for each process count k: ``measured``
    and ``model`` ratios. "Follows" needs the ratio to grow with k and stay within ``slack``
    of the model at every k."""
    if not measured or set(measured) != set(model):
        raise ValueError("measured and model need the same process counts, at least one.")
    ks = sorted(measured)
    grows = all(measured[a] < measured[b] for a, b in zip(ks, ks[1:]))
    miss = max(abs(measured[k] / model[k] - 1) for k in ks)
    listed_en = ", ".join(f"{measured[k]:.2f}" for k in ks)
    listed_zh = "、".join(f"{measured[k]:.2f}" for k in ks)
    model_en = ", ".join(f"{model[k]:.2f}" for k in ks)
    model_zh = "、".join(f"{model[k]:.2f}" for k in ks)
    counts_en, counts_zh = ", ".join(map(str, ks)), "、".join(map(str, ks))
    head = message(
        en=f"on emulated links the server took {listed_en} times as long as the ring with "
           f"{counts_en} processes; the model of separate links says {model_en}",
        zh=f"在模拟链路上，{counts_zh} 个进程时服务器式的耗时{'分别' if len(ks) > 1 else ''}"
           f"是环形的 {listed_zh} 倍；"
           f"按每个进程各有一条链路的模型，应为 {model_zh}")
    if len(ks) > 1 and grows and miss <= slack:
        tail = message(en=f": the ratio grows with k, within {miss:.0%} of the model",
                       zh=f"，这个比值随 k 增长，与模型相差不超过 {miss:.0%}")
    elif len(ks) > 1 and grows:
        tail = message(en=f": the ratio grows with k, as the model says, but misses it by up "
                          f"to {miss:.0%}",
                       zh=f"，这个比值像模型说的那样随 k 增长，但与模型最多相差 {miss:.0%}")
    elif len(ks) > 1:
        tail = message(en=": the ratio does not grow with k here, against the model",
                       zh="，但这里的比值并没有随 k 增长，与模型不符")
    else:
        tail = message(en=f" (one process count: the growth with k is not shown; the miss "
                          f"is {miss:.0%})",
                       zh=f"（只有一种进程数，看不出随 k 的增长；偏差为 {miss:.0%}）")
    return message(en=head.en + tail.en + ".", zh=head.zh + tail.zh + "。")


def typical_spread(timing: Timing) -> float:
    """The interquartile range of a setting's timings (seconds): the spread of its typical
    rounds, which one disturbed round does not set (max - min would)."""
    q1, q3 = np.percentile(timing.times, [25, 75])
    return float(q3 - q1)


def overlap_bound(compute: float, forward: float, communicate: float) -> float:
    """The most that overlap can hide in a step: the smaller of the backward pass (the
    computation minus its forward pass, timed alone) and the communication (seconds)."""
    return min(max(compute - forward, 0.0), communicate)


def hidden_lesson(one_bucket: Timing, best: float, best_name: Text, faster: bool,
                  compute: float, forward: float, communicate: float,
                  loopback: float | None = None) -> Text:
    """How much communication DDP's buckets hid on emulated links: the step with one bucket
    (its timings) against the best setting (seconds, median; ``faster``: that setting's
    verdict against one bucket, :attr:`d2l_ext.comm.Paired.verdict`, was "faster"), beside
    the computation, its forward pass, the emulated all-reduce and, if given, the real
    loopback all-reduce under it, each timed alone (seconds)."""
    if min(one_bucket.median, best, compute, communicate) <= 0 or forward < 0:
        raise ValueError("the times must be positive.")
    backward = max(compute - forward, 0.0)
    bound = overlap_bound(compute, forward, communicate)
    spread = typical_spread(one_bucket)
    head = message(
        en=f"With one bucket a step took {one_bucket.median * 1e3:,.1f} ms, against "
           f"{(compute + communicate) * 1e3:,.1f} ms for the computation and the communication "
           "timed alone and added",
        zh=f"只用一个桶时，一步耗时 {one_bucket.median * 1e3:,.1f} 毫秒；计算与通信各自单独计时，"
           f"两者相加为 {(compute + communicate) * 1e3:,.1f} 毫秒")
    limit = message(
        en=f"Backward took about {backward * 1e3:,.1f} ms (the computation minus a forward pass "
           "timed alone); the smaller of it and the communication, "
           f"{bound * 1e3:,.1f} ms, is the most any bucketing could hide here.",
        zh=f"反向传播约耗时 {backward * 1e3:,.1f} 毫秒（计算减去单独计时的前向传播）；反向传播与"
           f"通信两者中较短的那个，即 {bound * 1e3:,.1f} 毫秒，"
           "是这里任何分桶方式最多能藏起来的时间。")
    cores = message(en="", zh="") if loopback is None else message(
        en=f" The emulated links need no cores, but the real all-reduce underneath does: "
           f"{loopback * 1e3:,.1f} ms alone over the loopback, on the cores that compute "
           "backward.",
        zh=f"模拟链路本身不占用核心，但底下真正经由回环接口的全归约要占用：它单独计时为 "
           f"{loopback * 1e3:,.1f} 毫秒，用的正是计算反向传播的那些核心。")
    if not faster:
        short = (message(
            en=f" That is within the one-bucket step's spread (the interquartile range of its "
               f"rounds, {spread * 1e3:,.1f} ms): this run could not show overlap.",
            zh="这还落在只用一个桶时一步的波动之内（各遍的四分位距为 "
               f"{spread * 1e3:,.1f} 毫秒），所以这次运行显示不出重叠的效果。")
            if bound <= spread else message(en="", zh=""))
        return message(
            en=head.en + f"; the best setting with several buckets, “{best_name.en}”, took "
                         f"{best * 1e3:,.1f} ms. " + limit.en + short.en + cores.en,
            zh=head.zh + f"；分多个桶的设置中，最好的“{best_name.zh}”耗时 "
                         f"{best * 1e3:,.1f} 毫秒。" + limit.zh + short.zh + cores.zh)
    gain = one_bucket.median - best
    return message(
        en=head.en + f"; with “{best_name.en}” it took {best * 1e3:,.1f} ms: "
                     f"{gain * 1e3:,.1f} ms, {gain / communicate:.0%} of the communication, "
                     "hidden behind backward. " + limit.en + cores.en,
        zh=head.zh + f"；改用“{best_name.zh}”后，一步为 {best * 1e3:,.1f} 毫秒：有 "
                     f"{gain * 1e3:,.1f} 毫秒，即通信的 {gain / communicate:.0%}，藏到了反向传播"
                     "后面。" + limit.zh + cores.zh)


#: Where the plain (not emulated) DDP of the communication chapter ran, by backend, in a sentence.
_ELSEWHERE = {"gloo": message(en="the loopback, where the bytes need the cores",
                              zh="在字节需要核心的回环接口上"),
              "nccl": message(en="NCCL between GPUs", zh="在 GPU 之间用 NCCL 通信时")}


def overlap_close(on_links: bool, elsewhere: bool, backend: str = "gloo",
                  could_show: bool = True) -> Text:
    """The communication chapter's lesson on overlap from two verdicts
    (:attr:`d2l_ext.comm.Paired.verdict`,
    which may allow a round the other way): did a DDP with several buckets beat one bucket on
    emulated links (``on_links``), and with the plain DDP on
    ``backend`` (``elsewhere``)? ``could_show``: was the most that overlap could hide on the
    links beyond the spread of the steps?"""
    if backend not in _ELSEWHERE:
        raise ValueError(f"backend must be one of {sorted(_ELSEWHERE)}, got {backend!r}.")
    where = _ELSEWHERE[backend]
    if not on_links and not could_show:
        return message(
            en="buckets can hide communication only behind backward computation; here the most "
               "they could hide, the smaller of backward and the communication, was within the "
               "steps' spread, so the emulated run could not show it.",
            zh="分桶只能把通信藏到反向传播的计算后面；这里它们最多能藏起来的时间，即反向传播与"
               "通信两者中较短的那个，还落在一步的波动之内，所以模拟链路上的运行显示不出来。")
    if not on_links:
        return message(
            en="buckets are expected to hide communication behind backward where the links "
               "work without the processors, but this run shows no such gain even on emulated "
               "links.",
            zh="链路不需要处理器也能工作时，分桶按理能把通信藏到反向传播后面；"
               "但这次运行即使在模拟链路上也没能显示出这种收益。")
    if elsewhere:
        return message(
            en="buckets hide communication behind backward where the links work without the "
               f"processors, as the emulated links show; in this run they paid on {where.en}, "
               "as well.",
            zh="链路不需要处理器就能工作时，分桶能把通信藏到反向传播后面，模拟链路显示了这一点；"
               f"这次运行中，{where.zh}，分桶也带来了好处。")
    return message(
        en="buckets hide communication behind backward where the links work without the "
           f"processors, as the emulated links show; on {where.en}, the same settings showed "
           "no gain beyond the rounds' spread in this run.",
        zh="链路不需要处理器就能工作时，分桶能把通信藏到反向传播后面，模拟链路显示了这一点；"
           f"{where.zh}，同样的设置在这次运行中没有显示出超出各遍之间波动的收益。")
