"""The speed ladder's logic (d2l_ext.ladder, benchmarks/speed_ladder.py): which switches each
rung runs with, what is kept, how it is counted. Its speed is printed, never asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from d2l_ext import ladder
from d2l_ext import torch as d2l
from d2l_ext.utils import TrainResult
from tests.nets import tiny_torch_cnn

ROOT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")


def test_rungs_add_their_switches_to_those_below():
    rungs = ladder.LADDER
    first = ladder.options(rungs, 0)
    assert first == ladder.BASE and first["batch_size"] == 256 and first["lr"] == 0.1
    top = ladder.options(rungs, len(rungs) - 1)
    for rung in rungs:
        for key in rung.change:
            assert key in top
    assert top["compile"] == "reduce-overhead"  # a later rung overrides an earlier one


def test_systems_rungs_keep_the_work_fixed():
    """Epochs are fixed by run(); batch, rate and schedule change only on algorithmic rungs."""
    work = ("batch_size", "lr", "warmup_epochs", "schedule", "label_smoothing", "optimizer",
            "momentum", "weight_decay")
    kinds = [r.kind for r in ladder.LADDER]
    assert kinds[0] == "reference"
    assert kinds == sorted(kinds, key=["reference", "systems", "algorithmic"].index)
    for rung in ladder.LADDER:
        if rung.kind != "algorithmic":
            assert not set(rung.change) & set(work), rung.name


def test_cuda_only_rungs_are_skipped_on_a_cpu():
    on_cpu = ladder.applicable(ladder.LADDER, CPU)
    assert all(not r.needs_cuda for r in on_cpu)
    assert {r.name for r in on_cpu} >= {"d2l's loop", "+ channels_last", "+ bf16 autocast",
                                         "+ torch.compile"}
    assert ladder.applicable(ladder.LADDER, torch.device("cuda")) == ladder.LADDER


def test_a_rung_that_does_not_pay_is_dropped_from_the_next(monkeypatch, fmnist_dir):
    """The second systems rung is slower: reported, then left out of the third."""
    seconds = {"ref": 4.0, "a": 2.0, "b": 3.0, "c": 1.0}
    calls = []

    def fake_train(net, devices, num_epochs, **kwargs):
        name = kwargs.pop("tag")
        calls.append((name, kwargs))
        result = TrainResult(["cpu"], kwargs["batch_size"], kwargs["lr"])
        result.epoch_seconds = [9.0] + [seconds[name]] * (num_epochs - 1)
        result.test_acc = [0.5] * num_epochs
        return result

    def fake_loop(net, device, batch_size, lr, num_epochs, num_train, num_test):
        return fake_train(net, [device], num_epochs, tag="ref", batch_size=batch_size, lr=lr)

    monkeypatch.setattr(ladder.d2l, "train", fake_train)
    monkeypatch.setattr(ladder, "d2l_loop", fake_loop)
    monkeypatch.setattr(ladder, "matmul_flops_per_second", lambda *a, **k: 1e9)
    rungs = [ladder.Rung("ref", "reference"),
             ladder.Rung("a", "systems", dict(tag="a")),
             ladder.Rung("b", "systems", dict(tag="b", channels_last=True)),
             ladder.Rung("c", "systems", dict(tag="c", fused=True))]
    results = ladder.run(rungs, CPU, num_epochs=4, num_train=64, probe=False, verbose=False)
    assert [r.kept for r in results] == [True, True, False, True]
    assert "channels_last" not in calls[-1][1] and calls[-1][1]["fused"]
    rows = ladder.rows(results)
    assert [row[ladder.COLUMNS.index("speed-up")] for row in rows] == [1.0, 2.0, 4 / 3, 4.0]
    assert [row[ladder.COLUMNS.index("s/epoch")] for row in rows] == [4.0, 2.0, 3.0, 1.0]
    text = ladder.table(results)
    assert text.splitlines()[0].split()[:3] == ["rung", "kind", "kept"]
    assert len(text.splitlines()) == 5


@pytest.mark.parametrize("growth, mfu, bound", [
    (None, 0.9, "-"), (1.2, 0.1, "overhead"), (1.9, 0.6, "overhead"), (3.8, 0.1, "memory"),
    (3.9, 0.5, "compute")])
def test_bound_follows_the_cost_model(growth, mfu, bound):
    result = ladder.RungResult("r", "systems", {}, [1.0, 1.0], 0.9, 100, mfu * 1e9, 1e9,
                               batch_growth=growth)
    assert result.mfu == pytest.approx(mfu)
    assert result.bound == bound


def test_batch_growth_times_a_quarter_and_the_full_batch(monkeypatch):
    sizes = []

    def fake_train(net, devices, num_epochs, batch_size, num_train, **kwargs):
        sizes.append((batch_size, num_train))
        result = TrainResult(["cpu"], batch_size, 0.1)
        result.epoch_seconds = [10.0, 1.0 + batch_size / 64]  # 1 s fixed + 1 s per 64 images
        return result

    monkeypatch.setattr(ladder.d2l, "train", fake_train)
    growth = ladder.batch_growth(dict(ladder.BASE), CPU, steps=5)
    assert sizes == [(64, 320), (256, 1280)]
    assert growth == pytest.approx(5 / 2)


def test_at_least_three_timed_epochs():
    with pytest.raises(ValueError, match="num_epochs >= 4"):
        ladder.run(ladder.LADDER, CPU, num_epochs=3)


def test_flops_of_softmax_regression():
    """Forward 2*784*10 per image; backward only the weight gradient (the input needs none)."""
    net = nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    assert ladder.train_flops_per_image(net) == 2 * 2 * 784 * 10


def test_flops_of_resnet18_are_about_three_forward_passes():
    from torch.utils.flop_counter import FlopCounterMode

    net = d2l.resnet18(10)
    with FlopCounterMode(display=False) as counter:
        net(torch.zeros(2, 1, 28, 28))
    forward = counter.get_total_flops() / 2
    assert 2.5 * forward < ladder.train_flops_per_image(net) <= 3 * forward


def test_matmul_rate_is_positive():
    assert ladder.matmul_flops_per_second(CPU, n=64, seconds=0.01) > 0


def test_d2l_loop_learns(fmnist_dir):
    torch.manual_seed(0)
    result = ladder.d2l_loop(tiny_torch_cnn(), CPU, 64, 0.1, 3, num_train=1024, num_test=512)
    assert len(result.epoch_seconds) == len(result.test_acc) == 3
    assert result.test_acc[-1] > 0.3  # chance is 0.1


def test_make_net_is_the_same_for_every_rung():
    a, b = ladder.make_net(), ladder.make_net()
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    assert a[0].weight.std().item() == pytest.approx(0.01, rel=0.2)  # d2l's N(0, 0.01) init


def test_benchmark_lists_its_rungs():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "speed_ladder.py"),
                           "--list"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(done.stdout.splitlines()) == len(ladder.LADDER)
    assert "(CUDA only)" in done.stdout


def test_benchmark_rejects_unknown_rungs():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "speed_ladder.py"),
                           "--rungs", "0,99"], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "comma-separated indices from 0 to" in done.stderr


def test_benchmark_writes_its_json(tmp_path, fmnist_dir):
    out = tmp_path / "speed_ladder.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "speed_ladder.py"),
                           "--rungs", "0,1", "--num-train", "32", "--num-test", "32",
                           "--device", "cpu", "--no-probe", "--json", str(out)],
                          capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, D2L_SMOKE="1", D2L_DATA_DIR=str(fmnist_dir)))
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["benchmark"] == "speed_ladder" and result["columns"] == ladder.COLUMNS
    assert [row[0] for row in result["rows"]] == ["d2l's loop", "d2l.train"]
    assert result["args"]["epochs"] == 4  # D2L_SMOKE's default
    assert "speed-up" in done.stdout


def test_plot_draws_a_bar_per_rung_and_hatches_the_dropped():
    import matplotlib

    matplotlib.use("Agg")
    results = [ladder.RungResult(name, kind, {}, [9.0, s, s, s], 0.9, 100, 1e9, 1e10, kept=kept)
               for name, kind, s, kept in [("ref", "reference", 4.0, True),
                                           ("a", "systems", 2.0, True),
                                           ("b", "systems", 3.0, False)]]
    ax = ladder.plot(results)
    bars = ax.patches
    assert [b.get_width() for b in bars] == [3.0, 2.0, 4.0]  # first rung on top
    assert [b.get_hatch() for b in bars] == ["//", None, None]
    assert [t.get_text().strip() for t in ax.texts] == ["1.33x", "2.00x", "1.00x"]


def test_mfu_is_against_the_fastest_matmul_for_the_rung(monkeypatch, fmnist_dir):
    """Where bf16 is emulated (slower than fp32), a bf16 rung's peak is fp32's rate."""
    rates = {torch.float32: 2e9, torch.bfloat16: 1e8}
    monkeypatch.setattr(ladder, "matmul_flops_per_second", lambda device, dtype, **k: rates[dtype])

    def fake_train(net, devices, num_epochs, **kwargs):
        result = TrainResult(["cpu"], kwargs["batch_size"], kwargs["lr"])
        result.epoch_seconds, result.test_acc = [1.0] * num_epochs, [0.5] * num_epochs
        return result

    monkeypatch.setattr(ladder.d2l, "train", fake_train)
    rungs = [ladder.Rung("a", "systems"), ladder.Rung("bf16", "systems", dict(amp="bf16"))]
    results = ladder.run(rungs, CPU, num_epochs=4, num_train=64, probe=False, verbose=False)
    assert [r.peak_flops for r in results] == [2e9, 2e9]
