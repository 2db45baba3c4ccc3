"""d2l_ext.breakdown: operator names sorted into kinds, and the three readers."""

import os
import time

import pytest
import torch
from torch import nn

from d2l_ext import breakdown, gputrace


@pytest.mark.parametrize("name, kind", [
    # PyTorch on a CPU, on a GPU, and autograd's nodes
    ("aten::mkldnn_convolution", "matmul"), ("aten::convolution_backward", "matmul"),
    ("aten::cudnn_convolution_backward_weight", "matmul"), ("aten::addmm", "matmul"),
    ("aten::mm", "matmul"), ("aten::bmm", "matmul"), ("aten::linear", "matmul"),
    ("autograd::engine::evaluate_function: ConvolutionBackward0", "other"),
    ("aten::native_batch_norm_backward", "elementwise"), ("aten::cudnn_batch_norm", "elementwise"),
    ("aten::relu_", "elementwise"), ("aten::clamp_min", "elementwise"),
    ("aten::threshold_backward", "elementwise"), ("aten::add_", "elementwise"),
    ("aten::max_pool2d_with_indices", "elementwise"), ("aten::mean", "elementwise"),
    ("Optimizer.step#SGD.step", "optimizer"), ("Optimizer.zero_grad#SGD.zero_grad", "optimizer"),
    # MXNet
    ("Convolution", "matmul"), ("_backward_Convolution", "matmul"),
    ("FullyConnected", "matmul"), ("BatchNorm", "elementwise"),
    ("_backward_npi_broadcast_add", "elementwise"), ("_npx_relu", "elementwise"),
    ("Pooling", "elementwise"), ("sgd_update", "optimizer"), ("multi_sgd_mom_update", "optimizer"),
    ("multi_sgd_update", "optimizer"), ("aten::_batch_norm_with_update", "elementwise"),
    # names that say nothing
    ("aten::empty", None), ("aten::copy_", None), ("aten::nll_loss_forward", None),
    ("DeleteVariable", None), ("aten::summary", None),
])
def test_kind_of(name, kind):
    assert breakdown.kind_of(name) == kind


def test_kind_within_takes_the_innermost_name_that_says_and_the_optimizer_first():
    assert breakdown.kind_within(["aten::empty", "aten::mkldnn_convolution",
                                  "aten::convolution"]) == "matmul"
    assert breakdown.kind_within(["aten::add_", "Optimizer.step#SGD.step"]) == "optimizer"
    assert breakdown.kind_within(["aten::empty", "aten::copy_"]) == "other"
    assert breakdown.kind_within(["aten::relu", "aten::conv2d"]) == "elementwise"
    assert breakdown.kind_within(["aten::empty",
                                  "autograd::engine::evaluate_function: MmBackward0"]) == "other"
    assert breakdown.kind_within(["aten::empty", "aten::mm",
                                  "autograd::engine::evaluate_function: MmBackward0"]) == "matmul"


def test_tally_is_per_step_and_keeps_each_operator():
    result = breakdown._tally([(["aten::mm"], 0.4), (["aten::add_", "Optimizer.step"], 0.2),
                               (["aten::empty", "aten::mm"], 0.2), (["aten::copy_"], 0.0)],
                              steps=2, wall=1.0, where="cpu")
    assert result.seconds == pytest.approx({"matmul": 0.3, "elementwise": 0.0, "optimizer": 0.1,
                                            "other": 0.0})
    assert result.wall == 0.5 and result.total == pytest.approx(0.4)
    assert result.outside == pytest.approx(0.1)
    assert result.share("matmul") == pytest.approx(0.75)
    assert result.top("matmul") == [("aten::mm", 0.2), ("aten::empty", 0.1)]
    assert result.top("optimizer") == [("aten::add_", 0.1)]
    with pytest.raises(ValueError, match="kind must be one of"):
        result.share("convolutions")
    with pytest.raises(ValueError, match="steps must be at least 1"):
        breakdown._tally([], steps=0, wall=1.0, where="cpu")


def small_step():
    """A training step of a small convolutional network with BatchNorm, on the CPU."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                        nn.Flatten(), nn.Linear(16 * 16 * 16, 10))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    X, y = torch.rand(32, 1, 16, 16), torch.randint(0, 10, (32,))

    def step():
        loss = nn.functional.cross_entropy(net(X), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return step


def test_torch_step_finds_every_kind_of_a_training_step():
    result = breakdown.torch_step(small_step(), "cpu", steps=2)
    assert result.where == "cpu" and result.steps == 2
    assert all(result.seconds[kind] > 0 for kind in ("matmul", "elementwise", "optimizer"))
    assert result.total <= result.wall * 1.05  # self times on one thread fit in the wall time
    assert {name for name, _ in result.top("optimizer", 10)} >= {"aten::add_"}
    # the profiler's step marks hold the time between operators: never counted as one
    assert not any(name.startswith("ProfilerStep") for _, name in result.by_operator)


def test_torch_step_without_an_optimizer_has_no_optimizer_time():
    a = torch.rand(256, 256)
    result = breakdown.torch_step(lambda: a @ a, "cpu", steps=3, warmup=0)
    assert result.seconds["optimizer"] == 0 and result.share("matmul") > 0.9


def test_torch_step_stops_the_clock_before_the_profiler_stops(monkeypatch):
    """The last prof.step() ends the recording (stop_trace: the profiler's shutdown, on a GPU
    the flush of its buffers): a one-off cost that the wall time per step must not hold."""
    original = torch.profiler.profile.step
    ends = []

    def slow_step(self):
        original(self)
        ends.append(time.perf_counter())
        time.sleep(0.2)  # a profiler that takes long to stop or to start a step

    monkeypatch.setattr(torch.profiler.profile, "step", slow_step)
    result = breakdown.torch_step(lambda: None, "cpu", steps=1, warmup=0)
    assert len(ends) == 2  # the profiler's warm-up step, then the recorded one
    assert result.wall < 0.1  # neither prof.step() inside the timed window


def test_torch_step_refuses_a_negative_warmup_and_no_steps():
    with pytest.raises(ValueError, match="warmup"):
        breakdown.torch_step(lambda: None, "cpu", warmup=-1)
    with pytest.raises(ValueError, match="steps must be at least 1"):
        breakdown.torch_step(lambda: None, "cpu", steps=0)


def test_trace_step_adds_up_the_launched_work():
    events = gputrace.load("resnet50_v100_num_workers_4")
    step = next(s for s in gputrace.steps(events) if s.number == 7)
    result = breakdown.trace_step(events, step.start_us, step.end_us)
    launched = gputrace.launches(events, start_us=step.start_us, end_us=step.end_us)
    assert result.total == pytest.approx(sum(link.work.duration_us for link in launched) / 1e6)
    assert result.wall == pytest.approx(step.duration_us / 1e6)
    assert result.outside == pytest.approx(step.idle_us / 1e6)  # the idle time of the step
    assert 0.6 < result.share("matmul") < 0.7  # ResNet-50's convolutions: 67 of 102 ms
    assert result.seconds["optimizer"] > 0
    assert result.top("matmul", 1)[0][0] == "aten::cudnn_convolution_backward_weight"


def test_mxnet_step_sums_the_engines_operators(tmp_path):
    pytest.importorskip("mxnet")
    from mxnet import autograd, gluon, np, npx
    npx.set_np()
    net = gluon.nn.Sequential()
    net.add(gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(10))
    net.initialize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    X, y = np.random.uniform(size=(32, 100)), np.random.randint(0, 10, size=(32,))

    def step():
        with autograd.record():
            loss = loss_fn(net(X), y)
        loss.backward()
        trainer.step(32)

    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = breakdown.mxnet_step(step, steps=2)
    finally:
        os.chdir(here)
    assert result.seconds["matmul"] > 0 and result.seconds["optimizer"] > 0
    assert result.where == "mxnet" and result.total <= result.wall * 2.5
    assert list(tmp_path.iterdir()) == []  # the profiler wrote nothing where the reader is
