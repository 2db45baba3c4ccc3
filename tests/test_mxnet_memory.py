"""d2l_ext.mxnet_memory: MXNet's profiler memory counter, checked against arrays of known size.

The counter is process-wide and must start before the first array, so the measurements run in
a fresh Python process (one for the whole module). Skipped where MXNet 1.9.1 cannot be
imported."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import json, os
    from d2l_ext import mxnet_memory
    counter = mxnet_memory.StorageCounter()  # before any array
    import mxnet as mx
    from mxnet import autograd, gluon, np, npx
    from mxnet.gluon import nn

    npx.set_np()
    out = {"name": counter.name, "first": list(counter.read().__dict__.values())}
    start = counter.current()
    a = np.zeros((1000, 1000))
    out["float32"] = counter.current() - start
    h = np.zeros((333, 7), dtype="float16")
    i8 = np.zeros((1001,), dtype="int8")
    out["float16 + int8"] = counter.current() - start - out["float32"]
    # a temporary: peak above current, and gone from the next reading's peak
    s = (a * 2).sum()
    r1 = counter.read()
    r2 = counter.read()
    out["temporary"] = [r1.current - start, r1.peak - start, r2.peak - start]
    del a, h, i8, s
    out["after del"] = counter.current() - start  # needs the queued frees to have run
    # the same again many times: every free must be seen at once
    freed = []
    for _ in range(20):
        b = np.ones((100, 100))
        before = counter.current()
        del b
        freed.append(before - counter.current())
    out["freed"] = freed
    # Gluon: gradients appear when grad_req becomes "write"; momentum at the first step
    net = nn.Dense(37, in_units=53)
    net.initialize()
    net.collect_params().setattr("grad_req", "null")
    before = counter.current()
    net.collect_params().setattr("grad_req", "write")
    params = list(net.collect_params().values())
    out["grads"] = [counter.current() - before,
                    mxnet_memory.array_bytes(p.grad() for p in params)]
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9})
    x = np.ones((5, 53))
    with autograd.record():
        loss = net(x).sum()
    loss.backward()
    before = counter.current()
    trainer.step(5)
    out["momentum"] = [counter.current() - before,
                       mxnet_memory.array_bytes(p.data() for p in params)]
    # the chapter's MLP: its parameters, allocated at the first forward pass, are the count
    before = counter.current()
    mlp = mxnet_memory.make_net((64, 32), 10)
    mlp(np.ones((4, 50)))
    out["mlp"] = [counter.current() - before, 4 * mxnet_memory.mlp_parameters(50, (64, 32), 10),
                  [p.shape for p in mlp.collect_params().values()]]
    mlp_trainer = gluon.Trainer(mlp.collect_params(), "sgd",
                                {"learning_rate": 0.1, "momentum": 0.9})
    first = mlp[0].weight.data().asnumpy()
    before = counter.current()
    mxnet_memory.train_step(mlp, mlp_trainer, gluon.loss.SoftmaxCrossEntropyLoss(),
                            np.ones((4, 50)), np.array([0, 1, 2, 3]))
    out["mlp step"] = [counter.current() - before,
                       bool((mlp[0].weight.data().asnumpy() != first).any())]
    del mlp, mlp_trainer
    # paused (for timings): no events are written, but MXNet's count goes on, so the first
    # reading after the pause is right, for arrays made, and older arrays freed, inside it
    older = np.zeros((250, 1000))
    start = counter.current()
    with counter.paused():
        made = np.zeros((1000, 1000))
        del older
        temporary = np.ones((500, 1000)) + 1
        del temporary
        mxnet_memory.settle()
        out["events while paused"] = len(counter._events())
    after_pause = counter.read()
    out["paused"] = [after_pause.current - start, after_pause.peak - start]
    del made
    out["after the pause"] = counter.current() - start
    path = counter.path
    counter.stop()
    out["file removed"] = not os.path.exists(path)
    print("RESULT" + json.dumps(out))
""")


@pytest.fixture(scope="module")
def measured():
    """The script's measurements (skips where MXNet 1.9.1 cannot be imported)."""
    import numpy

    if tuple(int(p) for p in numpy.__version__.split(".")[:2]) >= (1, 24):
        pytest.skip("MXNet 1.9.1 needs numpy < 1.24")
    if importlib.util.find_spec("mxnet") is None:
        pytest.skip("MXNet is not installed")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT"):])


def test_starts_at_zero_on_cpu0(measured):
    assert measured["name"] == "cpu/0"
    assert measured["first"] == [0, 0]


def test_known_sizes(measured):
    assert measured["float32"] == 4_000_000
    assert measured["float16 + int8"] == 333 * 7 * 2 + 1001


def test_peak_sees_temporaries_and_resets(measured):
    current, peak, next_peak = measured["temporary"]
    base = 4_000_000 + 333 * 7 * 2 + 1001
    assert current == base + 4  # the scalar sum is kept; the product was freed
    assert peak == base + 4_000_000 + 4  # the product existed during the sum
    assert next_peak == current  # a reading's peak starts from the previous reading


def test_frees_are_seen_at_once(measured):
    assert measured["after del"] == 0
    assert measured["freed"] == [40_000] * 20


def test_gluon_gradients_and_momentum(measured):
    grads, grad_bytes = measured["grads"]
    assert grads == grad_bytes == 4 * (37 * 53 + 37)
    momentum, param_bytes = measured["momentum"]
    assert momentum == param_bytes


def test_the_chapters_mlp_allocates_its_counted_parameters_and_trains(measured):
    allocated, counted, shapes = measured["mlp"]
    assert counted == 4 * (50 * 64 + 64 + 64 * 32 + 32 + 32 * 10 + 10)
    # the weights and their gradients (grad_req="write"), and a scalar of the initializer
    assert 0 <= allocated - 2 * counted <= 16
    assert shapes == [[64, 50], [64], [32, 64], [32], [10, 32], [10]]
    kept, moved = measured["mlp step"]
    assert moved  # the step changed the weights
    assert kept == counted  # and left SGD's momentum, one number per parameter


def test_paused_writes_no_events_and_keeps_counting(measured):
    assert measured["events while paused"] == 0
    assert measured["paused"] == [3_000_000, 3_000_000]  # no peak from inside the pause
    assert measured["after the pause"] == -1_000_000


def test_stop_removes_the_trace_file(measured):
    assert measured["file removed"]


def test_array_bytes():
    import numpy

    if tuple(int(p) for p in numpy.__version__.split(".")[:2]) >= (1, 24):
        pytest.skip("MXNet 1.9.1 needs numpy < 1.24")
    mm = pytest.importorskip("d2l_ext.mxnet_memory")
    from mxnet import np

    arrays = [np.zeros((3, 5)), np.zeros((7,), dtype="float16"), np.zeros((2, 2), dtype="int64")]
    assert mm.array_bytes(arrays) == 3 * 5 * 4 + 7 * 2 + 4 * 8
    assert mm.array_bytes([]) == 0
