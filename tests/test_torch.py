"""d2l_ext.torch: devices, split_batch, ResNet-18, data loading, evaluation and train()."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from nets import assert_learned, linear_torch_net, tiny_torch_cnn  # noqa: E402
from torch import nn  # noqa: E402

from d2l_ext import fashion_mnist  # noqa: E402
from d2l_ext import torch as d2l  # noqa: E402
from d2l_ext.utils import TrainResult  # noqa: E402

pytestmark = pytest.mark.usefixtures("private_cache")

CPU = torch.device("cpu")
TESTS = Path(__file__).resolve().parent
LR = 0.2  # for the tiny CNN: 1 epoch of 1000-2000 images reaches about 0.5 test accuracy


# ---------------------------------------------------------------- devices
def test_devices_without_gpus(monkeypatch):
    monkeypatch.setattr(d2l, "num_gpus", lambda: 0)
    assert d2l.try_gpu() == CPU
    assert d2l.try_gpu(5) == CPU
    assert d2l.try_all_gpus() == [CPU]
    assert d2l.try_all_devices() == [CPU, CPU]
    assert d2l.try_all_devices(2) == [CPU, CPU]
    assert d2l.try_all_devices(3) == [CPU] * 3


def test_devices_with_two_gpus(monkeypatch):
    monkeypatch.setattr(d2l, "num_gpus", lambda: 2)
    gpus = [torch.device("cuda:0"), torch.device("cuda:1")]
    assert d2l.try_gpu() == gpus[0]
    assert d2l.try_gpu(1) == gpus[1]
    assert d2l.try_gpu(2) == CPU
    assert d2l.try_all_gpus() == gpus
    assert d2l.try_all_devices(2) == gpus
    assert d2l.try_all_devices(4) == [CPU] * 4


def test_real_devices():
    assert d2l.num_gpus() == torch.cuda.device_count()
    assert d2l.cpu() == CPU and d2l.gpu(3) == torch.device("cuda", 3)
    if d2l.num_gpus() == 0:
        assert d2l.try_gpu() == CPU and d2l.try_gpu(5) == CPU
        assert d2l.try_all_gpus() == [CPU]
        assert d2l.try_all_devices(2) == [CPU, CPU]


# ---------------------------------------------------------------- split_batch
@pytest.mark.parametrize(("n", "k"), [(8, 2), (10, 3), (11, 4), (5, 5), (7, 1)])
def test_split_batch(n, k):
    X = torch.arange(n * 3, dtype=torch.float32).reshape(n, 3)
    y = torch.arange(n)
    X_shards, y_shards = d2l.split_batch(X, y, [CPU] * k)
    assert len(X_shards) == len(y_shards) == k
    sizes = [len(s) for s in X_shards]
    assert [len(s) for s in y_shards] == sizes
    assert max(sizes) - min(sizes) <= 1
    assert all(s.device == CPU for s in X_shards + y_shards)
    assert all(s.shape[1:] == (3,) for s in X_shards)
    torch.testing.assert_close(torch.cat(X_shards), X)
    torch.testing.assert_close(torch.cat(y_shards), y)
    for Xs, ys in zip(X_shards, y_shards):  # rows stay with their labels
        torch.testing.assert_close((Xs[:, 0] / 3).long(), ys)


def test_split_batch_errors():
    X, y = torch.zeros(2, 3), torch.zeros(2)
    with pytest.raises(ValueError, match="cannot split 2 examples across 3 devices"):
        d2l.split_batch(X, y, [CPU] * 3)
    with pytest.raises(ValueError, match="X has 5 examples but y has 4"):
        d2l.split_batch(torch.zeros(5, 3), torch.zeros(4), [CPU])
    with pytest.raises(ValueError, match="devices is empty"):
        d2l.split_batch(X, y, [])


# ---------------------------------------------------------------- models
def num_params(net: nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


def conv_params(c_in: int, c_out: int, k: int) -> int:
    return c_in * c_out * k * k + c_out


def test_residual_same_shape():
    X = torch.randn(2, 8, 6, 6)
    blk = d2l.Residual(8, in_channels=8)
    assert blk(X).shape == (2, 8, 6, 6)
    assert num_params(blk) == 2 * conv_params(8, 8, 3) + 2 * 2 * 8
    assert blk.conv3 is None


def test_residual_1x1conv_strides():
    X = torch.randn(2, 3, 6, 6)
    blk = d2l.Residual(8, use_1x1conv=True, strides=2, in_channels=3)
    assert blk(X).shape == (2, 8, 3, 3)
    assert num_params(blk) == (conv_params(3, 8, 3) + conv_params(8, 8, 3)
                               + conv_params(3, 8, 1) + 2 * 2 * 8)
    same = d2l.Residual(8, use_1x1conv=True, in_channels=3)
    assert same(X).shape == (2, 8, 6, 6)


def test_residual_lazy():
    X = torch.randn(2, 3, 6, 6)
    blk = d2l.Residual(8, use_1x1conv=True, strides=2)
    assert any(nn.parameter.is_lazy(p) for p in blk.parameters())
    assert blk(X).shape == (2, 8, 3, 3)
    assert not any(nn.parameter.is_lazy(p) for p in blk.parameters())
    assert num_params(blk) == (conv_params(3, 8, 3) + conv_params(8, 8, 3)
                               + conv_params(3, 8, 1) + 2 * 2 * 8)
    assert d2l.Residual(3)(X).shape == X.shape


def test_resnet18():
    net = d2l.resnet18(10)
    assert num_params(net) == 11_175_818
    assert not any(nn.parameter.is_lazy(p) for p in net.parameters())
    net.eval()
    with torch.no_grad():
        assert net(torch.randn(3, 1, 28, 28)).shape == (3, 10)


def test_resnet18_rgb():
    net = d2l.resnet18(10, in_channels=3)
    assert num_params(net) == 11_175_818 + 2 * 64 * 3 * 3  # two more input channels
    net.eval()
    with torch.no_grad():
        assert net(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_resnet18_without_bias_before_batchnorm():
    """The biases BatchNorm would cancel are gone: the stem's and each residual's conv1, conv2."""
    net = d2l.resnet18(10, bias=False)
    assert num_params(net) == 11_175_818 - (64 + 2 * 2 * (64 + 128 + 256 + 512))
    assert all(r.conv3.bias is not None for r in net.modules()
               if isinstance(r, d2l.Residual) and r.conv3 is not None)


def test_a_bias_before_batchnorm_changes_nothing_in_training():
    """With batch statistics, BatchNorm subtracts the mean: a bias before it cancels out."""
    torch.manual_seed(0)
    without = d2l.resnet18(10, bias=False)
    with_bias = d2l.resnet18(10)
    with_bias.load_state_dict(without.state_dict(), strict=False)  # the biases stay random
    X = torch.randn(4, 1, 28, 28)
    torch.testing.assert_close(with_bias(X), without(X), rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- data
@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes")
def test_get_dataloader_workers(fmnist_dir):
    assert d2l.get_dataloader_workers() == 4
    train_iter, test_iter = d2l.load_data_fashion_mnist(16, num_train=16, num_test=16)
    assert train_iter.num_workers == test_iter.num_workers == 4


def test_load_data_fashion_mnist(fmnist_dir):
    train_iter, test_iter = d2l.load_data_fashion_mnist(64, num_workers=0, num_train=200,
                                                        num_test=100)
    assert len(train_iter.dataset) == 200 and len(test_iter.dataset) == 100
    X, y = next(iter(train_iter))
    assert X.shape == (64, 1, 28, 28) and X.dtype == torch.float32
    assert y.shape == (64,) and y.dtype == torch.int64
    assert 0 <= X.min() and X.max() <= 1 and X.max() > 0.5
    assert [len(y) for _, y in train_iter] == [64, 64, 64, 8]
    # the test set is not shuffled: the images and labels in file order
    images, labels = fashion_mnist.load(False, num_examples=100)
    X_test = torch.cat([X for X, _ in test_iter])
    y_test = torch.cat([y for _, y in test_iter])
    assert y_test.tolist() == labels.tolist()
    torch.testing.assert_close(X_test[:, 0], torch.from_numpy(images / 255).float())


@pytest.mark.parametrize(("resize", "shape"), [(32, (32, 32)), ((20, 40), (20, 40))])
def test_load_data_fashion_mnist_resize(fmnist_dir, resize, shape):
    train_iter, test_iter = d2l.load_data_fashion_mnist(8, resize, num_workers=0,
                                                        num_train=8, num_test=8)
    for X, _ in (next(iter(train_iter)), next(iter(test_iter))):
        assert X.shape == (8, 1, *shape) and X.dtype == torch.float32
        assert X.min() >= -1e-6 and X.max() <= 1 + 1e-6


# ---------------------------------------------------------------- evaluation
def test_accuracy():
    y_hat = torch.tensor([[0.1, 0.9, 0.0], [0.2, 0.1, 0.7], [0.8, 0.1, 0.1], [0.0, 1.0, 0.0]])
    y = torch.tensor([1, 0, 0, 1])
    assert d2l.accuracy(y_hat, y) == 3.0
    assert isinstance(d2l.accuracy(y_hat, y), float)
    assert d2l.accuracy(torch.tensor([1, 2, 0]), torch.tensor([1, 2, 2])) == 2.0


def test_evaluate_accuracy_gpu_perfect():
    """A net that reads the label off one-hot inputs is always right."""
    net = nn.Linear(10, 10)
    with torch.no_grad():
        net.weight.copy_(torch.eye(10))
        net.bias.zero_()
    labels = torch.arange(25) % 10
    data_iter = [(nn.functional.one_hot(y, 10).float(), y) for y in labels.split(8)]
    assert d2l.evaluate_accuracy_gpu(net, data_iter) == 1.0
    assert d2l.evaluate_accuracy_gpu(net, data_iter, CPU) == 1.0
    with torch.no_grad():
        net.weight.copy_(torch.eye(10).roll(1, 0))  # always the next class: never right
    assert d2l.evaluate_accuracy_gpu(net, data_iter) == 0.0


class Constant(nn.Module):
    """Predicts the same class for every image."""

    def __init__(self, label: int) -> None:
        super().__init__()
        self.logits = nn.Parameter(nn.functional.one_hot(torch.tensor(label), 10).float())

    def forward(self, X):
        return self.logits.expand(len(X), 10)


def test_evaluate_accuracy_gpu_constant(fmnist_dir):
    _, test_iter = d2l.load_data_fashion_mnist(64, num_workers=0, num_train=1, num_test=500)
    labels = fashion_mnist.load(False, num_examples=500)[1]
    net = Constant(6)
    assert net.training
    acc = d2l.evaluate_accuracy_gpu(net, test_iter)
    assert acc == pytest.approx(np.mean(labels == 6))
    assert 0 < acc < 1
    assert not net.training  # evaluated in eval mode


# ---------------------------------------------------------------- training
def test_train_one_device(fmnist_dir, capsys):
    torch.manual_seed(0)
    net = tiny_torch_cnn()
    result = d2l.train(net, [d2l.cpu()], batch_size=64, lr=LR, num_epochs=2,
                       num_train=1000, num_test=500)
    assert isinstance(result, TrainResult)
    assert result.devices == ["cpu"] and result.batch_size == 64 and result.lr == LR
    assert_learned(result, 2, capsys.readouterr().out.splitlines())
    _, test_iter = d2l.load_data_fashion_mnist(64, num_workers=0, num_train=1, num_test=500)
    assert d2l.evaluate_accuracy_gpu(net, test_iter) == pytest.approx(result.test_acc[-1],
                                                                      abs=1e-6)


def train_on_two_cpu_processes(net: nn.Module, **kwargs) -> tuple[nn.Module, TrainResult]:
    """``d2l.train(copy_of_net, [cpu(), cpu()], ...)``; returns the trained copy and the result."""
    trained = copy.deepcopy(net)
    return trained, d2l.train(trained, [d2l.cpu(), d2l.cpu()], **kwargs)


def test_train_two_processes(fmnist_dir):
    """Two gloo processes on the CPU; the parent's net gets rank 0's trained weights.
    sync_bn=True, which SyncBatchNorm refuses on CPU tensors, warns and trains without it."""
    torch.manual_seed(0)
    initial = tiny_torch_cnn()
    net, result = train_on_two_cpu_processes(initial, batch_size=64, lr=LR, num_epochs=1,
                                             num_train=2000, num_test=500, verbose=False,
                                             sync_bn=True)
    assert result.devices == ["cpu", "cpu"]
    assert len(result.test_acc) == len(result.epoch_seconds) == 1
    assert result.test_acc[-1] > 0.2
    assert not torch.equal(net.state_dict()["0.weight"], initial.state_dict()["0.weight"])
    _, test_iter = d2l.load_data_fashion_mnist(64, num_workers=0, num_train=1, num_test=500)
    assert d2l.evaluate_accuracy_gpu(net, test_iter) == pytest.approx(result.test_acc[-1],
                                                                      abs=1e-6)


def full_batch_sgd_step(net: nn.Module, num_examples: int, lr: float) -> nn.Module:
    """``net`` after one plain SGD step on the first ``num_examples`` training images."""
    net = copy.deepcopy(net)
    images, labels = fashion_mnist.load(True, num_examples=num_examples)
    X = torch.from_numpy(images.copy()).float().div(255).unsqueeze(1)
    nn.CrossEntropyLoss()(net(X), torch.from_numpy(labels.astype("int64"))).backward()
    with torch.no_grad():
        for p in net.parameters():
            p -= lr * p.grad
    return net


def test_train_one_device_one_step(fmnist_dir):
    """A single step over the whole training slice is one full-batch SGD step."""
    torch.manual_seed(0)
    net = linear_torch_net()
    expected = full_batch_sgd_step(net, 64, lr=1.0)
    d2l.train(net, [d2l.cpu()], batch_size=64, lr=1.0, num_epochs=1, num_train=64,
              num_test=64, verbose=False)
    for p, q in zip(net.parameters(), expected.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_train_two_processes_one_step(fmnist_dir):
    """Two ranks of 32 examples with averaged gradients take the full-batch step, once."""
    torch.manual_seed(0)
    net = linear_torch_net()
    expected = full_batch_sgd_step(net, 64, lr=1.0)
    net, _ = train_on_two_cpu_processes(net, batch_size=64, lr=1.0, num_epochs=1, num_train=64,
                                        num_test=64, verbose=False)
    # each rank trains its own copy (not one set of weights in shared memory, updated twice)
    assert not net.shared_seen
    for p, q in zip(net.parameters(), expected.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_train_needs_devices():
    with pytest.raises(ValueError, match="devices is empty"):
        d2l.train(tiny_torch_cnn(), [], batch_size=64, lr=0.1)


def test_train_batch_smaller_than_devices(monkeypatch):
    """Checked before any process is started."""

    def start_processes(*args, **kwargs):
        raise AssertionError("train() started processes")

    monkeypatch.setattr(d2l.mp, "start_processes", start_processes)
    with pytest.raises(ValueError, match="batch_size 1 is smaller than the 2 ranks"):
        d2l.train(tiny_torch_cnn(), [d2l.cpu(), d2l.cpu()], batch_size=1, lr=0.1,
                  num_epochs=1, num_train=10, num_test=10, verbose=False)


def test_import_does_not_import_mxnet(run_python):
    proc = run_python("import sys\nimport d2l_ext.torch\n"
                      "print([m for m in ('mxnet', 'd2l', 'torchvision') if m in sys.modules])")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "[]"


def test_train_batch_not_a_multiple_of_devices():
    with pytest.raises(ValueError, match="batch_size 65 is not a multiple of the 2 ranks"):
        d2l.train(tiny_torch_cnn(), [d2l.cpu(), d2l.cpu()], batch_size=65, lr=0.1,
                  num_epochs=1, num_train=10, num_test=10, verbose=False)


# ---------------------------------------------------------------- barriers and timing
def test_synchronize_waits_for_cuda_only_where_asked(monkeypatch):
    waited = []
    monkeypatch.setattr(d2l.torch.cuda, "synchronize", lambda device=None: waited.append(device))
    d2l.synchronize("cpu")  # CPU operators have finished when they return: nothing to do
    assert waited == []
    d2l.synchronize(torch.device("cuda", 1))
    assert waited == [torch.device("cuda", 1)]


def test_measure_drains_the_device_of_its_argument(monkeypatch):
    drained = []
    monkeypatch.setattr(d2l, "synchronize", lambda device=None: drained.append(device))
    timing = d2l.measure(lambda: None, "cuda:0", repeats=3, warmup=0)
    assert len(timing.times) == 3 and drained == ["cuda:0"] * 6


# ---------------------------------------------------------------- devices and arguments
def test_device_names_and_indices_are_normalised(monkeypatch):
    assert d2l.as_device("cpu") == torch.device("cpu")
    assert d2l.as_devices("cpu") == [torch.device("cpu")]  # one name, not 'c', 'p', 'u'
    monkeypatch.setattr(d2l, "num_gpus", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert d2l.as_device("cuda") == torch.device("cuda", 1)  # the current GPU
    assert d2l.as_device(torch.device("cuda")) == torch.device("cuda", 1)
    assert d2l.as_device(0) == torch.device("cuda", 0)
    assert d2l.as_devices(["cuda:0", "cuda"]) == [torch.device("cuda", 0),
                                                  torch.device("cuda", 1)]
    with pytest.raises(ValueError, match="there are 2 GPUs"):
        d2l.as_device("cuda:2")
    with pytest.raises(ValueError, match="empty"):
        d2l.as_devices([])


def test_a_gpu_on_a_machine_without_one_says_what_to_do(monkeypatch):
    monkeypatch.setattr(d2l, "num_gpus", lambda: 0)
    with pytest.raises(ValueError, match=r"no CUDA GPU.*d2l.try_gpu\(\)"):
        d2l.as_device("cuda")
    with pytest.raises(ValueError, match="no CUDA GPU"):
        d2l.train(tiny_torch_cnn(), ["cuda"], batch_size=8, lr=0.1, num_epochs=1)


@pytest.mark.parametrize("bad, named", [
    (dict(lr=0.0), "lr=0.0"), (dict(lr=-0.1), "lr=-0.1"), (dict(num_epochs=0), "num_epochs=0"),
    (dict(warmup_epochs=-1.0), "warmup_epochs=-1.0"), (dict(num_train=0), "num_train=0"),
    (dict(label_smoothing=1.0), "label_smoothing=1.0"), (dict(num_workers=-2), "num_workers"),
])
def test_bad_arguments_are_named_before_any_rank_starts(bad, named):
    """On two devices too: the check runs in the parent, at once (no spawned traceback)."""
    args = dict(batch_size=8, lr=0.1, num_epochs=1) | bad
    start = time.perf_counter()
    with pytest.raises(ValueError, match=re.escape(named)):
        d2l.train(tiny_torch_cnn(), [d2l.cpu(), d2l.cpu()], **args)
    assert time.perf_counter() - start < 2


def test_device_decisions_for_gpus_and_cpus():
    """The choices train makes from a device, checked with devices as plain values."""
    from d2l_ext.torch import _Config

    cuda, cpu = torch.device("cuda", 1), torch.device("cpu")
    assert d2l.process_group_backend(cuda) == "nccl"
    assert d2l.process_group_backend(cpu) == "gloo"
    assert d2l.ddp_device_ids(cuda) == [cuda] and d2l.ddp_device_ids(cpu) is None
    cfg = _Config(batch_size=8, lr=0.1, num_epochs=1, warmup_epochs=0.0, num_train=None,
                  num_test=None, num_workers=0, root=None, sync_bn=True, seed=0, timeout=9.0)
    assert cfg.pins_memory(cuda) and not cfg.pins_memory(cpu)  # default: pin for GPUs only
    assert cfg.syncs_batchnorm(cuda, 2) and not cfg.syncs_batchnorm(cuda, 1)
    with pytest.warns(UserWarning, match="sync_bn=True needs a CUDA GPU"):
        assert not cfg.syncs_batchnorm(cpu, 2)
    cfg.pin_memory = True
    with pytest.warns(UserWarning, match="pin_memory=True needs a CUDA GPU"):
        assert not cfg.pins_memory(cpu)
    for mode in ("reduce-overhead", "max-autotune"):  # Inductor's triton.cudagraphs modes
        cfg.compile = mode
        assert cfg.cuda_graphs(cuda) and not cfg.cuda_graphs(cpu)
    for mode in ("default", "max-autotune-no-cudagraphs"):
        cfg.compile = mode
        assert not cfg.cuda_graphs(cuda)


def test_rank_devices_one_kind_and_each_gpu_once():
    """Checked in the parent with devices as plain values: NCCL runs one rank per GPU, one
    backend serves a group; CPU stand-ins may repeat; torchrun's ranks pick their own."""
    gpu0, gpu1, cpu = torch.device("cuda", 0), torch.device("cuda", 1), torch.device("cpu")
    d2l.check_rank_devices([cpu, cpu])
    d2l.check_rank_devices([gpu0, gpu1])
    d2l.check_rank_devices([gpu0, gpu0], torchrun=True)
    with pytest.raises(ValueError, match="name a GPU twice"):
        d2l.check_rank_devices([gpu0, gpu0])
    with pytest.raises(ValueError, match="mix kinds"):
        d2l.check_rank_devices([gpu0, cpu])
    assert d2l.process_group_device(gpu1) == gpu1
    assert d2l.process_group_device(cpu) is None


def test_under_torchrun_the_batch_is_shared_by_world_size_ranks(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(ValueError, match="batch_size 64 is not a multiple of the 3 ranks"):
        d2l.train(nn.Linear(1, 1), [d2l.cpu()], 64, 0.1, 1)


# ---------------------------------------------------------------- several steps per rank
def sgd_by_hand(net: nn.Module, num_examples: int, world_size: int, batch_size: int, lr: float,
                num_epochs: int, warmup_epochs: float, seed: int = 0) -> nn.Module:
    """``net`` after the steps ``train`` promises, counted by hand: each epoch, rank ``r``
    takes every ``world_size``-th index (from ``r`` on) of ``randperm`` seeded with
    ``seed + epoch``, ``batch_size // world_size`` of them a step; a step follows the mean
    gradient of all ranks' examples, at a rate that warms up linearly over
    ``warmup_epochs`` epochs' steps."""
    net = copy.deepcopy(net)
    images, labels = fashion_mnist.load(True, num_examples=num_examples)
    X = torch.from_numpy(images.copy()).float().div(255).unsqueeze(1)
    y = torch.from_numpy(labels.astype("int64"))
    per_rank = batch_size // world_size
    steps = num_examples // world_size // per_rank
    warmup = max(1, round(warmup_epochs * steps))
    step = 0
    for epoch in range(num_epochs):
        g = torch.Generator()
        g.manual_seed(seed + epoch)
        order = torch.randperm(num_examples, generator=g)
        shares = [order[r::world_size] for r in range(world_size)]
        for k in range(steps):
            batch = torch.cat([s[k * per_rank:(k + 1) * per_rank] for s in shares])
            net.zero_grad()
            nn.CrossEntropyLoss()(net(X[batch]), y[batch]).backward()
            with torch.no_grad():
                for p in net.parameters():
                    p -= lr * min(1.0, (step + 1) / warmup) * p.grad
            step += 1
    return net


def assert_same_weights(net: nn.Module, expected: nn.Module) -> None:
    for p, q in zip(net.parameters(), expected.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


SEVERAL_STEPS = dict(batch_size=64, lr=1.0, num_epochs=2, num_train=128, num_test=64,
                     warmup_epochs=1.0, verbose=False)


def test_two_processes_take_half_the_batch_each_and_reshuffle_every_epoch(fmnist_dir):
    """Two ranks, two steps of 32 examples each per epoch, two epochs, a warm-up over the
    first epoch: the weights are those of the steps counted by hand (a rank that loaded the
    whole batch, kept one epoch's order or skipped the warm-up would end elsewhere)."""
    torch.manual_seed(0)
    net = linear_torch_net()
    expected = sgd_by_hand(net, 128, 2, 64, 1.0, 2, 1.0)
    trained, _ = train_on_two_cpu_processes(net, **SEVERAL_STEPS)
    assert_same_weights(trained, expected)


def test_one_device_with_data_on_device_reshuffles_every_epoch_and_warms_up(fmnist_dir):
    """The device loader on one device: three steps an epoch, a new order each epoch."""
    torch.manual_seed(0)
    net = linear_torch_net()
    expected = sgd_by_hand(net, 96, 1, 32, 1.0, 2, 1.0)
    d2l.train(net, [d2l.cpu()], **(SEVERAL_STEPS | dict(batch_size=32, num_train=96)),
              data_on_device=True)
    assert_same_weights(net, expected)


def test_train_started_by_torchrun_shares_the_batch_over_its_ranks(tmp_path, fmnist_dir):
    """``d2l.train`` in a script that ``torchrun`` starts twice: each rank trains on
    ``devices[LOCAL_RANK]`` with 32 of the 64 examples a step, in one DDP group, and rank 0
    ends with the weights counted by hand."""
    torch.manual_seed(0)
    net = linear_torch_net()
    torch.save(net, tmp_path / "initial.pt")
    expected = sgd_by_hand(net, 128, 2, 64, 1.0, 2, 1.0)
    (tmp_path / "script.py").write_text(textwrap.dedent(f"""
        import os
        import sys

        import torch

        sys.path.insert(0, {str(TESTS)!r})
        from d2l_ext import torch as d2l

        net = torch.load("initial.pt", weights_only=False)
        d2l.train(net, [d2l.cpu()], **{SEVERAL_STEPS!r})
        if os.environ["RANK"] == "0":
            torch.save(net.state_dict(), "trained.pt")
    """), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node=2", "script.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120,
                          env=dict(os.environ, OMP_NUM_THREADS="1",
                                   D2L_DATA_DIR=str(fmnist_dir)))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    net.load_state_dict(torch.load(tmp_path / "trained.pt"))
    assert_same_weights(net, expected)


def test_every_timed_epoch_starts_and_ends_with_a_barrier(fmnist_dir, monkeypatch,
                                                         timer_events):
    """The timer starts right after a barrier and stops right after another (on a GPU the
    epoch would otherwise time the queueing, not the work)."""
    events = timer_events(d2l)
    monkeypatch.setattr(d2l, "synchronize", lambda device=None: events.append("barrier"))
    d2l.train(linear_torch_net(), [d2l.cpu()], 32, 0.1, 2, num_train=64, num_test=32,
              verbose=False)
    assert events == ["barrier", "start", "barrier", "stop"] * 2


def test_train_defaults_are_pinned_and_its_config_shares_them():
    """d2l.train's defaults are the book's documented behaviour (d2l's loop, plus a one-epoch
    warm-up): changing one must fail here; the switches' object (_config, which the speed
    ladder builds its rungs with) has the same defaults."""
    import inspect

    defaults = {k: p.default for k, p in inspect.signature(d2l.train).parameters.items()
                if p.default is not p.empty}
    assert defaults == {
        "num_epochs": 10, "warmup_epochs": 1.0, "num_train": None, "num_test": None,
        "num_workers": 0, "root": None, "sync_bn": False, "seed": 0, "timeout": 300.0,
        "verbose": True, "pin_memory": None, "persistent_workers": True,
        "data_on_device": False, "channels_last": False, "amp": None, "compile": None,
        "fused": False, "cudnn_benchmark": False, "tf32": False, "schedule": "constant",
        "label_smoothing": 0.0, "optimizer": "sgd", "momentum": 0.0, "weight_decay": 0.0,
        "drop_last": None, "capture_step": False}
    config = {k: p.default for k, p in inspect.signature(d2l._config).parameters.items()
              if p.default is not p.empty}
    assert {k: v for k, v in defaults.items() if k != "verbose"} == {
        k: v for k, v in config.items() if k != "ranks"}
