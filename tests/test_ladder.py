"""The speed ladder's logic (d2l_ext.ladder, benchmarks/speed_ladder.py): which switches each
rung runs with, what is kept, how it is counted. Its speed is printed, never asserted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from d2l_ext import ladder
from d2l_ext import torch as d2l
from d2l_ext.i18n import Text
from d2l_ext.utils import Timing, TrainResult
from tests.nets import tiny_torch_cnn

ROOT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")
WORK = ("batch_size", "lr", "warmup_epochs", "schedule", "label_smoothing", "optimizer",
        "momentum", "weight_decay")


def test_rungs_add_their_switches_to_those_below():
    rungs = ladder.LADDER
    first = ladder.options(rungs, 0)
    assert first == ladder.BASE and first["batch_size"] == 256 and first["lr"] == 0.1
    top = ladder.options(rungs, len(rungs) - 1)
    for rung in rungs:
        for key in rung.change:
            assert key in top
    assert top["compile"] == "reduce-overhead"  # a later rung overrides an earlier one
    assert top["bias"] is False and top["fused"] is True


def test_a_smaller_base_batch_scales_the_whole_ladder():
    rungs = ladder.make_ladder(32, 0.0125)
    assert ladder.options(rungs, 1)["batch_size"] == 32  # systems rungs inherit the base
    top = ladder.options(rungs, len(rungs) - 1)
    assert (top["batch_size"], top["lr"]) == (128, 0.05)
    assert rungs[-1].name.startswith("batch 128, lr 0.05,")  # the label says what runs


def test_systems_rungs_keep_the_work_fixed():
    """Epochs are fixed by run(); the reference sets the base batch and rate, and only the
    algorithmic rung changes them afterwards."""
    kinds = [r.kind for r in ladder.LADDER]
    assert kinds[0] == "reference"
    assert kinds == sorted(kinds, key=["reference", "systems", "algorithmic"].index)
    for rung in ladder.LADDER:
        if rung.kind == "systems":
            assert not set(rung.change) & set(WORK), rung.name
    assert set(ladder.LADDER[0].change) == {"batch_size", "lr"}


def test_cuda_only_rungs_are_skipped_on_a_cpu():
    on_cpu = ladder.applicable(ladder.LADDER, CPU)
    assert all(not r.needs_cuda for r in on_cpu)
    assert {r.name for r in on_cpu} >= {"d2l's loop", "+ channels_last", "+ bf16 autocast",
                                         "+ torch.compile", "+ fused SGD",
                                         "+ no bias before BatchNorm"}
    assert ladder.applicable(ladder.LADDER, torch.device("cuda")) == ladder.LADDER


@pytest.mark.parametrize("this, best, droppable, expected", [
    ((3.0, 3.1, 3.2), (2.0, 2.1, 2.2), True, ladder.DROPPED),     # every epoch slower
    ((3.0, 3.1, 3.2), (2.0, 2.1, 2.2), False, ladder.BASE_SLOWER),
    ((2.5, 2.6, 3.0), (2.0, 2.4, 2.6), True, ladder.NO_GAIN),      # slower median, overlap
    ((2.0, 2.4, 2.6), (2.5, 2.6, 3.0), True, ladder.NO_GAIN),      # faster median, overlap
    ((1.0, 1.1, 1.2), (2.0, 2.1, 2.2), True, ladder.FASTER),
])
def test_verdict_compares_ranges_not_medians(this, best, droppable, expected):
    assert ladder.verdict(Timing(this), Timing(best), droppable) == expected


def fake_runs(monkeypatch, seconds: dict, calls: list | None = None, accs: dict | None = None):
    """d2l.train and d2l_loop replaced: each rung's epochs take ``seconds[tag]`` (a list of
    the timed epochs, after a 9 s warm-up)."""
    calls = [] if calls is None else calls

    def fake_train(net, devices, num_epochs, **kwargs):
        name = kwargs.pop("tag", "ref")
        calls.append((name, kwargs, net))
        result = TrainResult(["cpu"], kwargs["batch_size"], kwargs["lr"])
        result.epoch_seconds = [9.0] + list(seconds[name])
        result.test_acc = list((accs or {}).get(name, [0.5] * num_epochs))
        return result

    def fake_loop(net, device, batch_size, lr, num_epochs, num_train, num_test, seed=0):
        return fake_train(net, [device], num_epochs, batch_size=batch_size, lr=lr,
                          num_train=num_train)

    monkeypatch.setattr(ladder.d2l, "train", fake_train)
    monkeypatch.setattr(ladder, "d2l_loop", fake_loop)
    monkeypatch.setattr(ladder, "matmul_flops_per_second", lambda *a, **k: 1e9)
    monkeypatch.setattr(ladder, "train_flops_per_image", lambda net: 1e9)
    return calls


def test_only_a_clearly_slower_rung_is_dropped(monkeypatch, fmnist_dir):
    """b is slower by its median but inside the noise: kept. c is slower in every epoch:
    reported, then left out of d."""
    seconds = {"ref": [4.0] * 3, "a": [1.9, 2.0, 2.1], "b": [2.05, 2.2, 2.3],
               "c": [3.0, 3.1, 3.2], "d": [1.0, 1.1, 1.2]}
    calls = fake_runs(monkeypatch, seconds)
    rungs = [ladder.Rung("ref", "reference", dict(batch_size=8, lr=0.1)),
             ladder.Rung("a", "systems", dict(tag="a")),
             ladder.Rung("b", "systems", dict(tag="b", channels_last=True)),
             ladder.Rung("c", "systems", dict(tag="c", bias=False)),
             ladder.Rung("d", "systems", dict(tag="d", fused=True))]
    results = ladder.run(rungs, CPU, num_epochs=4, num_train=64, verbose=False)
    assert [r.verdict for r in results] == ["", ladder.FASTER, ladder.NO_GAIN, ladder.DROPPED,
                                            ladder.FASTER]
    assert [r.kept for r in results] == [True, True, True, False, True]
    last = calls[-1][1]
    assert last["channels_last"] and last["fused"]  # b kept, d added
    assert "bias" not in last  # the network's bias is the ladder's, not d2l.train's
    assert all(m.bias is not None for m in calls[-1][2].modules()
               if isinstance(m, nn.Conv2d))  # c dropped: d trains the network with biases
    assert any(m.bias is None for m in calls[-2][2].modules() if isinstance(m, nn.Conv2d))
    rows = ladder.rows(results)
    assert [row[ladder.COLUMNS.index("speed-up")] for row in rows] == pytest.approx(
        [1.0, 2.0, 4 / 2.2, 4 / 3.1, 4 / 1.1])
    assert [row[ladder.COLUMNS.index("steps")] for row in rows] == [8] * 5  # 64 / 8
    text = ladder.table(results)
    assert text.splitlines()[0].split()[:3] == ["rung", "kind", "verdict"]
    assert len(text.splitlines()) == 6


def test_training_set_is_cut_to_full_batches_of_the_largest_rung(monkeypatch, fmnist_dir):
    calls = fake_runs(monkeypatch, {"ref": [1.0] * 3, "a": [1.0] * 3, "big": [1.0] * 3})
    rungs = [ladder.Rung("ref", "reference", dict(batch_size=8, lr=0.1)),
             ladder.Rung("a", "systems", dict(tag="a")),
             ladder.Rung("big", "algorithmic", dict(tag="big", batch_size=32))]
    results = ladder.run(rungs, CPU, num_epochs=4, num_train=100, verbose=False)
    assert [c[1]["num_train"] for c in calls] == [96, 96, 96]
    assert [r.steps for r in results] == [12, 12, 3]
    assert results[-1].verdict == "changes the work"
    with pytest.raises(ValueError, match="fewer than the largest batch"):
        ladder.run(rungs, CPU, num_epochs=4, num_train=20, verbose=False)


def test_recheck_runs_the_first_systems_rung_again(monkeypatch, fmnist_dir):
    calls = fake_runs(monkeypatch, {"ref": [4.0] * 3, "a": [2.0] * 3, "b": [1.0] * 3})
    rungs = [ladder.Rung("ref", "reference", dict(batch_size=8, lr=0.1)),
             ladder.Rung("a", "systems", dict(tag="a")),
             ladder.Rung("b", "systems", dict(tag="b", fused=True))]
    results = ladder.run(rungs, CPU, num_epochs=4, num_train=64, recheck=True, verbose=False)
    assert [(r.name, r.kind) for r in results][-1] == ("a, again", "check")
    assert calls[-1][0] == "a" and "fused" not in calls[-1][1]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_each_rung_prints_its_verdict_but_the_first(monkeypatch, fmnist_dir, capsys, lang):
    """The first rung is judged against nothing: its line has no verdict, not a bare "–"."""
    fake_runs(monkeypatch, {"ref": [4.0] * 3, "a": [2.0] * 3})
    monkeypatch.setenv("D2L_LANG", lang)
    rungs = [ladder.Rung("ref", "reference", dict(batch_size=8, lr=0.1), zh="参照"),
             ladder.Rung("a", "systems", dict(tag="a"), zh="甲")]
    ladder.run(rungs, CPU, num_epochs=4, num_train=64)
    first, second = capsys.readouterr().out.splitlines()
    assert first.endswith("0.500")  # the test accuracy, then nothing
    assert second.endswith("(faster)" if lang == "en" else "（更快）")


def test_time_to_an_accuracy_counts_every_epoch_until_it_is_reached():
    result = ladder.RungResult("r", "algorithmic", {"batch_size": 8}, [5.0, 1.0, 2.0, 3.0],
                               [0.2, 0.5, 0.7, 0.6], 64, 1e9, 1e9)
    assert result.time_to(0.5) == 6.0
    assert result.time_to(0.7) == 8.0
    assert result.time_to(0.2) == 5.0
    assert result.time_to(0.71) is None
    assert result.seconds == 2.0 and result.test_acc == 0.6


def test_at_least_three_timed_epochs():
    with pytest.raises(ValueError, match="num_epochs >= 4"):
        ladder.run(ladder.LADDER, CPU, num_epochs=3)


@pytest.mark.parametrize("device_type, capability, hip, expected", [
    ("cpu", None, False, ["bf16"]),
    ("cuda", (9, 0), False, ["bf16", "fp16"]),  # H100
    ("cuda", (8, 0), False, ["bf16", "fp16"]),  # A100: the first with bf16 tensor cores
    ("cuda", (7, 5), False, ["fp16"]),          # T4: bf16 only emulated
    ("cuda", (7, 0), False, ["fp16"]),          # V100
    ("cuda", (9, 4), True, ["bf16", "fp16"]),   # ROCm: bf16, as torch.cuda says
])
def test_amp_formats_follow_the_gpus_capability(device_type, capability, hip, expected):
    assert ladder.amp_formats(device_type, capability, hip=hip) == expected


def test_amp_candidates_ask_the_gpu_they_are_given(monkeypatch):
    """Two different GPUs: cuda:1's answer is cuda:1's, not the current GPU's (cuda:0)."""
    capabilities = {0: (7, 5), 1: (9, 0)}
    monkeypatch.setattr(ladder.d2l, "num_gpus", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability",
                        lambda device=None: capabilities[torch.device(device).index])
    monkeypatch.setattr(torch.version, "hip", None)
    assert ladder.amp_candidates("cuda:1") == ["bf16", "fp16"]
    assert ladder.amp_candidates(torch.device("cuda", 0)) == ["fp16"]
    assert ladder.amp_candidates("cuda") == ["fp16"]  # the current GPU, given its index


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_gpu_asked_for_without_one_fails_early_and_clearly(monkeypatch):
    for call in (lambda: ladder.run(ladder.LADDER, "cuda", num_epochs=4),
                 lambda: ladder.amp_candidates("cuda"),
                 lambda: ladder.amp_step_timings("cuda", 2),
                 lambda: ladder.matmul_flops_per_second("cuda")):
        with pytest.raises(ValueError, match="no CUDA GPU"):
            call()
    monkeypatch.setattr(sys, "argv", ["speed_ladder.py", "--device", "cuda"])
    with pytest.raises(SystemExit, match="--device cuda: .*no CUDA GPU"):
        speed_ladder_script().main()


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


def test_matmul_rate_is_the_best_size_not_the_last(monkeypatch):
    rates = {512: (45e9, 0.001), 1024: (60e9, 0.01), 2048: (55e9, 0.05), 4096: (57e9, 0.4)}
    tried = []

    def fake_rate(n, device, dtype, seconds):
        tried.append(n)
        return rates[n]

    monkeypatch.setattr(ladder, "_matmul_rate", fake_rate)
    assert ladder.matmul_flops_per_second(CPU) == 60e9
    assert tried == [512, 1024, 2048, 4096]


def test_matmul_rate_stops_growing_when_a_product_gets_slow(monkeypatch):
    """One product of 512 takes 0.4 s (emulated bf16): 1024 would take about 3 s."""
    tried = []
    monkeypatch.setattr(ladder, "_matmul_rate",
                        lambda n, *a: tried.append(n) or (1e9, 0.4 * (n / 512) ** 3))
    assert ladder.matmul_flops_per_second(CPU, torch.bfloat16, seconds=0.5) == 1e9
    assert tried == [512]


def test_matmul_rate_is_measured():
    rate = ladder.matmul_flops_per_second(CPU, sizes=(64, 128), seconds=0.01)
    assert 1e6 < rate < 1e14


def test_d2l_dataset_is_the_books_dataset(fmnist_dir):
    """d2l's PIL + ToTensor pipeline gives the same tensors as d2l_ext's dataset."""
    theirs, ours = ladder.D2LFashionMNIST(True, 20), d2l.FashionMNIST(True, num_examples=20)
    for i in (0, 7, 19):
        x, y = theirs[i]
        assert isinstance(y, int) and x.dtype == torch.float32 and x.shape == (1, 28, 28)
        torch.testing.assert_close(x, ours[i][0], rtol=0, atol=0)
        assert y == int(ours[i][1])


def test_d2l_loop_starts_from_the_ladders_weights(fmnist_dir):
    """d2l's loop draws its N(0, 0.01) weights, seeded: those of make_net, whatever the
    random generator's state before."""
    net, expected = ladder.make_net(0), ladder.make_net(0)
    torch.manual_seed(123)
    result = ladder.d2l_loop(net, CPU, 8, 0.1, 0, num_train=8, num_test=8, seed=0)
    assert result.epoch_seconds == []
    for p, q in zip(net.state_dict().values(), expected.state_dict().values()):
        assert torch.equal(p, q)


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


def test_no_bias_before_batchnorm_is_the_same_function():
    """The same weights without the convolutions' biases: BatchNorm (batch statistics)
    subtracts them again, so training-mode outputs agree."""
    full, lean = ladder.make_net(0), ladder.make_net(0, bias=False)
    assert sum(p.numel() for p in lean.parameters()) < sum(p.numel() for p in full.parameters())
    torch.manual_seed(1)
    X = torch.rand(4, 1, 28, 28)
    torch.testing.assert_close(lean.train()(X), full.train()(X), rtol=1e-4, atol=1e-5)


def speed_ladder_script():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import speed_ladder

    return speed_ladder


def test_benchmark_lists_its_rungs(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["speed_ladder.py", "--list", "--batch-size", "32"])
    speed_ladder_script().main()
    out = capsys.readouterr().out
    assert len(out.splitlines()) == len(ladder.LADDER)
    assert "(CUDA only)" in out
    assert "batch 128, lr 0.05," in out  # the rate scaled with the batch


def test_benchmark_rejects_unknown_rungs(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["speed_ladder.py", "--rungs", "0,99"])
    with pytest.raises(SystemExit, match="comma-separated indices from 0 to"):
        speed_ladder_script().main()


def test_benchmark_writes_its_json(tmp_path, monkeypatch, fmnist_dir):
    """The script's own logic, in this process, with the ladder's training replaced (the
    notebook runs the real ladder): smoke defaults, the rungs picked, the JSON written."""
    speed_ladder = speed_ladder_script()
    calls = []

    def fake_run(rungs, device, num_epochs, num_train, num_test, recheck):
        calls.append((list(rungs), device, num_epochs, num_train, num_test, recheck))
        return [ladder.RungResult(r.name, r.kind, ladder.options(rungs, i), [9.0, 1.0, 2.0, 3.0],
                                  [0.5] * 4, num_train, 1e9, 1e10)
                for i, r in enumerate(rungs)]

    out = tmp_path / "speed_ladder.json"
    monkeypatch.setattr(ladder, "run", fake_run)
    monkeypatch.setattr(ladder, "amp_step_timings",  # --amp auto: float32 clearly faster
                        lambda device, batch: {"fp32": Timing((1.0, 1.1)),
                                               "bf16": Timing((5.0, 5.5))})
    monkeypatch.setenv("D2L_SMOKE", "1")
    monkeypatch.setattr(sys, "argv", ["speed_ladder.py", "--rungs", "0,1", "--device", "cpu",
                                      "--no-recheck", "--json", str(out)])
    speed_ladder.main()
    rungs, device, epochs, num_train, num_test, recheck = calls[0]
    assert [r.name for r in rungs][0] == "d2l's loop" and device.type == "cpu"
    assert rungs[1].name.startswith("d2l.train")
    assert (epochs, num_train, num_test, recheck) == (4, 16, 16, False)  # D2L_SMOKE's defaults
    assert rungs[0].change == dict(batch_size=4, lr=0.1 * 4 / 256)  # the rate scaled
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["benchmark"] == "speed_ladder" and result["columns"] == ladder.COLUMNS
    names = [row[0] for row in result["rows"]]
    assert names[0] == "d2l's loop" and names[1].startswith("d2l.train")
    assert result["args"]["epochs"] == 4
    assert [row[3:6] for row in result["rows"]] == [[4, 4, 2.0], [4, 4, 2.0]]  # batch, steps


@pytest.mark.parametrize("fp32, expected", [
    ((1.0, 1.1), ["+ no bias before BatchNorm", "+ fused SGD"]),  # float32 faster: left out
    ((5.0, 5.5), ["+ no bias before BatchNorm", "+ bf16 autocast", "+ fused SGD"]),
])
def test_benchmark_rung_indices_do_not_shift_with_the_measured_format(monkeypatch, fp32,
                                                                        expected):
    """--rungs counts the rungs that --list shows: the autocast rung keeps its index (8) and
    is left out, not shifted into, when --amp auto finds float32 faster."""
    speed_ladder = speed_ladder_script()
    calls = []

    def fake_run(rungs, device, num_epochs, num_train, num_test, recheck):
        calls.append(list(rungs))
        return [ladder.RungResult(r.name, r.kind, {"batch_size": 8}, [1.0] * 4, [0.5] * 4, 64,
                                  1e9, 1e10) for r in rungs]

    monkeypatch.setattr(ladder, "run", fake_run)
    monkeypatch.setattr(ladder, "amp_step_timings",
                        lambda device, batch: {"fp32": Timing(fp32), "bf16": Timing((2.0, 2.2))})
    monkeypatch.setattr(sys, "argv", ["speed_ladder.py", "--rungs", "7,8,9", "--device", "cpu"])
    speed_ladder.main()
    assert [r.name for r in calls[0]] == expected


def test_plot_draws_a_bar_per_rung_and_hatches_the_dropped():
    import matplotlib

    matplotlib.use("Agg")
    results = [ladder.RungResult(Text(name, name), kind, {"batch_size": 8}, [9.0, s, s, s],
                                 [0.9] * 4, 100, 1e9, 1e10, verdict=v)
               for name, kind, s, v in [("ref", "reference", 4.0, ""),
                                        ("a", "systems", 2.0, ladder.FASTER),
                                        ("b", "systems", 3.0, ladder.DROPPED)]]
    ax = ladder.plot(results)
    bars = ax.patches
    assert [b.get_width() for b in bars] == [3.0, 2.0, 4.0]  # first rung on top
    assert [b.get_hatch() for b in bars] == ["//", None, None]
    assert [t.get_text().strip() for t in ax.texts] == ["1.33x", "2.00x", "1.00x"]


def test_mfu_is_against_the_fastest_matmul_for_the_rung(monkeypatch, fmnist_dir):
    """Where bf16 is emulated (slower than fp32), a bf16 rung's peak is fp32's rate; rates
    the caller measured are used, and the ones measured here are returned."""
    rates = {torch.float32: 2e9, torch.bfloat16: 1e8}
    measured = []

    def fake_rate(device, dtype, **kwargs):
        measured.append(dtype)
        return rates[dtype]

    fake_runs(monkeypatch, {"a": [1.0] * 3, "bf16": [1.0] * 3})
    monkeypatch.setattr(ladder, "matmul_flops_per_second", fake_rate)
    rungs = [ladder.Rung("a", "systems", dict(tag="a", batch_size=8)),
             ladder.Rung("bf16", "systems", dict(tag="bf16", amp="bf16"))]
    peaks = {"fp32": 2e9}
    results = ladder.run(rungs, CPU, num_epochs=4, num_train=64, peaks=peaks, verbose=False)
    assert [r.peak_flops for r in results] == [2e9, 2e9]
    assert measured == [torch.bfloat16] and peaks == {"fp32": 2e9, "bf16": 1e8}


def test_matmul_rate_counts_two_flops_per_multiply_add(monkeypatch):
    """An n x n product is n**3 multiply-adds, 2 n**3 FLOPs: the rate is 2 n**3 times the
    products in a timed run over the fastest run (one product takes 1 ms, so a run of
    0.3 / 3 s holds 100)."""
    timings = iter([Timing((0.001,)), Timing((0.5, 0.4, 0.6))])
    monkeypatch.setattr(ladder.d2l, "measure", lambda *args, **kwargs: next(timings))
    rate, one = ladder._matmul_rate(100, CPU, torch.float32, seconds=0.3)
    assert one == 0.001
    assert rate == pytest.approx(2 * 100 ** 3 * 100 / 0.4)


def test_flops_per_epoch_and_mfu_by_hand(monkeypatch, fmnist_dir):
    """Softmax regression: 2 x 784 x 10 FLOPs an image forward, as many backward; 64
    images an epoch of 2 s against a 1 GFLOP/s product."""
    count = ladder.train_flops_per_image
    fake_runs(monkeypatch, {"a": [2.0] * 3})
    monkeypatch.setattr(ladder, "train_flops_per_image", count)
    monkeypatch.setattr(ladder, "make_net",
                        lambda seed=0, bias=True: nn.Sequential(nn.Flatten(), nn.Linear(784, 10)))
    [result] = ladder.run([ladder.Rung("a", "systems", dict(tag="a", batch_size=8))], CPU,
                          num_epochs=4, num_train=64, verbose=False)
    assert result.flops_per_epoch == 2 * 2 * 784 * 10 * 64
    assert result.mfu == pytest.approx(2 * 2 * 784 * 10 * 64 / 2.0 / 1e9)
