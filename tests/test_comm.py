"""d2l_ext.comm (spawn, timing, fit_alpha_beta, bus_bandwidth) and the communication
chapter's script, comm_lab.py, run in real process groups (gloo on the CPU).

Each ``comm.spawn`` starts processes, so the groups are few and shared by module-scoped
fixtures; the functions that run in the ranks are defined here (the new processes import
them from this module) and the sizes are tiny.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import multiprocessing
import os
import re
import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from d2l_ext import comm  # noqa: E402
from d2l_ext.exercises import checker  # noqa: E402
from d2l_ext.utils import Timing, message  # noqa: E402

HOOKS = ["none", "fp16", "PowerSGD rank 1"]
LENGTHS = [1, 2, 3, 7, 1000]


# ---- functions that run in the ranks ---------------------------------------------------

def _identify(rank, world_size, *args):
    time.sleep(0.05 * (world_size - 1 - rank))  # the ranks finish in reverse order
    return {"rank": rank, "world_size": world_size, "args": args,
            "group": (dist.get_rank(), dist.get_world_size()),
            "threads": torch.get_num_threads(), "device": str(comm.device()),
            "tensor": torch.full((2,), float(rank))}


def _fail_in_rank_1(rank, world_size):
    if rank == 1:
        raise ValueError("planted failure in rank 1")
    return rank


def _fail_while_peer_waits(rank, world_size):
    if rank == 1:
        raise ValueError("planted failure in rank 1")
    dist.barrier()  # rank 0 waits for rank 1, which never comes
    return rank


def _kill_rank_1(rank, world_size):
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return rank


def _kill_while_peer_waits(rank, world_size):
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
    return rank


def _hang(rank, world_size, pid_dir):
    (pid_dir / f"rank{rank}.pid").write_text(str(os.getpid()))
    if rank == 1:
        dist.recv(torch.zeros(1), 0)  # a message that rank 0 never sends
    else:
        time.sleep(120)
    return rank


def _timed(rank, world_size, sleep, repeats, iters, warmup):
    calls = []

    def op():
        calls.append(1)
        if rank == 1:
            time.sleep(sleep)

    return comm.timing(op, repeats, iters, warmup), len(calls)


def _timed_by_own_clock(rank, world_size, ticks, repeats, iters):
    """comm.timing in a rank whose clock advances by ``ticks[rank]`` at every reading, so that
    each of this rank's own timings is exactly ``ticks[rank] / iters`` per call. (The barriers
    make real ranks' times nearly equal; a clock of each rank's own tells them apart.)"""
    clock = {"now": 0.0}

    def perf_counter():
        clock["now"] += ticks[rank]
        return clock["now"]

    comm.time = SimpleNamespace(perf_counter=perf_counter)  # this forked rank's module only
    return comm.timing(lambda: None, repeats, iters, warmup=0)


def _all_reduce_checks(rank, world_size, lengths):
    import comm_lab

    checks = comm_lab.check_all_reduces(rank, world_size, lengths)
    x = torch.arange(12.0).reshape(3, 4) * (rank + 1)
    expected = torch.arange(12.0).reshape(3, 4) * sum(range(1, world_size + 1))
    out = comm_lab.ring_all_reduce(x)
    return {"checks": checks, "matrix_in_place": out is x and out.shape == (3, 4),
            "matrix": torch.equal(x, expected)}


def _training(rank, world_size, steps, batch_size, lr, width):
    import comm_lab

    args = (steps, batch_size, lr, width)
    runs = {"by_hand": comm_lab.train_by_hand(rank, world_size, *args)}
    if world_size > 1:
        runs["ddp"] = comm_lab.train_with_ddp(rank, world_size, *args)
        runs["accumulate"] = comm_lab.accumulate(rank, world_size, 3, batch_size, width)
        runs["hooks"] = comm_lab.hook_runs(rank, world_size, width, batch_size, 4, lr, HOOKS, 1)
    return runs


# ---- comm.spawn ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def identities():
    """What each rank reports about itself, in groups of 1, 2 (3 threads each) and 3."""
    return {1: comm.spawn(_identify, 1, "a", 7),
            2: comm.spawn(_identify, 2, "a", 7, threads=3),
            3: comm.spawn(_identify, 3, "a", 7)}


@pytest.mark.parametrize("k", [1, 2, 3])
def test_spawn_returns_each_ranks_value_in_rank_order(identities, k):
    values = identities[k]
    assert [v["rank"] for v in values] == list(range(k))
    assert all(v["group"] == (v["rank"], k) and v["world_size"] == k for v in values)
    assert all(v["args"] == ("a", 7) and v["device"] == "cpu" for v in values)
    assert [v["tensor"].tolist() for v in values] == [[float(r)] * 2 for r in range(k)]


def test_spawn_sets_the_threads_of_each_rank(identities):
    assert [v["threads"] for v in identities[2]] == [3, 3]
    for k in (1, 3):
        assert {v["threads"] for v in identities[k]} == {max(1, (os.cpu_count() or 1) // k)}


def _no_rank_left() -> None:
    assert not multiprocessing.active_children()


def test_spawn_names_a_rank_that_raises_with_its_traceback():
    start = time.monotonic()
    with pytest.raises(RuntimeError) as caught:
        comm.spawn(_fail_in_rank_1, 2, timeout=30)
    assert time.monotonic() - start < 30
    message = str(caught.value)
    assert "_fail_in_rank_1: rank 1 of 2 failed" in message
    assert "Traceback" in message and "ValueError: planted failure in rank 1" in message
    assert "rank 0" not in message
    _no_rank_left()


@pytest.mark.parametrize("fn", [_fail_while_peer_waits, _kill_while_peer_waits])
def test_spawn_names_the_failing_rank_while_another_waits_for_it(fn):
    """The realistic case: the other ranks are inside a collective when one fails, and their
    own errors (lost connection) follow from it."""
    with pytest.raises(RuntimeError) as caught:
        comm.spawn(fn, 2, timeout=30)
    message = str(caught.value)
    first = message.splitlines()[0]
    assert "rank 1 of 2" in first, message  # the rank that failed, before the one that waited
    assert ("planted failure in rank 1" in message
            or "rank 1 of 2 was killed by signal 9" in message)
    _no_rank_left()


def test_spawn_names_a_rank_killed_by_a_signal():
    with pytest.raises(RuntimeError, match=r"rank 1 of 2 was killed by signal 9"):
        comm.spawn(_kill_rank_1, 2, timeout=30)
    _no_rank_left()


def test_spawn_stops_ranks_that_hang_within_the_timeout(tmp_path):
    psutil = pytest.importorskip("psutil")
    start = time.monotonic()
    with pytest.raises(RuntimeError) as caught:
        comm.spawn(_hang, 2, tmp_path, timeout=5)
    elapsed = time.monotonic() - start
    message = str(caught.value)
    # spawn's deadline, or (on a slow start) the group's own timeout in rank 1's recv
    assert ("rank(s) [0, 1] of 2 did not finish within timeout=5 s" in message
            or "rank 1 of 2 failed" in message), message
    assert elapsed < 5 + 10
    _no_rank_left()
    for rank in (0, 1):
        pid = int((tmp_path / f"rank{rank}.pid").read_text())
        assert (not psutil.pid_exists(pid)
                or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE), f"rank {rank} lives"


def _defined_in_main(rank, world_size):
    return rank


_defined_in_main.__module__ = "__main__"


@pytest.mark.parametrize("args, kwargs, words", [
    ((_identify, 0), {}, "world_size must be a positive integer"),
    ((_identify, 2.0), {}, "world_size must be a positive integer"),
    ((_identify, "2"), {}, "world_size must be a positive integer"),
    ((_defined_in_main, 2), {}, "Define it in a module"),
    ((_identify, 2), {"backend": "mpi"}, "backend must be 'gloo' or 'nccl'"),
])
def test_spawn_rejects_bad_input_and_says_what_to_do(args, kwargs, words):
    with pytest.raises(ValueError, match=words):
        comm.spawn(*args, **kwargs)


def test_spawn_asks_for_gloo_when_there_are_too_few_gpus():
    with pytest.raises(ValueError, match="Use backend='gloo'"):
        comm.spawn(_identify, torch.cuda.device_count() + 1, backend="nccl")


def test_device_outside_a_group_is_the_cpu():
    assert comm.device() == torch.device("cpu")


# ---- comm.timing -----------------------------------------------------------------------

def test_timing_gives_every_rank_the_slowest_ranks_times():
    sleep, repeats, iters, warmup = 0.02, 3, 2, 1
    (t0, calls0), (t1, calls1) = comm.spawn(_timed, 2, sleep, repeats, iters, warmup)
    assert isinstance(t0, Timing) and t0 == t1
    assert len(t0.times) == repeats and min(t0.times) >= sleep
    assert calls0 == calls1 == warmup + repeats * iters


@pytest.mark.parametrize("warmup, repeats, iters", [(None, 1, 1), (2, 3, 2), (0, 2, 3)])
def test_timing_warms_up_then_times_each_repeat_between_barriers(monkeypatch, warmup,
                                                                 repeats, iters):
    """The order of the calls, as kvstore.timing's test checks it: ``warmup`` calls of ``op``
    (one by default) before the first barrier, then for each repeat a barrier, ``iters`` calls
    and another barrier; each time is per call, read from the clock at the barriers. (A
    call count alone would pass with the warm-up after the first barrier.)"""
    import torch.distributed as torch_dist

    events: list[str] = []
    clock = {"now": 0.0}

    def perf_counter():
        clock["now"] += 1.0  # one second between any two readings
        return clock["now"]

    monkeypatch.setattr(torch_dist, "barrier", lambda: events.append("barrier"))
    monkeypatch.setattr(torch_dist, "all_reduce", lambda tensor, op=None: None)  # one rank
    monkeypatch.setattr(comm, "time", SimpleNamespace(perf_counter=perf_counter))
    kwargs = {} if warmup is None else {"warmup": warmup}
    t = comm.timing(lambda: events.append("op"), repeats=repeats, iters=iters, **kwargs)
    expected = ["op"] * (1 if warmup is None else warmup)
    expected += (["barrier"] + ["op"] * iters + ["barrier"]) * repeats
    assert events == expected
    assert t.times == (1.0 / iters,) * repeats


def test_timing_reports_the_slowest_rank_not_the_fastest():
    """Each rank's own timings differ (rank 1's clock runs fastest); every rank must get rank
    1's, the slowest, per call."""
    ticks, repeats, iters = [1.0, 3.0, 2.0], 2, 4
    timings = comm.spawn(_timed_by_own_clock, 3, ticks, repeats, iters)
    for t in timings:
        assert isinstance(t, Timing) and t.times == (max(ticks) / iters,) * repeats


@pytest.mark.parametrize("repeats, iters", [(0, 1), (1, 0), (-1, 1)])
def test_timing_rejects_fewer_than_one_repeat_or_call(repeats, iters):
    with pytest.raises(ValueError, match="at least 1"):
        comm.timing(lambda: None, repeats, iters)


# ---- comm.fit_alpha_beta and comm.bus_bandwidth ----------------------------------------

def test_fit_alpha_beta_recovers_noiseless_parameters():
    sizes = [8, 1e3, 1e5, 1e7]
    alpha, beta = comm.fit_alpha_beta(sizes, [20e-6 + n / 3e9 for n in sizes])
    assert alpha == pytest.approx(20e-6, rel=1e-9) and beta == pytest.approx(3e9, rel=1e-9)


def test_fit_alpha_beta_weighs_relative_errors():
    """A 1 % error on the largest message is 100 times alpha in seconds: a fit of absolute
    errors would follow it, one of relative errors keeps the small messages' alpha."""
    sizes = [8, 64, 1e6, 1e8]
    times = [1e-5 + n / 1e9 for n in sizes]
    times[-1] *= 1.01
    alpha, beta = comm.fit_alpha_beta(sizes, times)
    assert alpha == pytest.approx(1e-5, rel=0.01)
    assert beta == pytest.approx(1e9, rel=0.02)


def test_fit_alpha_beta_clips_a_negative_alpha_and_still_fits_beta():
    sizes = [1e3, 1e4, 1e5, 1e6]
    times = [n / 2e9 for n in sizes]
    times[0] *= 0.98  # the smallest message a little fast: the line crosses below zero
    alpha, beta = comm.fit_alpha_beta(sizes, times)
    assert alpha == 0.0
    assert beta == pytest.approx(2e9, rel=0.01)
    assert all(abs(n / beta / t - 1) < 0.02 for n, t in zip(sizes, times))


@pytest.mark.parametrize("sizes, times", [
    ([8, 16, 32], [1e-5, 2e-5]),  # lengths differ
    ([8, 8, 8], [1e-5, 1e-5, 2e-5]),  # one distinct size
    ([8], [1e-5]),
    ([8, 16], [0.0, 1e-5]),  # non-positive times
    ([8, 16], [1e-5, -1e-5]),
    ([8, 1e6], [1e-3, 1e-5]),  # times fall as the size grows
    ([[8, 16]], [[1e-5, 2e-5]]),  # not one list
])
def test_fit_alpha_beta_rejects_data_it_cannot_fit(sizes, times):
    with pytest.raises(ValueError):
        comm.fit_alpha_beta(sizes, times)


@pytest.mark.parametrize("k, factor", [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75)])
def test_bus_bandwidth_scales_by_the_rings_share(k, factor):
    assert comm.bus_bandwidth(1e9, 0.5, k) == pytest.approx(2e9 * factor)


@pytest.mark.parametrize("nbytes, seconds, k", [(1e9, 1.0, 0), (1e9, 0.0, 2), (1e9, -1.0, 2)])
def test_bus_bandwidth_rejects_bad_input(nbytes, seconds, k):
    with pytest.raises(ValueError):
        comm.bus_bandwidth(nbytes, seconds, k)


def test_scaling_table_shows_units_and_speaks_the_readers_language(monkeypatch):
    """One row per k, in ms, GB/s and percent, aligned, in English or Chinese; a row with a
    missing value is refused rather than shifted into the wrong column."""
    rows = [(8, 370e9, 4.73e-3, 0.1229, 0.0, 1.0, 1.0, 0.963),
            (32, 50e9, 38.75e-3, 0.0307, 0.0183, 0.627, 1.0, 0.76)]
    monkeypatch.setenv("D2L_LANG", "en")
    lines = comm.scaling_table(rows).splitlines()
    assert len(lines) == 3 and lines[0].split()[0] == "k"
    assert "all-reduce (ms)" in lines[0] and "weak, no overlap" in lines[0]
    assert lines[1].split() == ["8", "370", "4.7", "122.9", "0", "100%", "100%", "96%"]
    assert lines[2].split() == ["32", "50", "38.8", "30.7", "18.3", "63%", "100%", "76%"]
    assert len({len(line) for line in lines}) == 1  # right-aligned columns, one width
    monkeypatch.setenv("D2L_LANG", "zh")
    zh = comm.scaling_table(rows)
    assert "全归约（毫秒）" in zh and "强扩展：效率" in zh and "38.8" in zh
    with pytest.raises(ValueError, match="8 values"):
        comm.scaling_table([(8, 370e9, 4.73e-3, 0.1229, 0.0, 1.0, 1.0)])


# ---- the page's script -----------------------------------------------------------------

@pytest.fixture(scope="module")
def comm_lab(chapter_module):
    """The page's comm_lab.py, importable here and in the ranks (spawn hands them sys.path)."""
    return chapter_module("communication", "comm_lab.py")


@pytest.fixture(scope="module")
def reduced(comm_lab):
    return {k: comm.spawn(_all_reduce_checks, k, LENGTHS) for k in (2, 3, 4, 5)}


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_the_pages_all_reduces_equal_the_librarys(reduced, k):
    """Ring and server give dist.all_reduce's sums exactly, also for fewer elements than
    ranks (empty chunks) and lengths that do not divide by k."""
    for rank, result in enumerate(reduced[k]):
        assert [c["length"] for c in result["checks"]] == LENGTHS
        assert all(c["ring"] and c["server"] for c in result["checks"]), (rank, result)


@pytest.mark.parametrize("k", [2, 3, 4, 5])
def test_the_pages_ring_sums_a_matrix_in_place(reduced, k):
    assert all(r["matrix_in_place"] and r["matrix"] for r in reduced[k])


@pytest.fixture(scope="module")
def trained(comm_lab, fmnist_dir):
    """The page's training functions on 2 processes and on 1, tiny."""
    args = (3, 16, 0.1, 8)  # steps, batch size, learning rate, width
    return {k: comm.spawn(_training, k, *args) for k in (2, 1)}


def _largest_difference(a, b) -> float:
    assert len(a) == len(b)
    return max((x - y).abs().max().item() for x, y in zip(a, b))


def test_the_pages_training_by_hand_matches_ddp_and_one_process(trained):
    (rank0, rank1), (alone,) = trained[2], trained[1]
    (losses0, history0), (losses1, history1) = rank0["by_hand"], rank1["by_hand"]
    assert len(history0) == 3 and losses0 == losses1
    for step in range(3):
        assert _largest_difference(history0[step], history1[step]) == 0
        assert _largest_difference(history0[step], rank0["ddp"][step]) < 1e-6
        assert _largest_difference(history0[step], alone["by_hand"][1][step]) < 1e-6
    assert losses0 == pytest.approx(alone["by_hand"][0], abs=1e-6)
    # the test can fail: training moved the weights by much more than the tolerance
    assert _largest_difference(history0[0], history0[-1]) > 1e-3


def test_the_pages_no_sync_sends_once_per_bucket_with_the_same_gradients(trained):
    for result in trained[2]:
        every, quiet = result["accumulate"]["every"], result["accumulate"]["no_sync"]
        assert quiet["all_reduces"] >= 1
        assert every["all_reduces"] == 3 * quiet["all_reduces"]
        assert _largest_difference(every["grads"], quiet["grads"]) < 1e-6


def test_the_pages_hooks_train_and_fp16_stays_close(trained):
    runs = trained[2][0]["hooks"]
    assert list(runs) == HOOKS
    for hook in HOOKS:
        assert len(runs[hook]["losses"]) == 4
        assert all(loss == loss and abs(loss) < 10 for loss in runs[hook]["losses"]), hook
        assert all(torch.isfinite(p).all() for p in runs[hook]["params"]), hook
    assert runs["fp16"]["losses"][0] == pytest.approx(runs["none"]["losses"][0], abs=1e-6)
    assert _largest_difference(runs["fp16"]["params"], runs["none"]["params"]) < 1e-3
    # the replicas agree after each hook, compression included
    for hook in HOOKS:
        assert _largest_difference(runs[hook]["params"], trained[2][1]["hooks"][hook]["params"]
                                   ) == 0


# ---- exercise 4: the check cell of the reader's recursive doubling ------------------------

DOUBLING = '''
import torch
import torch.distributed as dist


def recursive_doubling_all_reduce(x):
    rank, k = dist.get_rank(), dist.get_world_size()
    incoming = torch.empty_like(x)
    step = 1
    while step < k:
        requests = [dist.isend(x, rank ^ step), dist.irecv(incoming, rank ^ step)]
        for request in requests:
            request.wait()
        x {op} incoming
        step *= 2
    return x
'''


@pytest.fixture(scope="module")
def exercise_4(comm_lab, tmp_path_factory):
    """``exercise_4(script, answer, lang)``: what the page's check cell of exercise 4 prints
    when the reader's doubling.py is ``script`` and its first line is ``answer``."""
    page = (Path(__file__).resolve().parents[1] / "chapters" / "en" / "communication.md"
            ).read_text(encoding="utf-8")
    cells = re.findall(r"^written = False  # exercise 4.*?(?=^```)", page, re.S | re.M)
    assert len(cells) == 1
    folder = tmp_path_factory.mktemp("doubling")
    sys.path.insert(0, str(folder))
    versions = []

    def check(script: str, answer: str = "written = True", lang: str = "en") -> str:
        path = folder / "doubling.py"
        path.write_text(script, encoding="utf-8")
        versions.append(script)
        stamp = time.time() + len(versions)  # a new modification time for each version: the
        os.utime(path, (stamp, stamp))  # import system's cached bytecode is keyed by it
        lines = cells[0].splitlines()
        lines[0] = answer
        out = io.StringIO()
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("D2L_LANG", lang)
            with contextlib.redirect_stdout(out):
                d2l = SimpleNamespace(message=message, check_exercise=checker("torch"))
                exec("\n".join(lines), {"d2l": d2l, "comm": comm, "comm_lab": comm_lab,
                                        "importlib": importlib})
        return out.getvalue()

    yield check
    sys.path.remove(str(folder))
    sys.modules.pop("doubling", None)


def test_exercise_4_accepts_a_right_recursive_doubling(exercise_4):
    assert exercise_4(DOUBLING.format(op="+=")).startswith("Correct")
    assert exercise_4(DOUBLING.format(op="+="), lang="zh").startswith("正确")


def test_exercise_4_rejects_a_wrong_one_without_showing_the_answer(exercise_4):
    wrong = exercise_4(DOUBLING.format(op="-="))  # subtracts the partner's tensor
    assert wrong.startswith("Not quite") and "rank(s)" in wrong and "isend" not in wrong


def test_exercise_4_names_the_error_of_the_unwritten_stub(exercise_4, chapter_script):
    stub = exercise_4(chapter_script("communication", "doubling.py"))
    assert stub.startswith("Not quite") and "NotImplementedError" in stub
    assert exercise_4("", answer="written = False", lang="zh").startswith("练习 4")
