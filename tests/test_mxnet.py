"""d2l_ext.mxnet: skipped where MXNet 1.9.1 cannot be imported, except the ImportError checks."""

from __future__ import annotations

import importlib
import sys

import numpy
import pytest
from nets import assert_learned, linear_mxnet_net, tiny_mxnet_cnn, tiny_mxnet_hybrid_cnn

from d2l_ext import fashion_mnist
from d2l_ext.utils import TrainResult

pytestmark = pytest.mark.usefixtures("private_cache")


@pytest.fixture(scope="module")
def d2l(numpy_too_new):
    """``d2l_ext.mxnet`` (skips the test where MXNet cannot be imported)."""
    if numpy_too_new:
        pytest.skip(f"MXNet 1.9.1 needs numpy < 1.24, this is numpy {numpy.__version__}")
    pytest.importorskip("mxnet")
    return pytest.importorskip("d2l_ext.mxnet")


# ---------------------------------------------------------------- the ImportError
IMPORT_WITH = """
import sys
import numpy
numpy.__version__ = {version!r}
{extra}
try:
    import d2l_ext.mxnet
except ImportError as err:
    print("ImportError:", err)
else:
    print("imported")
"""


def assert_names_the_requirements(message: str) -> None:
    for needed in ("numpy < 1.24", "1.9.1", "Python", "d2l_ext.torch"):
        assert needed in message


def test_import_error_with_numpy_too_new(numpy_too_new, run_python):
    """Real where numpy >= 1.24 (in this process), simulated otherwise (in a subprocess)."""
    if numpy_too_new:
        sys.modules.pop("d2l_ext.mxnet", None)
        with pytest.raises(ImportError) as err:
            importlib.import_module("d2l_ext.mxnet")
        message = str(err.value)
        assert f"numpy {numpy.__version__}" in message
    else:
        proc = run_python(IMPORT_WITH.format(version="2.0.0", extra=""))
        assert proc.returncode == 0, proc.stderr
        message = proc.stdout
        assert message.startswith("ImportError:") and "numpy 2.0.0" in message
    assert_names_the_requirements(message)


@pytest.mark.parametrize("version", ["1.24.0", "2.0.0", "2.3.1"])
def test_import_error_simulated_numpy(run_python, version):
    proc = run_python(IMPORT_WITH.format(version=version, extra=""))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ImportError:")
    assert f"Found numpy {version}" in proc.stdout
    assert_names_the_requirements(proc.stdout)


def test_import_error_without_mxnet(run_python):
    proc = run_python(IMPORT_WITH.format(version="1.23.5", extra="sys.modules['mxnet'] = None"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ImportError:")
    assert "mxnet" in proc.stdout and "Found numpy" not in proc.stdout
    assert_names_the_requirements(proc.stdout)


def test_import_does_not_import_torch(d2l, run_python):
    proc = run_python("import sys\nimport d2l_ext.mxnet\n"
                      "print([m for m in ('torch', 'd2l') if m in sys.modules])")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "[]"


# ---------------------------------------------------------------- devices
def test_devices_without_gpus(d2l, monkeypatch):
    monkeypatch.setattr(d2l, "num_gpus", lambda: 0)
    cpu = d2l.cpu
    assert d2l.try_gpu() == cpu() and d2l.try_gpu(5) == cpu()
    assert d2l.try_all_gpus() == [cpu()]
    assert d2l.try_all_devices() == [cpu(0), cpu(1)]
    assert d2l.try_all_devices(2) == [cpu(0), cpu(1)]
    assert d2l.try_all_devices(3) == [cpu(0), cpu(1), cpu(2)]


def test_devices_with_two_gpus(d2l, monkeypatch):
    monkeypatch.setattr(d2l, "num_gpus", lambda: 2)
    gpus = [d2l.gpu(0), d2l.gpu(1)]
    assert d2l.try_gpu() == gpus[0] and d2l.try_gpu(1) == gpus[1]
    assert d2l.try_gpu(2) == d2l.cpu()
    assert d2l.try_all_gpus() == gpus
    assert d2l.try_all_devices(2) == gpus
    assert d2l.try_all_devices(3) == [d2l.cpu(i) for i in range(3)]


def test_real_devices(d2l):
    assert d2l.cpu() == d2l.cpu(0) != d2l.cpu(1)
    assert d2l.gpu(1).device_type == "gpu" and d2l.gpu(1).device_id == 1
    if d2l.num_gpus() == 0:
        assert d2l.try_gpu() == d2l.cpu() and d2l.try_gpu(5) == d2l.cpu()
        assert d2l.try_all_gpus() == [d2l.cpu()]
        assert d2l.try_all_devices(2) == [d2l.cpu(0), d2l.cpu(1)]


# ---------------------------------------------------------------- split_batch
@pytest.mark.parametrize(("n", "k"), [(8, 2), (10, 3), (11, 4), (5, 5), (7, 1)])
def test_split_batch(d2l, n, k):
    X = d2l.np.arange(n * 3, dtype="float32").reshape(n, 3)
    y = d2l.np.arange(n)
    devices = [d2l.cpu(i) for i in range(k)]
    X_shards, y_shards = d2l.split_batch(X, y, devices)
    assert len(X_shards) == len(y_shards) == k
    sizes = [s.shape[0] for s in X_shards]
    assert [s.shape[0] for s in y_shards] == sizes
    assert max(sizes) - min(sizes) <= 1
    assert [s.ctx for s in X_shards] == devices and [s.ctx for s in y_shards] == devices
    numpy.testing.assert_array_equal(numpy.concatenate([s.asnumpy() for s in X_shards]),
                                     X.asnumpy())
    numpy.testing.assert_array_equal(numpy.concatenate([s.asnumpy() for s in y_shards]),
                                     y.asnumpy())
    for Xs, ys in zip(X_shards, y_shards):
        numpy.testing.assert_array_equal(Xs.asnumpy()[:, 0] / 3, ys.asnumpy())


def test_split_batch_errors(d2l):
    X, y = d2l.np.zeros((2, 3)), d2l.np.zeros(2)
    with pytest.raises(ValueError, match="cannot split 2 examples across 3 devices"):
        d2l.split_batch(X, y, [d2l.cpu(i) for i in range(3)])
    with pytest.raises(ValueError, match="X has 5 examples but y has 4"):
        d2l.split_batch(d2l.np.zeros((5, 3)), d2l.np.zeros(4), [d2l.cpu()])
    with pytest.raises(ValueError, match="devices is empty"):
        d2l.split_batch(X, y, [])


# ---------------------------------------------------------------- models
def count_params(net, trainable_only: bool = False) -> int:
    return sum(p.data().size for p in net.collect_params().values()
               if not trainable_only or p.grad_req != "null")


def test_resnet18(d2l):
    net = d2l.resnet18(10)
    net.initialize()
    assert net(d2l.np.zeros((2, 1, 28, 28))).shape == (2, 10)
    # the same trainable parameters as the PyTorch version; BatchNorm's statistics on top
    assert count_params(net, trainable_only=True) == 11_175_818


def test_resnet18_like_d2l(d2l):
    ref = pytest.importorskip("d2l.mxnet")
    counts = []
    for resnet18 in (d2l.resnet18, ref.resnet18):
        net = resnet18(10)
        net.initialize()
        net(d2l.np.zeros((1, 1, 28, 28)))
        counts.append(count_params(net))
    assert counts[0] == counts[1]


def test_residual(d2l):
    X = d2l.np.random.normal(size=(2, 3, 6, 6))
    blk = d2l.Residual(3)
    blk.initialize()
    assert blk(X).shape == (2, 3, 6, 6)
    blk = d2l.Residual(8, use_1x1conv=True, strides=2)
    blk.initialize()
    assert blk(X).shape == (2, 8, 3, 3)


def test_initialize_on_two_contexts(d2l):
    devices = [d2l.cpu(0), d2l.cpu(1)]
    net = tiny_mxnet_cnn()
    net.initialize(d2l.init.Xavier(), ctx=devices)
    for device in devices:  # completes the deferred initialisation
        assert net(d2l.np.zeros((2, 1, 28, 28), ctx=device)).shape == (2, 10)
    params = list(net.collect_params().values())
    assert params and all(p.list_ctx() == devices for p in params)
    weight = params[0]
    numpy.testing.assert_array_equal(weight.data(devices[0]).asnumpy(),
                                     weight.data(devices[1]).asnumpy())
    with pytest.raises(RuntimeError, match=r"cpu\(2\)"):
        weight.data(d2l.cpu(2))


# ---------------------------------------------------------------- data
def test_get_dataloader_workers(d2l):
    assert d2l.get_dataloader_workers() == 4


def test_load_data_fashion_mnist(d2l, fmnist_dir):
    train_iter, test_iter = d2l.load_data_fashion_mnist(64, num_workers=0, num_train=200,
                                                        num_test=100)
    X, y = next(iter(train_iter))
    assert X.shape == (64, 1, 28, 28) and X.dtype == numpy.float32
    assert y.shape == (64,) and y.dtype == numpy.int32
    assert 0 <= float(X.min()) and float(X.max()) <= 1
    assert [y.shape[0] for _, y in train_iter] == [64, 64, 64, 8]
    images, labels = fashion_mnist.load(False, num_examples=100)
    batches = list(test_iter)
    X_test = numpy.concatenate([X.asnumpy() for X, _ in batches])
    y_test = numpy.concatenate([y.asnumpy() for _, y in batches])
    assert y_test.tolist() == labels.tolist()
    numpy.testing.assert_allclose(X_test[:, 0], images / 255, rtol=1e-6)


def test_load_data_fashion_mnist_resize(d2l, fmnist_dir):
    train_iter, test_iter = d2l.load_data_fashion_mnist(8, 32, num_workers=0, num_train=8,
                                                        num_test=8)
    for X, y in (next(iter(train_iter)), next(iter(test_iter))):
        assert X.shape == (8, 1, 32, 32) and X.dtype == numpy.float32
        assert y.dtype == numpy.int32
        assert 0 <= float(X.min()) and float(X.max()) <= 1 and float(X.max()) > 0.5


# ---------------------------------------------------------------- evaluation
def test_accuracy(d2l):
    np = d2l.np
    y_hat = np.array([[0.1, 0.9, 0.0], [0.2, 0.1, 0.7], [0.8, 0.1, 0.1], [0.0, 1.0, 0.0]])
    y = np.array([1, 0, 0, 1], dtype="int32")
    assert d2l.accuracy(y_hat, y) == 3.0
    assert isinstance(d2l.accuracy(y_hat, y), float)


def constant_net(d2l, label: int, devices):
    """Dense layer with zero weights and a one-hot bias: predicts ``label`` everywhere."""
    net = d2l.nn.Dense(10, in_units=28 * 28)
    net.initialize(d2l.init.Zero(), ctx=devices)
    bias = numpy.zeros(10, dtype="float32")
    bias[label] = 1
    net.bias.set_data(d2l.np.array(bias))
    return net


def test_evaluate_accuracy(d2l, fmnist_dir):
    devices = [d2l.cpu(0), d2l.cpu(1)]
    _, test_iter = d2l.load_data_fashion_mnist(64, num_workers=0, num_train=1, num_test=500)
    labels = fashion_mnist.load(False, num_examples=500)[1]
    expected = float(numpy.mean(labels == 6))
    net = constant_net(d2l, 6, devices)
    assert 0 < expected < 1
    assert d2l.evaluate_accuracy_gpus(net, test_iter) == pytest.approx(expected)
    assert d2l.evaluate_accuracy_gpu(net, test_iter) == pytest.approx(expected)
    assert d2l.evaluate_accuracy_gpu(net, test_iter, d2l.cpu(1)) == pytest.approx(expected)
    calls = []

    def split_f(X, y, devices):
        calls.append(devices)
        return d2l.split_batch(X, y, devices)

    assert d2l.evaluate_accuracy_gpus(net, test_iter, split_f) == pytest.approx(expected)
    assert len(calls) == len(test_iter) and calls[0] == devices


# ---------------------------------------------------------------- training
@pytest.mark.parametrize("num_devices", [1, 2])
def test_train(d2l, fmnist_dir, num_devices, capsys):
    devices = [d2l.cpu(i) for i in range(num_devices)]
    net = tiny_mxnet_cnn()
    result = d2l.train(net, devices, batch_size=64, lr=0.5, num_epochs=2, num_train=2000,
                       num_test=500)
    assert isinstance(result, TrainResult)
    assert result.devices == [str(d) for d in devices]
    assert_learned(result, 2, capsys.readouterr().out.splitlines())
    params = list(net.collect_params().values())
    assert all(p.list_ctx() == devices for p in params)
    # the gradients are summed over the devices: every copy gets the same update
    weight = params[0]
    for device in devices[1:]:
        numpy.testing.assert_allclose(weight.data(device).asnumpy(),
                                      weight.data(devices[0]).asnumpy(), rtol=1e-6)
    _, test_iter = d2l.load_data_fashion_mnist(64, num_workers=0, num_train=1, num_test=500)
    assert d2l.evaluate_accuracy_gpus(net, test_iter) == pytest.approx(result.test_acc[-1],
                                                                       abs=1e-6)


def test_train_errors(d2l):
    with pytest.raises(ValueError, match="devices is empty"):
        d2l.train(tiny_mxnet_cnn(), [], batch_size=64, lr=0.1)
    with pytest.raises(ValueError, match="batch_size 1 is smaller than the 2 devices"):
        d2l.train(tiny_mxnet_cnn(), [d2l.cpu(0), d2l.cpu(1)], batch_size=1, lr=0.1)


# ---------------------------------------------------------------- the fast path's switches
def test_hybridized_resnet18_computes_what_the_imperative_one_does(d2l):
    d2l.mx.random.seed(0)
    net = d2l.resnet18(10)
    net.initialize(d2l.init.Xavier())
    X = d2l.np.random.uniform(size=(4, 1, 28, 28))
    expected = net(X).asnumpy()
    net.hybridize(static_alloc=True, static_shape=True)
    numpy.testing.assert_allclose(net(X).asnumpy(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("options", [dict(hybridize=True), dict(kvstore="device"),
                                     dict(num_workers=2, pin_memory=True)])
def test_train_with_switches_learns(d2l, fmnist_dir, options):
    result = d2l.train(tiny_mxnet_hybrid_cnn(), [d2l.cpu(0)], batch_size=64, lr=0.5,
                       num_epochs=2, num_train=1000, num_test=500, verbose=False, **options)
    assert result.train_loss[-1] < result.train_loss[0]
    assert result.test_acc[-1] > 0.2  # chance is 0.1


def test_hybridize_needs_hybrid_blocks(d2l):
    with pytest.raises(ValueError, match="hybridize=True needs a HybridBlock.*HybridSequential"):
        d2l.train(tiny_mxnet_cnn(), [d2l.cpu(0)], batch_size=64, lr=0.1, hybridize=True)


# ---------------------------------------------------------------- barriers and timing
def test_measure_waits_for_the_engine(d2l):
    """MXNet's engine is asynchronous on a CPU too: without waitall the timer would stop
    while the product is still queued. With the barrier, the work is inside the time."""
    from mxnet import np

    a = np.random.uniform(size=(1024, 1024))
    d2l.synchronize()
    queued = d2l.Timer()
    for _ in range(20):
        b = np.dot(a, a)  # noqa: F841 - queued, not computed
    issue_seconds = queued.stop()
    d2l.synchronize()
    timing = d2l.measure(lambda: [np.dot(a, a) for _ in range(20)], repeats=2)
    assert timing.min > 3 * issue_seconds  # the time of the work, not of queuing it


# ---------------------------------------------------------------- devices and arguments
def test_default_kvstore_sums_on_the_gpus_only_when_all_are_gpus(d2l):
    import mxnet as mx

    assert d2l.default_kvstore([mx.gpu(0), mx.gpu(1)]) == "device"  # plain values: no GPU used
    assert d2l.default_kvstore([mx.cpu(0), mx.gpu(0)]) == "local"
    assert d2l.default_kvstore([mx.cpu(0), mx.cpu(1)]) == "local"


@pytest.mark.parametrize("bad, named", [
    (dict(lr=-0.1), "lr=-0.1"), (dict(num_epochs=0), "num_epochs=0"),
    (dict(warmup_epochs=-1.0), "warmup_epochs=-1.0"), (dict(num_test=0), "num_test=0"),
    (dict(batch_size=33), "not a multiple of the 2 devices"),
])
def test_bad_train_arguments_are_named(d2l, bad, named):
    import re

    args = dict(batch_size=32, lr=0.1, num_epochs=1) | bad
    with pytest.raises(ValueError, match=re.escape(named)):
        d2l.train(tiny_mxnet_cnn(), [d2l.cpu(0), d2l.cpu(1)], **args)


def test_a_last_batch_smaller_than_the_devices(d2l, fmnist_dir):
    """129 training and 65 test images, batches of 64 on two devices: the last batches hold
    one example. Training leaves that one out (every device needs a share for the summed
    gradients); the test accuracy counts it, on the one device it fits."""
    result = d2l.train(tiny_mxnet_cnn(), [d2l.cpu(0), d2l.cpu(1)], batch_size=64, lr=0.5,
                       num_epochs=1, num_train=129, num_test=65, verbose=False)
    assert len(result.test_acc) == 1
    assert round(result.test_acc[0] * 65) == pytest.approx(result.test_acc[0] * 65, abs=1e-6)


# ---------------------------------------------------------------- what each step does
def recording_mxnet_net(d2l, seen: list):
    """Softmax regression that appends ``(device, examples)`` to ``seen`` at every training
    forward pass."""

    class Recording(d2l.nn.Block):
        def __init__(self) -> None:
            super().__init__()
            self.dense = d2l.nn.Dense(10)

        def forward(self, X):
            if d2l.autograd.is_training():
                seen.append((str(X.ctx), X.shape[0]))
            return self.dense(X)

    return Recording()


def test_each_device_gets_its_share_of_every_batch(d2l, fmnist_dir):
    """Batches of 64 on two devices, two steps: each device computes on 32 examples a step."""
    seen = []
    d2l.train(recording_mxnet_net(d2l, seen), [d2l.cpu(0), d2l.cpu(1)], batch_size=64, lr=0.1,
              num_epochs=1, num_train=128, num_test=64, verbose=False)
    assert seen == [("cpu(0)", 32), ("cpu(1)", 32)] * 2


def test_learning_rate_warms_up_over_the_first_epochs_steps(d2l, fmnist_dir, monkeypatch):
    """Three steps an epoch, ``warmup_epochs=1``: lr/3, 2 lr/3, then lr for every step."""
    rates = []
    set_learning_rate = d2l.gluon.Trainer.set_learning_rate
    monkeypatch.setattr(d2l.gluon.Trainer, "set_learning_rate",
                        lambda self, lr: rates.append(lr) or set_learning_rate(self, lr))
    d2l.train(linear_mxnet_net(), [d2l.cpu(0)], batch_size=32, lr=0.3, num_epochs=2,
              num_train=96, num_test=32, warmup_epochs=1.0, verbose=False)
    assert rates == pytest.approx([0.1, 0.2, 0.3, 0.3, 0.3, 0.3])


def test_every_timed_epoch_starts_and_ends_with_waitall(d2l, fmnist_dir, monkeypatch,
                                                      timer_events):
    """The timer starts right after ``npx.waitall`` and stops right after another."""
    events = timer_events(d2l)
    waitall = d2l.npx.waitall
    monkeypatch.setattr(d2l.npx, "waitall", lambda: events.append("waitall") or waitall())
    d2l.train(linear_mxnet_net(), [d2l.cpu(0)], batch_size=32, lr=0.1, num_epochs=2,
              num_train=64, num_test=32, verbose=False)
    assert events == ["waitall", "start", "waitall", "stop"] * 2


def test_an_epochs_time_includes_its_queued_work(d2l, fmnist_dir):
    """MXNet's engine is asynchronous on a CPU too: when the loop of a one-step epoch ends,
    the step's products are still queued. The epoch's time must include them (without the
    closing waitall it would be the time it took to queue them)."""
    np = d2l.np
    big = np.random.uniform(size=(512, 512))

    class Heavy(d2l.nn.Block):
        def __init__(self) -> None:
            super().__init__()
            self.dense = d2l.nn.Dense(10)

        def forward(self, X):
            work = sum(np.dot(big, big).sum() for _ in range(16))
            return self.dense(X) + 0 * work

    work = d2l.measure(lambda: sum(np.dot(big, big).sum() for _ in range(16)), repeats=3)
    result = d2l.train(Heavy(), [d2l.cpu(0)], batch_size=32, lr=0.1, num_epochs=1,
                       num_train=32, num_test=32, verbose=False)
    # without the closing barrier the epoch would take the milliseconds of queueing the work;
    # a wide margin keeps the check true on a loaded machine, where timings vary
    assert result.epoch_seconds[0] > 0.1 * work.min
