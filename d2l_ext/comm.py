"""Communication between processes, for the communication chapter (PyTorch): start a group, time a
collective, fit the cost of a message.

``spawn`` runs a function in ``k`` processes joined by ``torch.distributed`` (gloo over the
loopback interface on a CPU, NCCL with one GPU per process), returns what each rank returned,
and names a rank that fails or hangs instead of waiting forever. ``timing`` times a
collective across the group, every repeat between two barriers of all processes.
``fit_alpha_beta`` fits the latency-bandwidth model ``t = alpha + n / beta``.
``against`` reads settings timed in interleaved rounds against a control, round by round,
and ``apart`` says whether two settings run with several seeds differ beyond the seeds'
spread; ``overlap_lesson``, ``buffer_lesson`` and ``reduction_lesson`` word what the communication
chapter's
runs show (DDP's buckets against one bucket, a flat buffer's copies, a server's additions).
"""

from __future__ import annotations

import datetime
import math
import os
import pickle
import queue as queue_module
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from d2l_ext.i18n import Text, message
from d2l_ext.utils import Table, Timing, paired_verdict, signed, text_table

# torch is imported inside the functions that need it: the cost model's functions
# (fit_alpha_beta, bus_bandwidth) serve the MXNet half of the book too, without torch.

__all__ = ["Paired", "against", "apart", "buffer_lesson", "bus_bandwidth", "device",
           "fit_alpha_beta", "overlap_lesson", "reduction_lesson", "spawn", "timing"]


def device() -> torch.device:  # noqa: F821 - torch is imported lazily
    """This rank's device: ``cuda:<local rank>`` when the group runs on GPUs (NCCL), else the
    CPU (gloo)."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world_size: int, fn: Callable, args: tuple, backend: str,
               port: int, timeout: float, threads: int, results) -> None:
    import torch
    import torch.distributed as dist

    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
        torch.set_num_threads(threads)
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout))
        value = fn(rank, world_size, *args)
        results.put((rank, "ok", pickle.dumps(value)))
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises
        # Reported before the group is torn down, so that this rank's own error reaches
        # the parent before the "connection closed" of the ranks that were waiting for it.
        results.put((rank, "error", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    results.close()
    results.join_thread()  # the queue's feeder thread has handed the result over
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip the interpreter's shutdown: a gloo thread may still hold finished work.
    os._exit(0)


#: Words of an error that a rank gets when another rank died or failed first.
_PEER_LOST = ("connection closed by peer", "connection reset by peer", "broken pipe",
              "remote worker crashing")


def _collect(procs: list, results, world_size: int, timeout: float
             ) -> tuple[dict[int, Any], list[str]]:
    """The values that the ranks returned and what went wrong (killed ranks and ranks' own
    errors first, then errors of ranks that lost a peer, then ranks that never finished)."""
    values: dict[int, Any] = {}
    errors: dict[int, str] = {}
    deadline = time.monotonic() + timeout
    grace = None  # after a first failure, a moment for the other ranks' reports
    while len(values) + len(errors) < world_size:
        now = time.monotonic()
        if now > deadline or (grace is not None and now > grace):
            break
        try:
            rank, status, payload = results.get(timeout=0.2)
        except queue_module.Empty:
            for r, p in enumerate(procs):
                if r not in values and r not in errors and p.exitcode not in (None, 0):
                    code = p.exitcode
                    how = (f"was killed by signal {-code}" if code < 0
                           else f"exited with status {code}")
                    errors[r] = f"{how} before returning"
            for r, p in enumerate(procs):  # exited cleanly, but its report never came
                if (r not in values and r not in errors and p.exitcode == 0
                        and grace is not None):
                    errors[r] = "exited without returning a value"
            if errors and grace is None:
                grace = time.monotonic() + 2.0
            continue
        if status == "ok":
            values[rank] = pickle.loads(payload)
        else:
            errors[rank] = f"failed:\n{payload}"
            if grace is None:
                grace = time.monotonic() + 2.0
    if not errors and len(values) < world_size:
        missing = [r for r in range(world_size) if r not in values]
        return values, [f"rank(s) {missing} of {world_size} did not finish within "
                        f"timeout={timeout:g} s (stuck, e.g. waiting for a message that no "
                        "rank sends)"]

    def lost_a_peer(item: tuple[int, str]) -> bool:
        return any(word in item[1].lower() for word in _PEER_LOST)

    ordered = sorted(errors.items(), key=lambda item: (lost_a_peer(item), item[0]))
    return values, [f"rank {r} of {world_size} {text}" for r, text in ordered]


def _context():
    """Processes forked from a server that has imported torch already: each rank starts in
    a fraction of a second instead of importing torch anew (a fresh, single-threaded
    server, so forking is safe where forking the caller, with its threads, is not)."""
    import torch.multiprocessing as mp

    if sys.platform == "win32":
        return mp.get_context("spawn")
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(["torch", "torch.distributed", "d2l_ext.comm"])
    return context


def spawn(fn: Callable[..., Any], world_size: int, *args: Any, timeout: float = 120.0,
          backend: str | None = None, threads: int | None = None) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` new processes that form one
    ``torch.distributed`` group; return the ``world_size`` values they returned, by rank.

    ``backend``: ``"gloo"`` (CPU processes over the loopback interface) or ``"nccl"`` (one
    GPU per process); default NCCL when there are at least ``world_size`` GPUs, else gloo.
    ``threads``: torch threads per process (default: the cores shared out evenly, at least
    one). ``fn`` must be importable by the new processes (defined in a module, such as a
    script the page writes, not in a notebook cell), and its values picklable.

    A rank that raises, dies or is still running after ``timeout`` seconds stops the others,
    and ``spawn`` raises a ``RuntimeError`` that names it (first the rank that failed by
    itself, then those that lost it as a peer).

    The processes are forked from a server started at the first call: they see the
    environment variables of that moment (set ``CUDA_VISIBLE_DEVICES`` and the like
    before the first call), and the current ``sys.path`` and working directory.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive integer, got {world_size!r}.")
    if getattr(fn, "__module__", None) == "__main__":
        raise ValueError(f"{fn.__name__} is defined in __main__ (a notebook cell or a script "
                         "run directly); the new processes cannot import it. Define it in a "
                         "module, e.g. a file written with %%writefile, and import it.")
    import torch

    if backend is None:
        backend = "nccl" if torch.cuda.device_count() >= world_size else "gloo"
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}.")
    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise ValueError(f"NCCL needs one GPU per process: {world_size} processes, "
                         f"{torch.cuda.device_count()} GPUs. Use backend='gloo' or fewer.")
    if threads is None:
        threads = max(1, (os.cpu_count() or 1) // world_size)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}.")
    context = _context()
    results = context.Queue()
    port = _free_port()
    procs = [context.Process(target=_rank_main, daemon=True,
                             args=(rank, world_size, fn, args, backend, port, timeout,
                                   threads, results))
             for rank in range(world_size)]
    for p in procs:
        p.start()
    failures: list[str] = []
    try:
        values, failures = _collect(procs, results, world_size, timeout)
    finally:
        for p in procs:
            if p.is_alive() and failures:
                p.terminate()
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    if failures:
        raise RuntimeError(f"{fn.__name__}: {failures[0]}"
                           + "".join(f"\n(also: {f.splitlines()[0]})" for f in failures[1:])
                           + "\nThe other ranks were stopped.")
    return [values[r] for r in range(world_size)]


def timing(op: Callable[[], Any], repeats: int = 5, iters: int = 1, warmup: int = 1) -> Timing:
    """Time ``op()`` in every rank of the group: ``repeats`` timings, each of ``iters`` calls
    between two barriers of all ranks (the first barrier drains the device's queue too), per
    call; each timing is the slowest rank's. Call it in all ranks; all get the same result.
    """
    import torch
    import torch.distributed as dist

    if repeats < 1 or iters < 1:
        raise ValueError(f"repeats and iters must be at least 1, got {repeats}, {iters}.")
    dev = device()

    def barrier() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        dist.barrier()

    for _ in range(warmup):
        op()
    times = []
    for _ in range(repeats):
        barrier()
        start = time.perf_counter()
        for _ in range(iters):
            op()
        barrier()
        times.append((time.perf_counter() - start) / iters)
    slowest = torch.tensor(times, dtype=torch.float64, device=dev)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return Timing(tuple(slowest.tolist()))


def scaling_table(rows: Sequence[Sequence[float]]) -> Table:
    """The communication chapter's scaling model as a table in the reader's language, one row
    per
    process count ``k``. Each row holds, in this order: ``k``; the all-reduce's bus bandwidth
    (bytes/s); the all-reduce's time (s); the step's computation per process under strong
    scaling (s) and the communication it leaves exposed (s); the efficiency of strong
    scaling; the efficiency of weak scaling, with and without overlap (fractions of 1).
    Times are shown in milliseconds, bandwidths in GB/s, efficiencies in percent."""
    columns = [message(en="k", zh="k"),
               message(en="busbw (GB/s)", zh="总线带宽（GB/s）"),
               message(en="all-reduce (ms)", zh="全归约（毫秒）"),
               message(en="strong: compute (ms)", zh="强扩展：计算（毫秒）"),
               message(en="strong: exposed (ms)", zh="强扩展：暴露（毫秒）"),
               message(en="strong: efficiency", zh="强扩展：效率"),
               message(en="weak: efficiency", zh="弱扩展：效率"),
               message(en="weak, no overlap", zh="弱扩展、不重叠：效率")]
    shown = []
    for row in rows:
        if len(row) != 8:
            raise ValueError(f"each row needs 8 values (k, bus bandwidth, all-reduce, compute, "
                             f"exposed, and three efficiencies), got {len(row)}.")
        k, busbw, comm_s, compute_s, exposed_s, strong, weak, weak_serial = row
        shown.append([int(k), busbw / 1e9, comm_s * 1e3, compute_s * 1e3, exposed_s * 1e3,
                      strong, weak, weak_serial])
    return text_table(columns, shown, ["d", ",.0f", ".1f", ".1f", ".1f", ".0%", ".0%", ".0%"])


def fit_alpha_beta(sizes: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    """Fit ``t = alpha + n / beta`` to message sizes ``n`` (bytes) and times ``t`` (seconds);
    return ``(alpha, beta)``: the latency in seconds and the bandwidth in bytes per second.

    The fit minimises the squared *relative* errors, so that the small messages, which set
    alpha, count as much as the large ones, which set beta. A fitted alpha below zero is
    clipped to zero (the data then show no measurable latency).
    """
    n = np.asarray(sizes, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if n.shape != t.shape or n.ndim != 1:
        raise ValueError(f"sizes and seconds must be two lists of one length, got "
                         f"{n.shape} and {t.shape}.")
    if len(n) < 2 or len(np.unique(n)) < 2:
        raise ValueError("fitting alpha and beta needs at least two different sizes.")
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(n))):
        raise ValueError("sizes and times must be finite numbers.")
    if np.any(t <= 0) or np.any(n < 0):
        raise ValueError("times must be positive and sizes non-negative.")
    design = np.stack([np.ones_like(n), n], axis=1) / t[:, None]
    (alpha, inv_beta), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    if inv_beta <= 0:
        raise ValueError("the times do not grow with the size: no bandwidth can be fitted "
                         "(measure larger messages).")
    if alpha < 0:
        alpha = 0.0
        ratio = n / t  # t = n / beta alone, again in relative errors
        inv_beta = float(np.sum(ratio) / np.sum(ratio**2))
    return float(alpha), float(1.0 / inv_beta)


def bus_bandwidth(nbytes: float, seconds: float, world_size: int) -> float:
    """The "bus bandwidth" of an all-reduce of ``nbytes`` that took ``seconds`` among
    ``world_size`` processes, as NCCL's tests report it: the algorithm bandwidth
    ``nbytes / seconds`` times ``2 (k - 1) / k``, the share of the data that each process
    must send (and receive) in a ring. It compares runs with different process counts."""
    if world_size < 1 or seconds <= 0:
        raise ValueError("world_size must be at least 1 and seconds positive.")
    return nbytes / seconds * 2 * (world_size - 1) / world_size


# ---- reading a comparison: paired rounds, seeds -----------------------------------------

@dataclass(frozen=True)
class Paired:
    """A setting against a control timed in the same rounds: the ratio of their times in each
    round (``setting / control``; below 1: the setting was faster in that round)."""

    ratios: tuple[float, ...]
    allow: int = 0  # rounds that may go the other way without changing the verdict

    @property
    def median(self) -> float:
        return float(np.median(self.ratios))

    @property
    def verdict(self) -> str:
        """``"faster"`` or ``"slower"`` only if so in every round but at most ``allow``,
        else ``"no clear gain"`` (:func:`d2l_ext.utils.paired_verdict`)."""
        return paired_verdict(self.ratios, self.allow)


def against(times: Mapping[str, Sequence[float]], control: str,
            allow: int = 0) -> dict[str, Paired]:
    """Every setting in ``times`` (its seconds in each round, the rounds in the same order
    for every setting) against ``control``, round by round; ``allow``: rounds that may go the
    other way without changing a verdict (one disturbed round need not veto it)."""
    if control not in times:
        raise ValueError(f"the control {control!r} is not among the settings {list(times)}.")
    base = list(times[control])
    out = {}
    for name, seconds in times.items():
        if name == control:
            continue
        if len(seconds) != len(base) or not base:
            raise ValueError(f"{name!r} has {len(seconds)} rounds, the control {len(base)}: "
                             "the settings must be timed in the same rounds.")
        if not 0 <= allow < len(base) / 2:
            raise ValueError(f"allow must be at least 0 and under half the {len(base)} "
                             f"rounds, got {allow}.")
        out[name] = Paired(tuple(t / c for t, c in zip(seconds, base)), allow)
    return out


def picked_false_alarm(rounds: int, settings: int = 1, allow: int = 0) -> float:
    """The chance of a false "faster" verdict (:attr:`Paired.verdict`) for the best of
    ``settings`` settings, each exactly as fast as the control: one setting's ratios fall
    below 1 in all ``rounds`` but at most ``allow`` with chance
    sum(C(rounds, j) for j <= allow) / 2**rounds; picking the best of ``settings`` raises it
    to at most ``settings`` times that (one direction only, unlike
    :func:`d2l_ext.utils.false_alarm`, which counts either verdict)."""
    if rounds < 1 or settings < 1 or allow < 0:
        raise ValueError("rounds and settings must be at least 1, allow at least 0.")
    one = sum(math.comb(rounds, j) for j in range(allow + 1)) / 2 ** rounds
    return min(1.0, settings * one)


def best_overlap(versus: Mapping[str, Paired], buckets: Mapping[str, int]) -> str | None:
    """The setting with several buckets that :func:`overlap_lesson` reads: the settings
    judged "faster" first, then "no clear gain", then "slower"; the lowest median within the
    first group that has any (``None`` where no setting made more than one bucket)."""
    several = {name: p for name, p in versus.items() if buckets.get(name, 0) > 1}
    if not several:
        return None
    rank = {"faster": 0, "no clear gain": 1, "slower": 2}
    return min(several, key=lambda name: (rank[several[name].verdict], several[name].median))


def overlap_lesson(versus: Mapping[str, Paired], buckets: Mapping[str, int], rounds: int,
                   names: Mapping[str, Text] | None = None) -> Text:
    """What a run says about overlap: DDP with several buckets (``versus``: each setting
    against DDP with one bucket, from :func:`against`; ``buckets``: the buckets each setting
    all-reduced in a step) judged by the setting with the lowest median ratio. ``names`` gives
    the settings' names in both languages (default: the keys)."""
    several = {name: p for name, p in versus.items() if buckets.get(name, 0) > 1}
    if not several:
        return message(en="No setting made more than one bucket here, so this run cannot "
                          "tell whether overlap pays.",
                       zh="这里没有哪个设置分出了不止一个桶，所以这次运行无法判断重叠是否划算。")
    best = best_overlap(versus, buckets)
    p, shown = several[best], (names or {}).get(best) or message(en=best, zh=best)
    en, zh = f'"{shown.en}" ({buckets[best]} buckets)', f"“{shown.zh}”（{buckets[best]} 个桶）"
    allow = p.allow

    def rounds_text(won: int) -> tuple[str, str]:  # the exact count of rounds won
        if won == rounds:
            return f"in all {rounds} rounds", f"在全部 {rounds} 遍中每一遍都"
        return f"in {won} of the {rounds} rounds", f"在 {rounds} 遍中有 {won} 遍"

    every_en, every_zh = (("in every round", "每一遍都") if not allow else
                          (f"in at least {rounds - allow} rounds of {rounds}",
                           f"在 {rounds} 遍中至少 {rounds - allow} 遍"))
    if p.verdict == "faster":
        each_en, each_zh = rounds_text(sum(r < 1 for r in p.ratios))
        m, chance = len(several), picked_false_alarm(rounds, len(several), allow)
        if m == 1:
            odds_en = (f"a setting exactly as fast as one bucket would earn this verdict by chance "
                       f"with a probability of {chance:.1%}")
            odds_zh = f"一个与一个桶同样快的设置纯属偶然被判为更快的概率是 {chance:.1%}"
        else:
            odds_en = (f"were all {m} settings with several buckets exactly as fast as one "
                       f"bucket, one of them would earn this verdict by chance with a "
                       f"probability of up to about {chance:.1%}")
            odds_zh = (f"假如分多个桶的 {m} 个设置其实都与一个桶同样快，其中至少有一个纯属偶然"
                       f"被判为更快的概率最多约为 {chance:.1%}")
        return message(
            en=f"{en} was faster than DDP with one bucket {each_en}, by {1 - p.median:.0%} at "
               f"the median: overlap paid in this run ({odds_en}).",
            zh=f"{zh}{each_zh}比只用一个桶的 DDP 快，按中位数耗时少 "
               f"{1 - p.median:.0%}，可见这次运行中重叠带来了好处（{odds_zh}）。")
    if p.verdict == "slower":
        each_en, each_zh = rounds_text(sum(r > 1 for r in p.ratios))
        return message(
            en=f"Even the best setting with several buckets, {en}, was slower than DDP with "
               f"one bucket {each_en}, by {p.median - 1:.0%} at the median: in this run, "
               "overlapping cost more than it hid.",
            zh=f"分多个桶的设置中最好的{zh}，也{each_zh}比只用一个桶慢，"
               f"按中位数耗时多 {p.median - 1:.0%}，可见这次运行中重叠的代价超过了它藏起来的通信。")
    return message(
        en=f"No setting with several buckets was faster than DDP with one bucket {every_en}; "
           f"the best, {en}, took {p.median:.0%} of one bucket's time at the median: no gain "
           "from overlap beyond the round-to-round spread in this run.",
        zh=f"分多个桶的设置没有一个{every_zh}比只用一个桶快；其中最好的{zh}，"
           f"按中位数，耗时是一个桶的 {p.median:.0%}：这次运行看不出超出各遍之间波动的重叠收益。")


def apart(a: Sequence[float], b: Sequence[float]) -> str:
    """Two settings, each run with several seeds (``a``, ``b``: one result per seed):
    ``"higher"`` if every result of ``a`` lies above every result of ``b``, ``"lower"`` if
    below, else ``"within"`` (the seeds' ranges overlap: the difference lies within the
    spread from seed to seed)."""
    if not a or not b:
        raise ValueError("each setting needs at least one result.")
    if min(a) > max(b):
        return "higher"
    if max(a) < min(b):
        return "lower"
    return "within"


def apart_chance(a: int, b: int) -> float:
    """The chance that :func:`apart` says ``"higher"`` (or, equally, ``"lower"``) for two
    settings with ``a`` and ``b`` results that come from one and the same continuous
    distribution: every ordering of the ``a + b`` results is equally likely, and one of the
    C(a + b, a) ways to choose the places of ``a``'s results puts them all on top."""
    if a < 1 or b < 1:
        raise ValueError("each setting needs at least one result.")
    return 1 / math.comb(a + b, a)


def fit_miss_note(size: str, miss: float) -> Text:
    """The communication chapter's note on the all-reduce's own alpha-beta fit: its largest miss
    (``miss``:
    measured over modelled, minus one) and where (``size``); a fit that misses by more than
    half makes its fitted numbers, and ratios of them, rough."""
    pct = signed(miss, "+.0%")
    if abs(miss) <= 0.5:
        return message(
            en=f"The all-reduce's own fit: its largest miss was {pct} (at {size}).",
            zh=f"全归约自己的拟合，最大偏差为 {pct}（在 {size} 处）。")
    return message(
        en=f"Its own fit, though, missed by up to {pct} (at {size}), beyond 50%, so "
           "these two ratios are rough.",
        zh=f"不过，全归约自己的拟合最大偏差达 {pct}（在 {size} 处），超过 50%，"
           "所以这两个比值只能粗略地看。")


def reduce_verdict(reduce_beta: float, beta: float, between_gpus: bool,
                   miss: float = 0.0) -> Text:
    """The communication chapter's reading of the all-reduce's fitted bandwidth (``reduce_beta``)
    against one
    message's (``beta``), both fitted on the backend the run used: gloo over the loopback
    (``between_gpus`` false) or NCCL between two GPUs. ``miss``, the largest miss of the two
    fits behind the betas (measured over modelled, minus one): beyond half, the reading
    says that it is rough."""
    verdict = _reduce_verdict(reduce_beta, beta, between_gpus)
    if abs(miss) <= 0.5:
        return verdict
    pct = signed(miss, "+.0%")
    return message(
        en=f"{verdict.en}; these two fits miss their times by up to {pct}, so this "
           "too is rough",
        zh=f"{verdict.zh}。这两个拟合与实测时间的最大偏差达 {pct}，所以这个结论也只能"
           "粗略地看")


def _reduce_verdict(reduce_beta: float, beta: float, between_gpus: bool) -> Text:
    """``reduce_verdict`` without its hedge."""
    if reduce_beta < 0.8 * beta:
        if between_gpus:
            return message(
                en="the all-reduce moved its bytes more slowly than one message; between GPUs "
                   "the candidates, not measured here, are the reduction kernel that adds the "
                   "halves on each GPU and the kernel launches of its steps",
                zh="全归约搬运字节比单条消息慢；在 GPU 之间，可能的原因（这里没有测量）"
                   "是每块 GPU 上把两半相加的归约核函数，以及各个步骤的核函数发射")
        return message(
            en="the all-reduce moved its bytes more slowly than one message, as expected where "
               "both directions and the additions share the same cores (as on a loopback) "
               "instead of two wires",
            zh="全归约搬运字节比单条消息慢。两个方向的传输和加法若都由同一批核心完成（回环接口上"
               "正是如此），而不是由两条线路分担，结果就会是这样")
    if reduce_beta > 1.25 * beta:
        return message(
            en="the all-reduce moved its bytes faster than one message, which the model does not "
               "predict: the library's all-reduce uses more parallel paths than one send",
            zh="全归约搬运字节比单条消息还快，这是模型没有预测到的：库的全归约用到的并行通路比一次发送多")
    return message(
        en="the all-reduce moved its bytes about as fast as one message, as the model expects "
           "when both directions run at once",
        zh="全归约搬运字节的速度与单条消息相近，正是两个方向同时传输时模型的预期")


def large_size_fit(sizes: Sequence[float], seconds: Sequence[float],
                   smallest: float = 2**20) -> tuple[float, float, float]:
    """``fit_alpha_beta`` over the sizes of ``smallest`` bytes and more alone (the sizes
    that decide beta, which the small sizes' latencies cannot pull then); return ``(alpha,
    beta, miss)``, ``miss`` the fit's largest miss over those sizes (measured over
    modelled, minus one)."""
    large = [(n, t) for n, t in zip(sizes, seconds, strict=True) if n >= smallest]
    if len({n for n, _ in large}) < 2:
        raise ValueError(f"a fit of the large sizes needs two different sizes of {smallest:g} "
                         f"bytes or more, got {len(large)}.")
    alpha, beta = fit_alpha_beta([n for n, _ in large], [t for _, t in large])
    misses = [t / (alpha + n / beta) - 1 for n, t in large]
    return alpha, beta, max(misses, key=abs)


def largest_misses(sizes: Sequence[str], misses: Mapping[str, Sequence[float]]
                   ) -> dict[str, tuple[str, float]]:
    """Each column's largest miss: ``{column: (size, miss)}`` for ``misses`` (``{column:
    one miss per size}``, measured over modelled, minus one) and the sizes' names."""
    worst = {}
    for column, values in misses.items():
        if len(values) != len(sizes) or not values:
            raise ValueError(f"column {column!r} has {len(values)} misses for "
                             f"{len(sizes)} sizes.")
        i = max(range(len(values)), key=lambda i, values=values: abs(values[i]))
        worst[column] = (sizes[i], values[i])
    return worst


def miss_reading(worst: Mapping[str, tuple[str, float]], names: Mapping[str, Text]
                 ) -> dict[str, Text]:
    """The communication chapter's sentences on the message table's misses, from ``largest_misses``
    (``names``: each column's name in the table): ``"each"``, where each column's model
    missed most; ``"largest"``, the table's largest miss, with its column and size."""
    if not worst:
        raise ValueError("no column to read.")
    en = [f"in the {names[c].en} column at {size}, by {signed(miss, '+.0%')}"
          for c, (size, miss) in worst.items()]
    zh = [f"“{names[c].zh}”一列在 {size}，为 {signed(miss, '+.0%')}"
          for c, (size, miss) in worst.items()]
    top = max(worst, key=lambda c: abs(worst[c][1]))
    size, miss = worst[top]
    return {
        "each": message(
            en="The models missed most " + (", and ".join(en) if len(en) < 3
                                            else ", ".join(en[:-1]) + ", and " + en[-1]),
            zh="模型偏差最大的地方：" + "；".join(zh)),
        "largest": message(
            en=f"{signed(miss, '+.0%')}, in the {names[top].en} column at {size}",
            zh=f"{signed(miss, '+.0%')}，在“{names[top].zh}”一列的 {size} 处")}


def ring_small_note(size: str, measured: Mapping[int, float], model: Mapping[int, float],
                    latency: Mapping[int, float], cores: int, fit_processes: int = 2) -> Text:
    """The communication chapter's reading of the hand-written ring at its smallest size
    (``size``), for
    each process count k: ``measured`` and ``model`` seconds, and ``latency``, the model's
    2(k - 1) alpha (alpha fitted between ``fit_processes`` processes); ``cores``, the
    machine's cores. Says how much of the measured time the latencies explain and, where
    the ring missed by more than half, a candidate cause tied to the processes per core."""
    ks = sorted(measured)
    if not ks:
        return message(en="", zh="")
    if sorted(model) != ks or sorted(latency) != ks or cores < 1:
        raise ValueError("measured, model and latency need the same process counts, and "
                         "cores at least 1.")
    ratio = {k: measured[k] / model[k] for k in ks}
    explained = {k: latency[k] / measured[k] for k in ks}
    model_share = min(latency[k] / model[k] for k in ks)
    per_core = {k: k / cores for k in ks}
    said = message(
        en=f"In the model, the ring's $2(k-1)$ latencies are {model_share:.0%} or more of its "
           f"time at {size}" + (", so they dominate small tensors." if model_share >= 0.5
                                else "."),
        zh=f"在模型里，{size} 时环的 $2(k-1)$ 次延迟占模型时间的 {model_share:.0%} 以上"
           + ("，小张量的耗时主要是这些延迟。" if model_share >= 0.5 else "。"))
    ratios_en = _listed([f"{ratio[k]:.1f}" for k in ks], "and")
    counts_en = _listed([str(k) for k in ks], "and")
    ratios_zh, counts_zh = "、".join(f"{ratio[k]:.1f}" for k in ks), "、".join(map(str, ks))
    each_en = f"{ratios_en} times the model's with {counts_en} processes"
    each_zh = (f"{counts_zh} 个进程时，环的实测时间{'分别' if len(ks) > 1 else ''}是模型的 "
               f"{ratios_zh} 倍")
    low, high = min(explained.values()), max(explained.values())
    share_en = f"{low:.0%}" if f"{low:.0%}" == f"{high:.0%}" else f"{low:.0%} to {high:.0%}"
    share_zh = f"{low:.0%}" if f"{low:.0%}" == f"{high:.0%}" else f"{low:.0%} 到 {high:.0%}"
    if max(ratio.values()) <= 1.5:
        return message(
            en=f"{said.en} This run agrees: the ring took {each_en}, so $2(k-1)\\alpha$ is "
               f"{share_en} of what was measured.",
            zh=f"{said.zh}这次运行与之相符：{each_zh}，所以 $2(k-1)\\alpha$ 是实测时间的 "
               f"{share_zh}。")
    over = [k for k in ks if k > cores]
    text_en = (f"{said.en} They do not explain this run: the ring took {each_en}, so "
               f"$2(k-1)\\alpha$ is only {share_en} of what was measured.")
    text_zh = (f"{said.zh}但它们解释不了这次运行：{each_zh}，所以 $2(k-1)\\alpha$ 只占实测"
               f"时间的 {share_zh}。")
    if over:
        pairs_en = _listed([f"{per_core[k]:.2g}" for k in over], "and") + " per core"
        shares = [f"{per_core[k]:.2g}" for k in over]
        pairs_zh = " 个、".join(shares[:-1]) + (" 个和 " if len(shares) > 1 else "") + shares[-1]
        rising = len(ks) > 1 and all(ratio[a] < ratio[b] for a, b in zip(ks, ks[1:]))
        text_en += (f" A candidate cause, not measured: with more processes than the {cores} "
                    f"cores ({pairs_en}), each of the ring's dependent steps can wait for a "
                    "descheduled peer, which the $\\alpha$ fitted between "
                    f"{fit_processes} processes does not count"
                    + ("; the miss grew with the processes per core" if rising else "")
                    + " (on GPUs, one process per GPU, we expect no such wait).")
        text_zh += (f"一个可能的原因（这里没有测量）：进程多于 {cores} 个核心时（每个核心"
                    f"{'分别有 ' if len(over) > 1 else ' '}{pairs_zh} 个进程），"
                    "环的每一个前后相依的步骤都可能要等一个被调度出去的对端，"
                    f"而在 {fit_processes} 个进程之间拟合出的 $\\alpha$ 不包含这段等待"
                    + ("；偏差随每个核心上的进程数增大" if rising else "")
                    + "（在 GPU 上每块 GPU 一个进程，我们预期不会有这种等待）。")
    fewer = [k for k in ks if k <= cores and ratio[k] > 1.5]
    if fewer:
        most = max(per_core[k] for k in fewer)
        lead_en = "Even with no more processes than cores" if over else (
            "Although the processes did not outnumber the cores")
        lead_zh = "即使进程数不多于核心数" if over else "虽然这里进程数不多于核心数"
        other_zh = "另一个可能的原因（同样没有测量）" if over else "一个可能的原因（这里没有测量）"
        missed_en = _listed([f"{ratio[k]:.1f} times the model with {k} processes"
                             for k in fewer], "and")
        missed_zh = "、".join(f"{ratio[k]:.1f} 倍（{k} 个进程）" for k in fewer)
        other_en = ("another candidate, not measured either," if over
                    else "a candidate cause, not measured here,")
        text_en += (f" {lead_en} (at most {most:.2g} per core), the ring took {missed_en}; "
                    f"{other_en} is each step's work beyond one message.")
        text_zh += (f"{lead_zh}（每个核心至多 {most:.2g} 个进程），环的实测时间仍是模型的 "
                    f"{missed_zh}；{other_zh}是每一步在一条消息之外还要做的事。")
    return message(en=text_en, zh=text_zh)


def _listed(items: Sequence[str], conjunction: str) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    items = list(items)
    if len(items) < 2:
        return "".join(items)
    return ", ".join(items[:-1]) + f" {conjunction} " + items[-1]


def link_reading(between_gpus: bool) -> dict[str, Text]:
    """The communication chapter's sentences on what the message fit summarises, for the backend
    the run used
    (gloo over the loopback, or NCCL between two GPUs): ``"causes"``, the candidate causes of
    the model's misses; ``"summary"``, what alpha and beta summarise; ``"elsewhere"``, how
    they relate to numbers between GPUs."""
    if between_gpus:
        return {
            "causes": message(
                en="Two candidate causes, not measured apart here: every call launches "
                   "kernels and synchronises the two GPUs, a fixed cost that varies from call "
                   "to call; and NCCL changes its protocol and channels with the size, so no "
                   "single $\\beta$ fits both ends.",
                zh="可能的原因有两个，这里没有分开测量：每次调用都要发射核函数，并让两块 GPU 同步，"
                   "这份固定开销每次都不一样；NCCL 还会随大小切换协议和通道数，所以单一的 "
                   "$\\beta$ 不可能在两端都对。"),
            "summary": message(
                en="Read $\\alpha$ and $\\beta$ as a summary of the link between these two "
                   "GPUs through NCCL",
                zh="$\\alpha$ 和 $\\beta$ 只是对这两块 GPU 之间经由 NCCL 的链路的概括"),
            "elsewhere": message(
                en="These numbers are between GPUs: the `nccl-tests` runs quoted in the section "
                   "\"Beyond One Machine\" reach tens to hundreds of GB/s over NVLink, with "
                   "latencies of a few to tens of microseconds, and whether these two GPUs "
                   "share NVLink or only PCIe decides where this run can fall.",
                zh="这两个数本身就是在 GPU 之间测得的：“跨越多台机器”一节引用的 `nccl-tests` "
                   "运行结果显示，经由 NVLink 的带宽可达每秒几十到几百 GB，延迟为几微秒到几十微秒；"
                   "这两块 GPU 之间是 NVLink 还是只有 PCIe，决定了这次运行能落在哪里。")}
    return {
        "causes": message(
            en="Three candidate causes, not measured apart here: the smallest messages wait "
               "for the receiving process to be woken and scheduled, which varies from run to "
               "run; a message that fits in the caches is copied faster than one that goes "
               "through memory, so no single $\\beta$ fits both ends; and a library may change "
               "its protocol with the size.",
            zh="可能的原因有三个，这里没有分开测量：最小的消息要等接收进程被唤醒、被调度到核心上，"
               "这段时间每次运行都不一样；放得进缓存的消息比必须经过内存的消息复制得快，所以单一的 "
               "$\\beta$ 不可能在两端都对；库还可能随消息大小切换协议。"),
        "summary": message(
            en="Read $\\alpha$ and $\\beta$ as a summary of this machine's loopback",
            zh="$\\alpha$ 和 $\\beta$ 只是对这台机器回环接口的概括"),
        "elsewhere": message(
            en="Between GPUs both numbers are different: the `nccl-tests` runs quoted in "
               "\"Beyond One Machine\" reach tens to hundreds of GB/s over NVLink, with "
               "latencies of a few to tens of microseconds.",
            zh="在 GPU 之间，这两个数就不同了：“跨越多台机器”一节引用的 `nccl-tests` 运行结果显示，"
               "经由 NVLink 的带宽可达每秒几十到几百 GB，延迟为几微秒到几十微秒。")}


def sequence_lesson(compute: float, communicate: float, steps: Mapping[str, float],
                    names: Mapping[str, Text] | None = None) -> Text:
    """The communication chapter's reading of the complete steps (``steps``: seconds per step,
    medians)
    against the two parts timed alone and added (``compute``, ``communicate``: seconds), the
    time the steps would take one after the other if nothing else cost time. ``names`` gives
    the steps' names in both languages (default: the keys)."""
    added = (compute + communicate) * 1e3
    over = {name: t * 1e3 - added for name, t in steps.items() if t * 1e3 > added}
    if not over:
        return message(
            en=f"No complete step took longer than the two parts alone, added ({added:,.1f} ms).",
            zh=f"没有哪个完整的步骤比两部分单独计时之和（{added:,.1f} 毫秒）更久。")
    worst = max(over, key=over.get)
    shown = (names or {}).get(worst) or message(en=worst, zh=worst)
    how_many_en = (f"All {len(steps)}" if len(over) == len(steps)
                   else f"{len(over)} of the {len(steps)}")
    how_many_zh = (f"{len(steps)} 个完整的步骤都" if len(over) == len(steps)
                   else f"{len(steps)} 个完整的步骤中有 {len(over)} 个")
    return message(
        en=f"{how_many_en} complete steps took longer than the two parts "
           f"alone, added ({added:,.1f} ms), by up to {over[worst]:,.1f} ms (\"{shown.en}\"): "
           "a step also divides to average, copies into and out of a buffer or DDP's buckets, "
           "or sends a message per tensor, candidates not timed apart here except the "
           "buffer's copies below.",
        zh=f"{how_many_zh}比两部分单独计时之和（{added:,.1f} "
           f"毫秒）更久，最多多出 {over[worst]:,.1f} 毫秒（“{shown.zh}”）：完整的一步还要做除法"
           "求平均，复制进出缓冲区或 DDP 的桶，或者每个张量发一条消息；这些可能的原因这里没有"
           "单独计时，只有下面缓冲区的复制例外。")


def apart_false_alarm(a: int, b: int, settings: int = 1) -> float:
    """The chance that at least one of ``settings`` settings, each exactly as good as the
    control, comes out :func:`apart` from it in either direction (``a`` results for a
    setting, ``b`` for the control): at most 2 * settings * :func:`apart_chance`."""
    if settings < 1:
        raise ValueError("settings must be at least 1.")
    return min(1.0, 2 * settings * apart_chance(a, b))


def powersgd_lesson(share: float, loss: float, plain_loss: float, ran: bool) -> Text:
    """The communication chapter's sentence on PowerSGD at rank 1: the share of the numbers it sent
    (computed from the shapes) and its final loss against plain all-reduce's, or, where the
    hook cell left PowerSGD out (``ran`` false), that it did not run here."""
    if not ran:
        return message(
            en="PowerSGD did not run here (see above), so this run says nothing about what it "
               "sends or what it costs the loss.",
            zh="PowerSGD 这里没有运行（见上文），所以这次运行说明不了它发送多少数、"
               "让损失付出多少。")
    return message(
        en=f"PowerSGD sent {share:.1%} of the numbers at rank 1 (computed from the shapes), a "
           "different gradient every step, and ended these few steps at a loss of "
           f"{loss:.4f} against {plain_loss:.4f}.",
        zh=f"PowerSGD 在秩为 1 时只发送了 {share:.1%} 的数（由形状算出），每一步的梯度都与原来"
           f"不同；这寥寥几步之后，它的损失是 {loss:.4f}，原始运行是 {plain_loss:.4f}。")


def buffer_lesson(one_buffer: float, per_tensor: float, copies: float) -> Text:
    """What the flat buffer's two copies (``copies``: seconds per step, timed alone) say about
    the exchange after backward as one buffer against one message per tensor (``one_buffer``,
    ``per_tensor``: seconds per step)."""
    ms = {"one": one_buffer * 1e3, "per": per_tensor * 1e3, "rest": (one_buffer - copies) * 1e3}
    if one_buffer <= per_tensor:
        return message(
            en=f"One buffer ({ms['one']:,.1f} ms) was not slower than one message per tensor "
               f"({ms['per']:,.1f} ms): here the messages it saved paid for its copies.",
            zh=f"一个缓冲区（{ms['one']:,.1f} 毫秒）并不比每个张量一条消息（{ms['per']:,.1f} 毫秒）"
               "慢：这里省下的消息抵过了它的复制。")
    if one_buffer - copies <= per_tensor:
        return message(
            en=f"Without its copies, one buffer would have taken about {ms['rest']:,.1f} ms "
               f"against {ms['per']:,.1f} ms per tensor: the copies account for all of the "
               "difference, the one message costs no more than the many.",
            zh=f"去掉复制，一个缓冲区大约要 {ms['rest']:,.1f} 毫秒，逐个张量是 {ms['per']:,.1f} "
               "毫秒：差别全在复制上，一条消息并不比多条消息更费时。")
    share = copies / (one_buffer - per_tensor)
    return message(
        en=f"Without its copies, one buffer would still have taken about {ms['rest']:,.1f} ms "
           f"against {ms['per']:,.1f} ms per tensor: the copies account for {share:.0%} of the "
           "difference, not all of it.",
        zh=f"即使去掉复制，一个缓冲区也大约要 {ms['rest']:,.1f} 毫秒，逐个张量是 {ms['per']:,.1f} "
           f"毫秒：复制只占差别的 {share:.0%}，不是全部。")


def reduction_lesson(k: int, server: Timing, ring: Timing, server_add: Timing,
                     ring_add: Timing) -> Text:
    """The reduction load of the two hand-written all-reduces of the communication chapter's MXNet
    tab, from
    one run's timings, judged by their ranges (:meth:`Timing.clearly_faster`), not their
    medians alone: the whole all-reduce in the server pattern and in the ring (``server``,
    ``ring``), and their additions timed alone (``server_add``: the k - 1 additions into one
    context's array; ``ring_add``: the same number of elements added in k arrays, one per
    context). What the run cannot tell apart from the spread it says it cannot tell; causes
    it did not time apart it names as candidates."""
    ms = {"server": server.median * 1e3, "ring": ring.median * 1e3,
          "sa": server_add.median * 1e3, "ra": ring_add.median * 1e3}
    ms["saved"], ms["lead"] = ms["sa"] - ms["ra"], ms["server"] - ms["ring"]
    head_en = (f"With {k} contexts the ring took {ms['ring']:,.2f} ms against "
               f"{ms['server']:,.2f} ms for the server pattern (medians)")
    head_zh = (f"{k} 个上下文时，环形用了 {ms['ring']:,.2f} 毫秒，"
               f"服务器式用了 {ms['server']:,.2f} 毫秒（中位数）")
    times = "time" if k == 2 else "times"
    adds_en = (f"the server pattern adds the whole array {k - 1} {times} into context 0's "
               f"array, one addition after the other ({ms['sa']:,.2f} ms, timed alone), "
               f"while the ring's additions are spread over the {k} contexts "
               f"({ms['ra']:,.2f} ms alone)")
    adds_zh = (f"服务器式要把整个数组加 {k - 1} 次，都写到上下文 0 的数组上，只能一次接一次地执行"
               f"（单独计时 {ms['sa']:,.2f} 毫秒），而环形的加法分散在 {k} 个上下文上"
               f"（单独计时 {ms['ra']:,.2f} 毫秒）")
    if not ring_add.clearly_faster(server_add):
        if server_add.clearly_faster(ring_add):
            return message(
                en=f"{head_en}. Spreading the additions cost time here, in every timing: "
                   f"{adds_en}.",
                zh=f"{head_zh}。把加法分散开在这里反而费时，每次计时都是如此：{adds_zh}。")
        return message(
            en=f"{head_en}. The additions' timings overlap, so this run cannot tell whether "
               f"spreading them saves time: {adds_en}.",
            zh=f"{head_zh}。两种加法的计时范围相互重叠，所以这次运行无法判断把加法分散开能否省时："
               f"{adds_zh}。")
    if ring.clearly_faster(server):
        share = min(1.0, ms["saved"] / ms["lead"])
        if share >= 0.5:
            rest_en = "The ring spreads the reduction load; the server carries all of it."
            rest_zh = "环把归约的计算量分散开了，服务器则要独自承担全部。"
        else:
            rest_en = (f"So the additions explain only {share:.0%} of the lead; the other "
                       f"{1 - share:.0%} is not explained by this run (a candidate, not timed "
                       f"apart: the server pattern's {k - 1} copies into and out of context 0, "
                       "all through context 0's queue).")
            rest_zh = (f"所以加法只解释了领先的 {share:.0%}；其余 {1 - share:.0%} 这次运行没有解释"
                       "（一个可能的原因，这里没有单独计时："
                       f"服务器式进出上下文 0 的 {k - 1} 次复制，全都排在上下文 0 的队列里）。")
        return message(
            en=f"{head_en}, faster in every timing; the additions alone, also apart in every "
               f"timing, account for about {share:.0%} of the {ms['lead']:,.2f} ms lead at the "
               f"medians: {adds_en}, {ms['saved']:,.2f} ms less. {rest_en}",
            zh=f"{head_zh}，每次计时环都更快；单独给加法计时，两者也在每次计时中都分得开，按中位数"
               f"它们约占这 {ms['lead']:,.2f} 毫秒领先的 {share:.0%}：{adds_zh}，少了 "
               f"{ms['saved']:,.2f} 毫秒。{rest_zh}")
    if server.clearly_faster(ring):
        return message(
            en=f"{head_en}: {adds_en}, {ms['saved']:,.2f} ms less at the medians (apart in "
               "every timing), but the ring was still slower in every timing; the remaining "
               "candidate, not timed apart here, is the rest of its work, its many smaller copies.",
            zh=f"{head_zh}：{adds_zh}，按中位数少了约 {ms['saved']:,.2f} 毫秒（每次计时都"
               "分得开），但环在每次计时中仍然更慢；剩下的可能原因（这里没有单独计时）是环的其余工作，也就是它那许多更小的复制。")
    return message(
        en=f"{head_en}: {adds_en}, {ms['saved']:,.2f} ms less at the medians (apart in every "
           "timing), but the whole all-reduces' timings overlap, so this run cannot tell "
           "whether that saving made the ring faster.",
        zh=f"{head_zh}：{adds_zh}，按中位数少了约 {ms['saved']:,.2f} 毫秒（每次计时都"
           "分得开），但两种完整全归约的计时范围相互重叠，所以这次运行无法判断这点节省是否让环更快了。")
