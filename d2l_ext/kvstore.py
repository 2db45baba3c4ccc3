"""MXNet parameter-server jobs on one machine, for the communication chapter (MXNet): launch a
scheduler,
servers and workers as local processes over the loopback interface, and time a kvstore
operation between barriers of all workers.

``launch`` starts a real ``dist_sync``/``dist_async`` job (ps-lite over ZeroMQ, as on a
cluster, with every address 127.0.0.1), returns what each worker handed to :func:`report`,
by kvstore rank, and names a process that fails or hangs instead of waiting forever.
In a worker, :func:`timing` times an operation, every repeat between two barriers.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["free_port", "launch", "report", "timing"]

_RESULTS = "D2L_KVSTORE_RESULTS"  # the folder where workers leave their results
_SERVER = "import mxnet"  # a scheduler or server runs its loop when mxnet is imported
_GRACE_S = 10.0  # how long servers and scheduler may take to leave after the last worker
# A worker runs its script under this: a worker that raises would otherwise hang at exit, in
# the kvstore's destructor, which waits for all the other workers (ps::Finalize).
_WORKER = """
import gc, os, runpy, sys, traceback
script = os.path.abspath(sys.argv[1])
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(script)

def leave(code, error):
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != script:
        tb = tb.tb_next  # show the script's frames, not this runner's
    if isinstance(error, SystemExit):
        print(f"SystemExit: {error.code}", file=sys.stderr)
    else:
        traceback.print_exception(type(error), error, tb or error.__traceback__)
    if "mxnet" in sys.modules:  # name the kvstore rank, if this worker got one
        from mxnet.kvstore import KVStore
        for kv in (o for o in gc.get_objects() if isinstance(o, KVStore)):
            if "dist" in kv.type:
                print(f"D2L_KVSTORE_RANK {kv.rank}", file=sys.stderr)
                break
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

try:
    runpy.run_path(script, run_name="__main__")
except SystemExit as stop:
    if stop.code not in (None, 0):
        leave(stop.code if isinstance(stop.code, int) else 1, stop)
except BaseException as error:
    leave(1, error)
"""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the scheduler's port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def report(kv: Any, value: Any) -> None:
    """In a worker of a :func:`launch` job: hand ``value`` (anything JSON can encode) back to
    ``launch`` as the result of this worker's rank ``kv.rank``. Call it once, at the end."""
    folder = os.environ.get(_RESULTS)
    if folder is None:
        raise RuntimeError("report() works only in a worker started by d2l_ext.kvstore.launch.")
    rank = kv.rank
    text = json.dumps({"rank": rank, "pid": os.getpid(), "value": value})
    final = os.path.join(folder, f"rank{rank}.json")
    partial = f"{final}.{os.getpid()}.part"
    with open(partial, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(partial, final)  # atomic: launch never reads half a file


def timing(kv: Any, op: Callable[[], Any], repeats: int = 5, iters: int = 1,
           warmup: int = 1) -> list[float]:
    """In every worker of a job: time ``repeats`` runs of ``iters`` calls of ``op()``, per
    call, each run between two barriers: ``npx.waitall()`` (this worker's queue, pushes and
    pulls included, is drained) then ``kv._barrier()`` (all workers got there). Every worker
    stops its clock after the slowest one has finished, so all report about the same times.
    """
    if repeats < 1 or iters < 1 or warmup < 0:
        raise ValueError(f"repeats and iters must be at least 1 and warmup at least 0, "
                         f"got {repeats}, {iters}, {warmup}.")
    from mxnet import npx

    def barrier() -> None:
        npx.waitall()
        kv._barrier()  # MXNet 1.9's only barrier between workers (a private name)

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
    return times


def _tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read().strip().splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


def _kill(procs: Sequence[subprocess.Popen]) -> None:
    """Kill each process's group (the process and anything it started), then reap it."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
            pass


def launch(script: str | os.PathLike, num_workers: int, num_servers: int = 1,
           args: Sequence[str] = (), timeout: float = 120.0, threads: int | None = None,
           echo: bool = False) -> list[Any]:
    """Run ``python script *args`` as ``num_workers`` workers of an MXNet parameter-server
    job with ``num_servers`` servers and one scheduler, all local processes that talk over
    127.0.0.1; return the values the workers passed to :func:`report`, by kvstore rank.

    The worker script creates its kvstore with ``mx.kv.create("dist_sync")`` (or
    ``"dist_async"``); the environment tells it the scheduler's address and the job's size.
    ``threads``: OpenMP threads per worker (default: the cores shared out evenly, at least
    one); servers and the scheduler get one. ``echo``: print each worker's standard output
    afterwards, in rank order.

    A process that exits with an error, a worker that ends without reporting, or a job still
    running after ``timeout`` seconds stops every process of the job, and ``launch`` raises a
    ``RuntimeError`` that names the role and number of the process and shows the end of its
    error output.
    """
    script = os.fspath(script)
    for name, n in (("num_workers", num_workers), ("num_servers", num_servers)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"{name} must be a positive integer, got {n!r}.")
    if not os.path.isfile(script):
        raise ValueError(f"no such script: {script!r}.")
    if not timeout > 0:
        raise ValueError(f"timeout must be positive, got {timeout!r}.")
    if isinstance(args, (str, bytes)):
        raise ValueError("args must be a sequence of strings, not one string.")
    if threads is None:
        threads = max(1, (os.cpu_count() or 1) // num_workers)

    base = {k: v for k, v in os.environ.items() if k != "D2L_CAPTURE"}
    base.update(DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(free_port()),
                DMLC_NODE_HOST="127.0.0.1", DMLC_NUM_SERVER=str(num_servers),
                DMLC_NUM_WORKER=str(num_workers), PYTHONUNBUFFERED="1")
    roles = ([("scheduler", 0)] + [("server", i) for i in range(num_servers)]
             + [("worker", i) for i in range(num_workers)])
    with tempfile.TemporaryDirectory(prefix="d2l-kvstore-") as folder:
        results = os.path.join(folder, "results")
        os.mkdir(results)
        base[_RESULTS] = results
        procs: list[subprocess.Popen] = []
        logs: list[tuple[str, str]] = []
        try:
            for role, i in roles:
                env = dict(base, DMLC_ROLE=role,
                           OMP_NUM_THREADS=str(threads if role == "worker" else 1))
                out, err = (os.path.join(folder, f"{role}{i}.{s}") for s in ("out", "err"))
                logs.append((out, err))
                command = ([sys.executable, "-c", _WORKER, script, *map(str, args)]
                           if role == "worker"
                           else [sys.executable, "-c", _SERVER])
                with open(out, "w") as fo, open(err, "w") as fe:
                    procs.append(subprocess.Popen(command, env=env, stdout=fo, stderr=fe,
                                                  stdin=subprocess.DEVNULL,
                                                  start_new_session=True))
            failure = _watch(procs, roles, logs, num_workers, timeout)
        finally:
            _kill(procs)
        if failure is not None:
            raise RuntimeError(f"{script}: {failure}; all processes of the job were stopped.")
        values, pids = {}, {}
        for name in sorted(os.listdir(results)):
            if name.endswith(".json"):
                with open(os.path.join(results, name), encoding="utf-8") as f:
                    record = json.load(f)
                values[record["rank"]] = record["value"]
                pids[record["pid"]] = record["rank"]
        missing = [r for r in range(num_workers) if r not in values]
        if missing:
            raise RuntimeError(f"{script}: worker rank(s) {missing} of {num_workers} ended "
                               "without calling kvstore.report(kv, value).")
        if echo:
            workers = [(p, out) for p, (role, _), (out, _) in zip(procs, roles, logs)
                       if role == "worker"]
            for p, out in sorted(workers, key=lambda w: pids.get(w[0].pid, num_workers)):
                with open(out, encoding="utf-8", errors="replace") as f:
                    text = f.read().rstrip()
                if text:
                    print(f"[worker {pids.get(p.pid, '?')}]", text.replace("\n", "\n  "))
        return [values[r] for r in range(num_workers)]


def _watch(procs: Sequence[subprocess.Popen], roles: Sequence[tuple[str, int]],
           logs: Sequence[tuple[str, str]], num_workers: int, timeout: float) -> str | None:
    """Wait until all workers have exited successfully and the servers and the scheduler
    with them; return None, or what went wrong."""
    deadline = time.monotonic() + timeout
    workers_done_at = None
    while True:
        codes = [p.poll() for p in procs]
        failed = [i for i, c in enumerate(codes) if c not in (None, 0)]
        if failed:
            # A worker's error usually makes the scheduler or a server fail too: name workers
            # first, then servers, then the scheduler.
            order = {"worker": 0, "server": 1, "scheduler": 2}
            i = min(failed, key=lambda j: (order[roles[j][0]], roles[j][1]))
            role, n = roles[i]
            code = codes[i]
            how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
            tail = _tail(logs[i][1]).splitlines()
            who = {"scheduler": "the scheduler", "server": f"server process {n}"}.get(
                role, f"worker process {n} (in launch order)")
            if tail and tail[-1].startswith("D2L_KVSTORE_RANK "):
                who = f"worker rank {tail.pop().split()[1]}"
            text = "\n".join(tail)
            return f"{who} {how}" + (f"; the end of its error output:\n{text}" if text else "")
        worker_codes = [c for c, (role, _) in zip(codes, roles) if role == "worker"]
        if all(c == 0 for c in codes):
            return None
        if all(c == 0 for c in worker_codes):
            # The servers and the scheduler stop once every worker has left; a few seconds.
            workers_done_at = workers_done_at or time.monotonic()
            if time.monotonic() - workers_done_at > _GRACE_S:
                return None  # the workers finished their work; the rest is killed
        if time.monotonic() > deadline:
            running = [f"{role} {n}" for (role, n), c in zip(roles, codes) if c is None]
            return (f"{', '.join(running)} still running after timeout={timeout:g} s (stuck, "
                    "e.g. a worker waiting at a barrier or for a push that another worker "
                    "never sends)")
        time.sleep(0.05)
