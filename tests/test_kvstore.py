"""d2l_ext.kvstore: real MXNet parameter-server jobs on this machine (scheduler, servers and
workers as local processes over 127.0.0.1). Skipped where MXNet 1.9.1 cannot be imported."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest

from d2l_ext import kvstore

SUMS = """
import json, sys
import mxnet as mx
from mxnet import np, npx
from d2l_ext import kvstore

npx.set_np()
sizes = json.loads(sys.argv[1])
kv = mx.kv.create("dist_sync")
rank, workers = kv.rank, kv.num_workers
base = [np.arange(n) % 7 - 3.0 for n in sizes]  # small integers: sums are exact
keys = list(range(len(sizes)))
kv.init(keys, [np.zeros(n) for n in sizes])
mine = [b * (rank + 1) for b in base]
pulled = [np.zeros(n) for n in sizes]
kv.push(keys, [m.copy() for m in mine])  # a pull may write into the array pushed last
kv.pull(keys, out=pulled)
want = sum(r + 1.0 for r in range(workers))
errors = [float(np.abs(p - b * want).max()) for p, b in zip(pulled, base)]
again = [np.zeros(n) for n in sizes]
kv.pushpull(keys, [m.copy() for m in mine], out=again)  # one call, as gluon.Trainer does
errors += [float(np.abs(p - b * want).max()) for p, b in zip(again, base)]
times = kvstore.timing(kv, lambda: kv.pushpull(keys, mine, out=again), repeats=2, iters=2)
print("hello from rank", rank)
kvstore.report(kv, {"rank": rank, "workers": workers, "errors": errors, "times": times,
                    "argv": sys.argv[1:]})
"""

FAILS = """
import mxnet as mx
kv = mx.kv.create("dist_sync")
if kv.rank == 1:
    raise ValueError("planted failure in the worker of rank 1")
kv.init(0, mx.nd.zeros((3,)))
kv._barrier()  # rank 0 waits here for a worker that is gone
"""

HANGS = """
import os, subprocess, sys, time
child = subprocess.Popen(["sleep", "600"])  # a grandchild: launch must stop it too
with open(os.path.join(sys.argv[1], f"{os.getpid()}.pids"), "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
time.sleep(600)
"""


@pytest.fixture(scope="module", autouse=True)
def mxnet_ok(numpy_too_new):
    """Skip where the workers could not import MXNet 1.9.1 (every test here starts or
    checks MXNet jobs; they run in the full environment)."""
    if numpy_too_new:
        pytest.skip("MXNet 1.9.1 needs numpy < 1.24")
    if importlib.util.find_spec("mxnet") is None:  # found, not imported: workers import it
        pytest.skip("MXNet is not installed")


@pytest.fixture
def started(monkeypatch):
    """The processes that launch starts, recorded."""
    procs: list[subprocess.Popen] = []
    real = subprocess.Popen

    def recording(*args, **kwargs):
        p = real(*args, **kwargs)
        procs.append(p)
        return p

    monkeypatch.setattr(kvstore.subprocess, "Popen", recording)
    return procs


def gone(pid: int) -> bool:
    """The process no longer runs (it does not exist, or is a zombie nobody reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


# ---------------------------------------------------------------- without MXNet
@pytest.mark.parametrize("kwargs, message", [
    (dict(num_workers=0), "num_workers must be a positive integer"),
    (dict(num_workers=True), "num_workers must be a positive integer"),
    (dict(num_workers=1.5), "num_workers must be a positive integer"),
    (dict(num_servers=0), "num_servers must be a positive integer"),
    (dict(timeout=0), "timeout must be positive"),
    (dict(args="12"), "args must be a sequence"),
])
def test_bad_input(tmp_path, started, kwargs, message):
    script = write(tmp_path, "w.py", "print(1)\n")
    with pytest.raises(ValueError, match=message):
        kvstore.launch(script, **{"num_workers": 1, **kwargs})
    assert started == []  # refused before any process starts


def test_missing_script(tmp_path, started):
    with pytest.raises(ValueError, match="no such script"):
        kvstore.launch(tmp_path / "nowhere.py", 2)
    assert started == []


def test_report_outside_a_job(monkeypatch):
    monkeypatch.delenv("D2L_KVSTORE_RESULTS", raising=False)
    with pytest.raises(RuntimeError, match="only in a worker started by"):
        kvstore.report(type("KV", (), {"rank": 0})(), 1)


def test_report_writes_one_whole_file(tmp_path, monkeypatch):
    monkeypatch.setenv("D2L_KVSTORE_RESULTS", str(tmp_path))
    kvstore.report(type("KV", (), {"rank": 3})(), {"x": [1, 2]})
    assert os.listdir(tmp_path) == ["rank3.json"]  # no partial file left beside it
    record = json.loads((tmp_path / "rank3.json").read_text())
    assert record["rank"] == 3 and record["value"] == {"x": [1, 2]}


def test_timing_refuses_bad_counts():
    for bad in (dict(repeats=0), dict(iters=0), dict(warmup=-1)):
        with pytest.raises(ValueError, match="at least"):
            kvstore.timing(None, lambda: None, **bad)


class _RecordingStore:
    """A stand-in for a kvstore that records its barriers among the events."""

    def __init__(self, events: list[str]):
        self.events = events

    def _barrier(self) -> None:
        self.events.append("barrier")


@pytest.mark.parametrize("warmup, repeats, iters", [(None, 1, 1), (2, 3, 2), (0, 2, 3)])
def test_timing_warms_up_then_times_each_repeat_between_barriers(monkeypatch, warmup,
                                                                 repeats, iters):
    """The order of the calls: ``warmup`` calls of ``op`` (one by default) before any barrier,
    then for each repeat a barrier (drain the queue, then the workers' barrier), ``iters``
    calls and another barrier; each time is per call, read from the clock at the barriers."""
    from mxnet import npx

    events: list[str] = []
    clock = {"now": 0.0}

    def perf_counter():
        clock["now"] += 1.0  # one second between any two readings
        return clock["now"]

    monkeypatch.setattr(npx, "waitall", lambda: events.append("waitall"))
    monkeypatch.setattr(kvstore, "time", SimpleNamespace(perf_counter=perf_counter))
    kwargs = {} if warmup is None else {"warmup": warmup}
    times = kvstore.timing(_RecordingStore(events), lambda: events.append("op"),
                           repeats=repeats, iters=iters, **kwargs)
    barrier = ["waitall", "barrier"]
    expected = ["op"] * (1 if warmup is None else warmup)
    expected += (barrier + ["op"] * iters + barrier) * repeats
    assert events == expected
    assert times == [1.0 / iters] * repeats


def test_free_port_is_free():
    import socket

    port = kvstore.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # fails if the port were taken


# ---------------------------------------------------------------- real jobs
@pytest.mark.parametrize("num_servers", [1, 2])
def test_push_pull_sums(mxnet_ok, tmp_path, started, capsys, num_servers):
    # odd sizes; 1,000,003 elements is above MXNet's big-array bound: split across servers
    sizes = [1, 7, 1_000_003, 3]
    script = write(tmp_path, "sums.py", SUMS)
    results = kvstore.launch(script, num_workers=2, num_servers=num_servers,
                             args=[json.dumps(sizes)], timeout=120, echo=True)
    assert [r["rank"] for r in results] == [0, 1]
    for r in results:
        assert r["workers"] == 2 and r["argv"] == [json.dumps(sizes)]
        assert r["errors"] == [0.0] * (2 * len(sizes)), r
        assert len(r["times"]) == 2 and all(t > 0 for t in r["times"])
    shown = capsys.readouterr().out
    assert shown.index("[worker 0] hello from rank 0") < shown.index(
        "[worker 1] hello from rank 1")
    assert len(started) == 1 + num_servers + 2
    assert all(p.returncode is not None for p in started)  # all ended and reaped


def test_a_failing_worker_is_named(mxnet_ok, tmp_path, started):
    script = write(tmp_path, "fails.py", FAILS)
    begin = time.monotonic()
    with pytest.raises(RuntimeError) as err:
        kvstore.launch(script, num_workers=2, timeout=60)
    text = str(err.value)
    assert "worker rank 1 exited with status 1" in text
    assert "planted failure in the worker of rank 1" in text  # the end of its stderr
    assert "all processes of the job were stopped" in text
    assert time.monotonic() - begin < 45  # not the timeout: the failure ended the job
    assert len(started) == 4 and all(gone(p.pid) for p in started)


def test_a_hung_worker_times_out(tmp_path, started):
    # plain Python: no MXNet needed to hang; the servers are stopped wherever they are
    script = write(tmp_path, "hangs.py", HANGS)
    begin = time.monotonic()
    with pytest.raises(RuntimeError, match=r"still running after timeout=3 s") as err:
        kvstore.launch(script, num_workers=2, args=[str(tmp_path)], timeout=3)
    assert "worker 0" in str(err.value) and "worker 1" in str(err.value)
    assert time.monotonic() - begin < 20
    assert all(gone(p.pid) for p in started)
    pids = [int(x) for f in tmp_path.glob("*.pids") for x in f.read_text().split()]
    assert len(pids) == 4 and all(gone(pid) for pid in pids)  # the grandchildren too


def test_exit_status_and_missing_report(tmp_path, monkeypatch):
    script = write(tmp_path, "exits.py", "import sys\nsys.exit(3)\n")
    with pytest.raises(RuntimeError, match=r"worker process \d \(in launch order\) "
                                           r"exited with status 3"):
        kvstore.launch(script, num_workers=1, timeout=60)
    monkeypatch.setattr(kvstore, "_GRACE_S", 0.5)
    quiet = write(tmp_path, "quiet.py", "print('no report')\n")
    with pytest.raises(RuntimeError, match=r"rank\(s\) \[0\] of 1 ended without calling "
                                           r"kvstore.report"):
        kvstore.launch(quiet, num_workers=1, timeout=60)


def test_workers_run_this_python(tmp_path, monkeypatch):
    script = write(tmp_path, "which.py", """
        import json, os, sys
        from d2l_ext import kvstore
        kv = type("KV", (), {"rank": 0})()
        kvstore.report(kv, {"python": sys.executable, "role": os.environ["DMLC_ROLE"],
                            "port": os.environ["DMLC_PS_ROOT_PORT"],
                            "capture": os.environ.get("D2L_CAPTURE")})
    """)
    monkeypatch.setenv("D2L_CAPTURE", str(tmp_path))
    monkeypatch.setattr(kvstore, "_GRACE_S", 0.5)
    [value] = kvstore.launch(script, num_workers=1, timeout=60)
    assert value["python"] == sys.executable and value["role"] == "worker"
    assert int(value["port"]) > 0 and value["capture"] is None
