"""Communication between processes, for chapter 6 (PyTorch): start a group, time a
collective, fit the cost of a message.

``spawn`` runs a function in ``k`` processes joined by ``torch.distributed`` (gloo over the
loopback interface on a CPU, NCCL with one GPU per process), returns what each rank returned,
and names a rank that fails or hangs instead of waiting forever. ``timing`` times a
collective across the group, every repeat between two barriers of all processes.
``fit_alpha_beta`` fits the latency-bandwidth model ``t = alpha + n / beta``.
"""

from __future__ import annotations

import datetime
import os
import pickle
import queue as queue_module
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from d2l_ext.utils import Timing

# torch is imported inside the functions that need it: the cost model's functions
# (fit_alpha_beta, bus_bandwidth) serve the MXNet half of the book too, without torch.

__all__ = ["bus_bandwidth", "device", "fit_alpha_beta", "spawn", "timing"]


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
