"""The fast path's switches (d2l_ext.tuning and d2l.train's keywords): correct, not fast.

Speed is measured by benchmarks/speed_ladder.py, never here.
"""

from __future__ import annotations

import copy
import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils import data

from d2l_ext import fashion_mnist, tuning
from d2l_ext import torch as d2l
from d2l_ext import torch as d2l_torch  # its private loaders, tested directly
from d2l_ext.torch import FashionMNIST
from tests.nets import linear_torch_net, tiny_torch_cnn
from tests.test_torch import full_batch_sgd_step, train_on_two_cpu_processes

CPU = torch.device("cpu")


def fake_images(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` 28x28 uint8 images whose first pixel is their index (mod 256), and labels."""
    images = np.zeros((n, 28, 28), dtype=np.uint8)
    images[:, 0, 0] = np.arange(n) % 256
    return images, np.arange(n) % 10


def epoch_indices(loader: tuning.DeviceLoader) -> list[int]:
    """The example indices a loader yields in one epoch (read back from the labels)."""
    loader.labels = torch.arange(len(loader.labels))
    return [i for _, y in loader for i in y.tolist()]


# ---------------------------------------------------------------- DeviceLoader
@pytest.mark.parametrize("n, batch_size", [(100, 32), (64, 64), (10, 3)])
def test_device_loader_yields_every_example_once_per_epoch(n, batch_size):
    loader = tuning.DeviceLoader(*fake_images(n), batch_size, CPU, seed=1)
    orders = []
    for epoch in range(3):
        loader.set_epoch(epoch)
        order = epoch_indices(loader)
        assert sorted(order) == list(range(n))
        assert len(loader) == math.ceil(n / batch_size)
        orders.append(order)
    assert orders[0] != orders[1] != orders[2]  # reshuffled every epoch
    loader.set_epoch(1)
    assert epoch_indices(loader) == orders[1]  # ...reproducibly
    assert epoch_indices(tuning.DeviceLoader(*fake_images(n), batch_size, CPU, seed=2)) != \
        orders[0]


@pytest.mark.parametrize("n, world_size", [(100, 2), (101, 2), (10, 3), (7, 4)])
def test_device_loader_ranks_take_what_distributed_sampler_gives(n, world_size):
    images, labels = fake_images(n)
    covered = set()
    for rank in range(world_size):
        sampler = data.distributed.DistributedSampler(range(n), world_size, rank, seed=5)
        loader = tuning.DeviceLoader(images, labels, 4, CPU, rank=rank, world_size=world_size,
                                     seed=5)
        for epoch in (0, 3):
            sampler.set_epoch(epoch)
            loader.set_epoch(epoch)
            assert epoch_indices(loader) == list(sampler)
        assert len(loader) == math.ceil(len(sampler) / 4)
        covered |= set(epoch_indices(loader))
    assert covered == set(range(n))


def test_device_loader_without_shuffle_slices_ranks_in_order():
    images, labels = fake_images(10)
    loader = tuning.DeviceLoader(images, labels, 2, CPU, shuffle=False, rank=1, world_size=3)
    assert epoch_indices(loader) == [1, 4, 7]
    assert len(loader) == 2


def test_device_loader_batches_match_the_dataset(fmnist_dir):
    """Same images and labels as the DataLoader's dataset: float (b, 1, 28, 28) in [0, 1]."""
    dataset = FashionMNIST(True, num_examples=50)
    loader = tuning.DeviceLoader(*fashion_mnist.load(True, num_examples=50), 16, CPU,
                                 shuffle=False)
    X, y = next(iter(loader))
    assert X.shape == (16, 1, 28, 28) and X.dtype == torch.float32 and y.dtype == torch.int64
    assert loader.images.dtype == torch.uint8  # kept as bytes; floats only a batch at a time
    expected = torch.stack([dataset[i][0] for i in range(16)])
    torch.testing.assert_close(X, expected)
    assert y.tolist() == [int(dataset[i][1]) for i in range(16)]


@pytest.mark.parametrize("n, batch_size, shuffle", [(10, 3, True), (10, 3, False),
                                                    (12, 4, True), (2, 3, True)])
def test_device_loader_drop_last_keeps_full_batches_only(n, batch_size, shuffle):
    loader = tuning.DeviceLoader(*fake_images(n), batch_size, CPU, shuffle=shuffle,
                                 drop_last=True)
    sizes = [len(y) for _, y in loader]
    assert sizes == [batch_size] * (n // batch_size) and len(loader) == n // batch_size
    kept = epoch_indices(loader)
    assert len(set(kept)) == len(kept) == n - n % batch_size
    if not shuffle:  # the last examples are the ones left out
        assert kept == list(range(n - n % batch_size))


def test_device_loader_channels_last():
    loader = tuning.DeviceLoader(*fake_images(8), 4, CPU, memory_format=torch.channels_last)
    X, _ = next(iter(loader))
    assert X.is_contiguous(memory_format=torch.channels_last)


def test_device_loader_errors():
    with pytest.raises(ValueError, match="batch_size must be positive"):
        tuning.DeviceLoader(*fake_images(4), 0, CPU)
    with pytest.raises(ValueError, match="rank 2 is not in range"):
        tuning.DeviceLoader(*fake_images(4), 2, CPU, rank=2, world_size=2)
    with pytest.raises(ValueError, match="4 images but 3 labels"):
        tuning.DeviceLoader(fake_images(4)[0], np.zeros(3), 2, CPU)


# ---------------------------------------------------------------- schedules
def test_constant_schedule_is_the_warm_up_train_always_had():
    f = tuning.lr_lambda("constant", 10, 100)
    assert [f(s) for s in range(12)] == [min(1.0, (s + 1) / 10) for s in range(12)]
    assert tuning.lr_lambda("constant", 0, 100)(0) == 1.0  # no warm-up


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_decaying_schedules_warm_up_then_fall_to_zero(schedule):
    f = tuning.lr_lambda(schedule, 10, 100)
    factors = [f(s) for s in range(100)]
    assert factors[9] == 1.0 and factors[0] == pytest.approx(0.1)
    assert all(a <= b for a, b in zip(factors[:10], factors[1:10]))
    assert all(a >= b for a, b in zip(factors[9:], factors[10:]))
    assert factors[-1] > 0  # every step trains
    assert f(100) == pytest.approx(0.0, abs=1e-12)  # 0 one step past the last
    assert f(55) == pytest.approx(0.5, abs=0.02)  # half-way down


# ---------------------------------------------------------------- LAMB
def test_lamb_step_by_hand():
    """One step: Adam's bias-corrected direction plus decay, scaled by ||w|| / ||u||."""
    w = nn.Parameter(torch.tensor([3.0, 4.0]))
    w.grad = torch.tensor([0.5, -1.0])
    opt = tuning.LAMB([w], lr=0.1, betas=(0.9, 0.99), eps=0.0, weight_decay=0.5)
    opt.step()
    u = torch.sign(torch.tensor([0.5, -1.0])) + 0.5 * torch.tensor([3.0, 4.0])  # m/sqrt(v) = sign
    expected = torch.tensor([3.0, 4.0]) - 0.1 * (5.0 / u.norm()) * u
    torch.testing.assert_close(w.detach(), expected)


def test_lamb_trust_ratio_is_one_for_zero_weights():
    w = nn.Parameter(torch.zeros(3))
    w.grad = torch.tensor([1.0, -2.0, 0.5])
    tuning.LAMB([w], lr=0.1, eps=0.0).step()
    torch.testing.assert_close(w.detach(), -0.1 * torch.tensor([1.0, -1.0, 1.0]))


def test_lamb_fits_a_least_squares_problem():
    torch.manual_seed(0)
    X, w_true = torch.randn(256, 8), torch.randn(8, 1)
    y = X @ w_true
    model = nn.Linear(8, 1)
    opt = tuning.LAMB(model.parameters(), lr=0.05)
    losses = []
    for _ in range(300):
        opt.zero_grad()
        loss = ((model(X) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] / 100


def test_lamb_rejects_a_bad_rate():
    with pytest.raises(ValueError, match="lr must be positive"):
        tuning.LAMB([nn.Parameter(torch.zeros(1))], lr=0)


# ---------------------------------------------------------------- switches on a CPU
def test_misspelt_switches_name_the_choices():
    with pytest.raises(ValueError, match=r"amp='fp32' is not one of None, 'bf16', 'fp16'"):
        d2l.train(tiny_torch_cnn(), [d2l.cpu()], 64, 0.1, amp="fp32")
    with pytest.raises(ValueError, match="compile='fast' is not one of"):
        d2l.train(tiny_torch_cnn(), [d2l.cpu()], 64, 0.1, compile="fast")
    with pytest.raises(ValueError, match="schedule='step' is not one of"):
        d2l.train(tiny_torch_cnn(), [d2l.cpu()], 64, 0.1, schedule="step")
    with pytest.raises(ValueError, match="optimizer='adam' is not one of"):
        d2l.train(tiny_torch_cnn(), [d2l.cpu()], 64, 0.1, optimizer="adam")
    with pytest.raises(ValueError, match="options of optimizer='sgd'"):
        d2l.train(tiny_torch_cnn(), [d2l.cpu()], 64, 0.1, optimizer="lamb", fused=True)


def test_cuda_only_flags_warn_on_cpu_and_are_restored():
    before = torch.backends.cudnn.benchmark, tuning.matmul_precision()
    with pytest.warns(UserWarning, match="cudnn_benchmark=True needs a CUDA GPU"), \
            pytest.warns(UserWarning, match="tf32=True needs a CUDA GPU"):
        with tuning.backend_flags(CPU, cudnn_benchmark=True, tf32=True):
            assert tuning.matmul_precision() == before[1]
    assert (torch.backends.cudnn.benchmark, tuning.matmul_precision()) == before


def test_flags_are_restored_when_the_run_fails(monkeypatch):
    monkeypatch.setattr(tuning, "cuda_only", lambda *args, **kwargs: True)
    before = torch.backends.cudnn.benchmark, tuning.matmul_precision()
    with pytest.raises(RuntimeError, match="boom"):
        with tuning.backend_flags(CPU, cudnn_benchmark=True, tf32=True):
            assert torch.backends.cudnn.benchmark
            assert tuning.matmul_precision() in ("tf32", "high")
            raise RuntimeError("boom")
    assert (torch.backends.cudnn.benchmark, tuning.matmul_precision()) == before


def test_tf32_keeps_the_old_and_the_new_switches_consistent(monkeypatch):
    """tf32=True goes through set_float32_matmul_precision("high"), which sets the old value
    and PyTorch 2.9+'s per-backend switches together, so that the old getter (which Inductor
    reads) keeps working; everything is restored afterwards."""
    monkeypatch.setattr(tuning, "cuda_only", lambda *args, **kwargs: True)
    before = torch.get_float32_matmul_precision()
    with tuning.backend_flags(CPU, cudnn_benchmark=False, tf32=True):
        assert torch.get_float32_matmul_precision() == "high"  # does not raise
        if tuning.new_tf32_api():
            assert torch.backends.cuda.matmul.fp32_precision == "tf32"
    assert torch.get_float32_matmul_precision() == before
    if tuning.new_tf32_api():
        assert torch.backends.cuda.matmul.fp32_precision != "tf32"


def test_reduce_overhead_on_cpu_warns_and_compiles_default(monkeypatch):
    modes = []
    monkeypatch.setattr(torch, "compile",
                        lambda model, mode, dynamic: modes.append((mode, dynamic)) or model)
    net = nn.Linear(2, 2)
    with pytest.warns(UserWarning, match="CUDA GPU; on cpu it compiles as compile=\"default\""):
        assert tuning.compile_model(net, "reduce-overhead", CPU) is net
    assert tuning.compile_model(net, None, CPU) is net
    assert modes == [("default", False)]  # static shapes: never a symbolic batch


def test_grad_scaler_only_for_fp16():
    assert tuning.grad_scaler(CPU, "fp16").is_enabled()
    assert not tuning.grad_scaler(CPU, "bf16").is_enabled()
    assert not tuning.grad_scaler(CPU, None).is_enabled()


def test_pin_memory_on_cpu_warns(fmnist_dir):
    with pytest.warns(UserWarning, match="pin_memory=True needs a CUDA GPU"):
        d2l.train(linear_torch_net(), [d2l.cpu()], 64, 0.1, 1, num_train=64, num_test=64,
                  pin_memory=True, verbose=False)


# ---------------------------------------------------------------- same outputs, fixed batch
@pytest.fixture(scope="module")
def fixed_batch(fmnist_dir):
    torch.manual_seed(0)
    net = d2l.resnet18(10).eval()
    images, _ = fashion_mnist.load(False, num_examples=8)
    X = torch.from_numpy(images.copy()).float().div(255).unsqueeze(1)
    with torch.no_grad():
        return net, X, net(X)


@pytest.mark.parametrize("switch, tolerance", [
    ("channels_last", 1e-4), ("bf16", 0.1), ("fp16", 0.02)])
def test_switches_give_outputs_close_to_the_plain_run(fixed_batch, switch, tolerance):
    """ResNet-18's logits on eight test images, relative to their scale."""
    net, X, expected = fixed_batch
    net = copy.deepcopy(net)
    amp = switch if switch in tuning.AMP_DTYPES else None
    if switch == "channels_last":
        net, X = net.to(memory_format=torch.channels_last), X.to(
            memory_format=torch.channels_last)
    with torch.no_grad(), tuning.autocast(CPU, amp):
        y = net(X)
    assert y.dtype == (tuning.AMP_DTYPES[amp] if amp else torch.float32)
    error = (y.float() - expected).abs().max() / expected.abs().max()
    assert error < tolerance


def test_compiled_model_gives_the_plain_outputs():
    torch.manual_seed(0)
    net = tiny_torch_cnn().eval()
    X = torch.rand(16, 1, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(tuning.compile_model(net, "default", CPU)(X), net(X),
                                   rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- runs that learn
SWITCHES = {
    "data on the device": dict(data_on_device=True),
    "channels_last + bf16": dict(channels_last=True, amp="bf16"),
    "fp16 + gradient scaler": dict(amp="fp16"),
    "fused SGD, momentum, cosine": dict(fused=True, momentum=0.9, schedule="cosine",
                                        lr=0.05),
    "LAMB, linear, label smoothing": dict(optimizer="lamb", lr=0.01, schedule="linear",
                                          label_smoothing=0.1),
}


@pytest.mark.usefixtures("fmnist_dir")
@pytest.mark.parametrize("name", SWITCHES)
def test_runs_with_switches_learn(name):
    kwargs = dict(SWITCHES[name])
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none of these needs a GPU: no fallback warnings
        result = d2l.train(tiny_torch_cnn(), [d2l.cpu()], batch_size=64, lr=kwargs.pop("lr", 0.5),
                           num_epochs=3, num_train=1024, num_test=512, verbose=False, **kwargs)
    assert result.train_loss[-1] < result.train_loss[0]
    assert result.test_acc[-1] > 0.3  # chance is 0.1


@pytest.mark.parametrize("data_on_device", [False, True])
@pytest.mark.parametrize("compile, drop_last, drops", [
    (None, None, False), ("default", None, True), ("default", False, False), (None, True, True)])
def test_training_loaders_drop_the_last_batch_under_compile(fmnist_dir, data_on_device, compile,
                                                           drop_last, drops):
    """100 images in batches of 32: three full batches and one of 4, which a compiled model
    would see as a new shape. The test loader always keeps every example."""
    cfg = d2l_torch._Config(32, 0.1, 1, 0.0, 100, 50, 0, None, False, 0, 60.0,
                            data_on_device=data_on_device, compile=compile, drop_last=drop_last)
    train_iter, test_iter = d2l_torch._loaders(0, 1, CPU, cfg, torch.contiguous_format)
    assert [len(y) for _, y in train_iter] == ([32] * 3 if drops else [32] * 3 + [4])
    assert len(train_iter) == (3 if drops else 4)
    assert sum(len(y) for _, y in test_iter) == 50


def test_compiled_training_sees_one_batch_shape(fmnist_dir):
    """Under compile the last partial batch is left out: one graph, no recompilation, and
    the epoch trains on the full batches only (960 of 1,000 images)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warnings on a CPU
        # torch's own modules, imported by the first compile of a process, warn about
        # torch.jit's deprecation: not a fallback, and only when this test runs first
        warnings.filterwarnings("ignore", r".*torch\.jit\.", DeprecationWarning)
        result = d2l.train(tiny_torch_cnn(), [d2l.cpu()], batch_size=64, lr=0.5, num_epochs=3,
                           num_train=1000, num_test=512, compile="default", verbose=False)
    assert counters["stats"]["unique_graphs"] == 1
    seen = [round(s * ips) for s, ips in zip(result.epoch_seconds, result.images_per_second)]
    assert seen == [960] * 3
    assert result.train_loss[-1] < result.train_loss[0]
    assert result.test_acc[-1] > 0.3  # chance is 0.1


def test_drop_last_with_too_few_examples_is_a_clear_error(fmnist_dir):
    with pytest.raises(ValueError, match="no full batch of 64"):
        d2l.train(linear_torch_net(), [d2l.cpu()], 64, 0.1, 1, num_train=50, num_test=50,
                  drop_last=True, verbose=False)


def test_data_on_device_one_step_is_the_full_batch_step(fmnist_dir):
    """The device loader on two DDP ranks: one step over the slice, as with the DataLoader."""
    torch.manual_seed(0)
    net = linear_torch_net()
    expected = full_batch_sgd_step(net, 64, lr=1.0)
    one = copy.deepcopy(net)
    d2l.train(one, [d2l.cpu()], 64, 1.0, 1, num_train=64, num_test=64, data_on_device=True,
              verbose=False)
    two, _ = train_on_two_cpu_processes(net, batch_size=64, lr=1.0, num_epochs=1, num_train=64,
                                        num_test=64, data_on_device=True, verbose=False)
    for trained in (one, two):
        for p, q in zip(trained.parameters(), expected.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
