"""Tests of d2l_ext.link: the emulated links' schedule, their delays against the settings,
exact results through them, the DDP hook, and the sentences that read their runs.

Delays are checked against the settings with a lower bound that sleeping guarantees and an
upper bound loose enough for a loaded machine: the emulator's job is to delay, and a test
that it does is not a speed measurement."""

from __future__ import annotations

import pickle
import time

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from d2l_ext import comm, link  # noqa: E402
from d2l_ext.i18n import message  # noqa: E402
from d2l_ext.utils import Timing  # noqa: E402

# ---- the schedule, with a clock of our own ---------------------------------------------------


def test_a_server_link_carries_messages_one_after_another():
    free = [0.0] * 8  # 4 ranks
    ends = [link.reserve(free, src, 0, 1.0, now=0.0) for src in (1, 2, 3)]
    assert ends == [1.0, 2.0, 3.0]  # into rank 0's receiving side, in turn
    back = [link.reserve(free, 0, dst, 1.0, now=3.0) for dst in (1, 2, 3)]
    assert back == [4.0, 5.0, 6.0]  # out of its sending side, in turn


def test_a_ring_sends_on_all_links_at_once_and_both_ways():
    free = [0.0] * 8
    assert [link.reserve(free, r, (r + 1) % 4, 0.5, now=1.0) for r in range(4)] == [1.5] * 4
    free = [0.0] * 4
    assert link.reserve(free, 0, 1, 1.0, now=0.0) == 1.0
    assert link.reserve(free, 1, 0, 1.0, now=0.0) == 1.0  # full duplex: no wait


def test_a_transfer_starts_when_both_sides_are_free_and_not_before_now():
    free = [0.0] * 6
    link.reserve(free, 0, 1, 2.0, now=0.0)  # rank 0 sends until 2, rank 1 receives until 2
    assert link.reserve(free, 2, 1, 1.0, now=0.5) == 3.0  # waits for rank 1's receiving side
    assert link.reserve(free, 0, 2, 1.0, now=0.5) == 3.0  # waits for rank 0's sending side
    assert link.reserve(free, 1, 0, 1.0, now=10.0) == 11.0  # idle links: from now


def test_model_times():
    links = link.EmulatedLinks(4, rate=1e6, latency=1e-3)
    assert links.message_time(1e6) == pytest.approx(1.001)
    assert links.server_time(4e6) == pytest.approx(6 * (1e-3 + 4.0))
    assert links.ring_time(4e6) == pytest.approx(6 * (1e-3 + 1.0))
    assert links.ring_time(4e6, k=2) == pytest.approx(2 * (1e-3 + 2.0))
    assert links.server_time(4e6) / links.ring_time(4e6) == pytest.approx(4, rel=0.01)


@pytest.mark.parametrize("args", [(0, 1e6, 0.0), (2.5, 1e6, 0.0), (True, 1e6, 0.0),
                                  (2, 0, 0.0), (2, float("inf"), 0.0), (2, "1e6", 0.0),
                                  (2, 1e6, -1e-6), (2, 1e6, float("nan"))])
def test_bad_settings_are_refused(args):
    with pytest.raises(ValueError, match="must be"):
        link.EmulatedLinks(*args)


def test_a_rank_gets_the_links_without_another_process_s_thread():
    links = link.EmulatedLinks(2, 1e6, 0.0)
    links._ring_free = 5.0
    state = links.__getstate__()
    assert state["_worker"] is None and state["_jobs"] is None and state["_ring_free"] == 0.0
    with pytest.raises(RuntimeError, match="inheritance"):
        pickle.dumps(links)  # the shared schedule travels only to starting processes
    assert "1e+06 B/s" in repr(links)


def test_outside_a_group_the_links_say_where_to_call_them():
    links = link.EmulatedLinks(2, 1e6, 0.0)
    with pytest.raises(RuntimeError, match="comm.spawn"):
        links.send(torch.zeros(1), 1)


# ---- in processes --------------------------------------------------------------------------


def _one_way_times(rank, world_size, links, sizes, repeats):
    """Seconds of one message of each size from rank 0 to rank 1, best of `repeats`."""
    best = {}
    for nbytes in sizes:
        x = torch.zeros(max(nbytes // 4, 1))
        times = []
        for _ in range(repeats):
            dist.barrier()
            start = time.monotonic()
            if rank == 0:
                links.send(x, 1)
            else:
                links.recv(x, 0)
            times.append(time.monotonic() - start)
        best[x.numel() * 4] = min(times)
    return best


def test_messages_take_the_latency_and_rate_that_were_set():
    links = link.EmulatedLinks(2, rate=20e6, latency=5e-3)  # 20 MB/s, 5 ms
    sizes = [4, 2**16, 2**20]
    # the sender: it books at its start (the receiver may start after the booking)
    measured = comm.spawn(_one_way_times, 2, links, sizes, 3, backend="gloo")[0]
    for nbytes, seconds in measured.items():
        model = links.message_time(nbytes)
        assert seconds >= model * 0.98  # sleeping never ends early
        assert seconds < model + 0.25, (nbytes, seconds, model)
    alpha, beta = comm.fit_alpha_beta(list(measured), list(measured.values()))
    assert beta == pytest.approx(20e6, rel=0.3)
    assert alpha == pytest.approx(5e-3, abs=3e-3)


def _reduce_through(rank, world_size, links, n):
    """The ring and the server of the page, here in small, on the links: exact sums, and
    when each began and ended on this process (time.monotonic)."""
    def server(x):
        if rank == 0:
            incoming = torch.empty_like(x)
            for other in range(1, world_size):
                links.recv(incoming, other)
                x += incoming
            for other in range(1, world_size):
                links.send(x, other)
        else:
            links.send(x, 0)
            links.recv(x, 0)
        return x

    def ring(x):
        chunks = x.tensor_split(world_size)
        right, left = (rank + 1) % world_size, (rank - 1) % world_size
        incoming = torch.empty_like(chunks[0])
        for step in range(world_size - 1):
            send = chunks[(rank - step) % world_size]
            receive = chunks[(rank - step - 1) % world_size]
            part = incoming[:receive.numel()]
            requests = [links.isend(send, right), links.irecv(part, left)]
            for request in requests:
                request.wait()
            receive += part
        for step in range(world_size - 1):
            requests = [links.isend(chunks[(rank + 1 - step) % world_size], right),
                        links.irecv(chunks[(rank - step) % world_size], left)]
            for request in requests:
                request.wait()
        return x

    g = torch.Generator().manual_seed(rank)
    x = torch.randint(-1000, 1000, (n,), generator=g).float()
    expected = x.clone()
    dist.all_reduce(expected)
    out = {}
    for name, reduce in (("server", server), ("ring", ring),
                         ("library", lambda x: links.all_reduce(x) or x)):
        dist.barrier()
        start = time.monotonic()  # one clock for all the processes of this machine
        y = reduce(x.clone())
        out[name] = (torch.equal(y, expected), start, time.monotonic())
    return out


@pytest.mark.parametrize("k", [2, 3])
def test_a_server_and_a_ring_on_the_links_are_exact_and_take_the_model_s_time(k):
    links = link.EmulatedLinks(k, rate=50e6, latency=1e-3)
    n = 250_003  # about 1 MB, chunks of unequal length
    results = comm.spawn(_reduce_through, k, links, n, backend="gloo")
    for out in results:
        assert all(equal for equal, _, _ in out.values())
    # from the first process's start to the last one's end: a process that leaves the barrier
    # late starts its own clock after the others have begun sending to it
    slowest = {name: max(out[name][2] for out in results) - min(out[name][1] for out in results)
               for name in results[0]}
    for name, model in (("server", links.server_time(4 * n)), ("ring", links.ring_time(4 * n)),
                        ("library", links.ring_time(4 * n))):
        assert slowest[name] >= model * 0.98, (name, slowest[name], model)
        assert slowest[name] < model + 0.5, (name, slowest[name], model)


def _wrong_group(rank, world_size, links):
    links.send(torch.zeros(1), (rank + 1) % world_size)


def test_links_for_another_group_size_say_which_to_make():
    with pytest.raises(RuntimeError, match=r"Make EmulatedLinks\(2"):
        comm.spawn(_wrong_group, 2, link.EmulatedLinks(3, 1e6, 0.0), backend="gloo",
                   timeout=30)


def _ddp_on_links(rank, world_size, links, mb):
    """Gradients after one step of DDP with the links' hook and of DDP without it, and the
    seconds of the hooked step."""
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    def net():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(50, 300), nn.ReLU(), nn.Linear(300, 300), nn.ReLU(),
                             nn.Linear(300, 7))

    g = torch.Generator().manual_seed(rank)
    X, y = torch.randn(16, 50, generator=g), torch.randint(0, 7, (16,), generator=g)
    plain, hooked = DDP(net(), bucket_cap_mb=mb), DDP(net(), bucket_cap_mb=mb)
    hooked.register_comm_hook(None, links.ddp_hook())
    seconds = []
    for _ in range(3):  # DDP rebuilds its buckets after its first step
        for ddp in (plain, hooked):
            ddp.zero_grad()
            dist.barrier()
            start = time.monotonic()
            nn.functional.cross_entropy(ddp(X), y).backward()
            if ddp is hooked:
                seconds.append(time.monotonic() - start)
    same = all(torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-7)
               for a, b in zip(plain.parameters(), hooked.parameters()))
    return same, min(seconds), 4 * sum(p.numel() for p in plain.parameters())


@pytest.mark.parametrize("mb", [0.1, 10])
def test_the_ddp_hook_averages_like_ddp_and_takes_the_ring_s_time(mb):
    links = link.EmulatedLinks(2, rate=10e6, latency=1e-3)  # ~0.4 MB of gradients: ~40 ms
    results = comm.spawn(_ddp_on_links, 2, links, mb, backend="gloo")
    for same, seconds, grad_bytes in results:
        assert same
        # the bytes of all buckets cross the link, one bucket after another
        assert seconds >= links.ring_time(grad_bytes) * 0.98
        assert seconds < links.ring_time(grad_bytes) + 0.5


# ---- the sentences -----------------------------------------------------------------------


def test_ratio_lesson_follows_grows_or_contradicts():
    model = {2: 2.0, 3: 3.0, 4: 4.0}
    follows = link.ratio_lesson({2: 1.9, 3: 2.8, 4: 3.6}, model)
    assert "within 10% of the model" in follows.en and "1.90, 2.80, 3.60" in follows.en
    assert "不超过 10%" in follows.zh
    misses = link.ratio_lesson({2: 1.2, 3: 1.5, 4: 2.0}, model)
    assert "misses it by up to 50%" in misses.en and "最多相差 50%" in misses.zh
    flat = link.ratio_lesson({2: 1.9, 3: 1.8, 4: 3.9}, model)
    assert "does not grow" in flat.en and "并没有随 k 增长" in flat.zh
    one = link.ratio_lesson({2: 1.5}, {2: 2.0})
    assert "not shown" in one.en and "看不出" in one.zh
    with pytest.raises(ValueError):
        link.ratio_lesson({2: 1.0}, {3: 1.0})


def test_hidden_lesson_bounds_by_the_smaller_of_backward_and_communication():
    name = message(en="DDP, bucket_cap_mb=1", zh="DDP，bucket_cap_mb=1")
    one = Timing((0.108, 0.110, 0.112))
    text = link.hidden_lesson(one, 0.080, name, True, compute=0.060, forward=0.020,
                              communicate=0.050, loopback=0.004)
    assert "30.0 ms, 60% of the communication" in text.en
    assert "40.0 ms, is the most" in text.en  # backward 40 ms < communication 50 ms
    assert "4.0 ms alone over the loopback" in text.en and "4.0 毫秒" in text.zh
    assert "30.0 毫秒，即通信的 60%" in text.zh and "即 40.0 毫秒" in text.zh
    short = link.hidden_lesson(one, 0.080, name, True, compute=0.100, forward=0.020,
                               communicate=0.030)
    assert "30.0 ms, is the most" in short.en  # communication is the smaller
    assert "loopback" not in short.en  # no loopback timing given
    none = link.hidden_lesson(one, 0.105, name, False, 0.06, 0.02, 0.05)
    assert "the best setting with several buckets, “DDP, bucket_cap_mb=1”, took 105.0 ms" \
        in none.en
    assert "hidden behind" not in none.en and "could not show" not in none.en
    assert "最好的“DDP，bucket_cap_mb=1”耗时 105.0 毫秒" in none.zh
    # backward of 3 ms against a typical spread of 4 ms: the run cannot show overlap
    one = Timing((0.106, 0.108, 0.110, 0.112, 0.114, 0.5))  # one disturbed round
    assert link.typical_spread(one) == pytest.approx(0.005)
    tiny = link.hidden_lesson(one, 0.105, name, False, 0.023, 0.020, 0.05)
    assert "could not show overlap" in tiny.en and "显示不出重叠" in tiny.zh
    # 30 ms that backward could hide, beyond the typical spread despite the disturbed round
    fine = link.hidden_lesson(one, 0.105, name, False, 0.050, 0.020, 0.05)
    assert "could not show" not in fine.en
    with pytest.raises(ValueError):
        link.hidden_lesson(Timing((0.0,)), 0.08, name, True, 0.06, 0.02, 0.05)


def test_overlap_bound():
    assert link.overlap_bound(0.06, 0.02, 0.05) == pytest.approx(0.04)
    assert link.overlap_bound(0.06, 0.02, 0.03) == pytest.approx(0.03)
    assert link.overlap_bound(0.01, 0.02, 0.03) == 0.0


def test_overlap_close_says_each_outcome_and_where_the_plain_ddp_ran():
    assert "no such gain even on emulated" in link.overlap_close(False, True).en
    assert "within the steps' spread" in link.overlap_close(False, False, could_show=False).en
    assert "paid on the loopback, where the bytes need the cores, as well" in \
        link.overlap_close(True, True).en
    gpus = link.overlap_close(True, False, "nccl")
    assert "on NCCL between GPUs, the same settings showed no gain" in gpus.en
    assert "loopback" not in gpus.en and "；在 GPU 之间用 NCCL 通信时，同样的" in gpus.zh
    assert "这次运行中，在字节需要核心的回环接口上，分桶也" in link.overlap_close(True, True).zh
    assert "没有显示出超出各遍之间波动的收益" in link.overlap_close(True, False).zh
    with pytest.raises(ValueError, match="backend"):
        link.overlap_close(True, False, "mpi")


# ---- the hook lets backward go on; refused tensors hold no link ----------------------------


class _SlowBackward(torch.autograd.Function):
    """Identity whose backward sleeps: a layer whose backward takes known time, without
    using the cores."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        time.sleep(0.02)
        return grad


def _overlap_on_links(rank, world_size, links, mb):
    """Seconds of a DDP step (best of 3, after warm-up) of four 1 MiB layers whose backward
    sleeps 20 ms each, with the links' hook and bucket_cap_mb=mb."""
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.layers = nn.ModuleList(nn.Linear(512, 512, bias=False) for _ in range(4))

        def forward(self, x):
            for layer in self.layers:
                x = _SlowBackward.apply(layer(x))
            return x.sum()

    ddp = DDP(Net(), bucket_cap_mb=mb)
    ddp.register_comm_hook(None, links.ddp_hook())
    x = torch.randn(4, 512)
    seconds = []
    for _ in range(5):
        ddp.zero_grad()
        dist.barrier()
        start = time.monotonic()
        ddp(x).backward()
        seconds.append(time.monotonic() - start)
    return min(seconds[2:])


def test_the_hook_lets_backward_go_on_while_buckets_travel():
    links = link.EmulatedLinks(2, rate=50e6, latency=1e-3)
    grad_bytes = 4 * 4 * 512 * 512  # 4 MiB: about 85 ms on the ring, 80 ms of backward
    one = max(comm.spawn(_overlap_on_links, 2, links, 10, backend="gloo"))
    several = max(comm.spawn(_overlap_on_links, 2, links, 1, backend="gloo"))
    ring = links.ring_time(grad_bytes)
    assert one >= 0.08 + ring * 0.98  # one bucket: backward, then the whole ring
    # bucketed: all but the last bucket travels during backward (a blocking hook would not)
    assert several < one - ring / 3, (several, one, ring)


def _send_refused(rank, world_size, links):
    x = torch.zeros(4, 4).t()  # not contiguous
    try:
        links.send(x, 1 - rank) if rank == 0 else links.recv(x, 0)
    except ValueError as error:
        refused = str(error)
    else:
        refused = ""
    # the links are still free: a message now starts at once
    y = torch.zeros(1000)
    start = time.monotonic()
    if rank == 0:
        links.send(y, 1)
    else:
        links.recv(y, 0)
    dist.send(torch.ones(1), 1 - rank) if rank == 0 else dist.recv(torch.zeros(1), 0)
    return refused, time.monotonic() - start


def test_a_refused_tensor_books_nothing_and_plain_sends_keep_their_own_tag():
    links = link.EmulatedLinks(2, rate=1e6, latency=0.05)
    out = comm.spawn(_send_refused, 2, links, backend="gloo", timeout=60)
    for refused, seconds in out:
        assert "contiguous" in refused
        assert seconds < 0.05 + 4000 / 1e6 + 0.5  # one message's time: no phantom booking
    with pytest.raises(RuntimeError, match="sparse|dense"):
        comm.spawn(_sparse_send, 2, links, backend="gloo", timeout=30)


def _sparse_send(rank, world_size, links):
    links.send(torch.eye(3).to_sparse(), 1 - rank)
