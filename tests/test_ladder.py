"""The speed ladder's method (d2l_ext.ladder, benchmarks/speed_ladder.py): which switches each
rung runs with, how the rungs are timed (rounds, paired ratios, one-off costs apart, the
compiler watched), how a time to an accuracy is counted. Its speed is printed, never asserted.

Most tests drive :func:`ladder.run` with scripted rungs on a scripted clock, so that what a
verdict would be under a given drift or noise is exact; the others run real (tiny) rungs on
this CPU."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from d2l_ext import ladder, timing
from d2l_ext import torch as d2l
from d2l_ext.i18n import Text
from d2l_ext.utils import Timing
from tests.nets import tiny_torch_cnn

ROOT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")
WORK = ("batch_size", "lr", "warmup_epochs", "schedule", "label_smoothing", "optimizer",
        "momentum", "weight_decay")


# ---------------------------------------------------------------- the rungs
def test_rungs_add_their_switches_to_those_below():
    rungs = ladder.make_ladder()
    first = ladder.options(rungs, 0)
    assert first == dict(ladder.BASE, batch_size=256, lr=0.1)
    systems = [i for i, r in enumerate(rungs) if r.kind == "systems"]
    top = ladder.options(rungs, systems[-1])
    for i in systems:
        assert set(ladder.options(rungs, i).items()) >= set(rungs[i].change.items())
    assert top["persistent_workers"] and top["data_on_device"] and top["channels_last"]
    assert top["bias"] is False and top["amp"] == "bf16" and top["fused"]
    assert top["compile"] == "default" and top["capture_step"]


def test_a_smaller_base_batch_scales_the_whole_ladder():
    rungs = ladder.make_ladder(32, 0.0125)
    for i, rung in enumerate(rungs):
        opts = ladder.options(rungs, i)
        if rung.kind != "algorithmic":
            assert (opts["batch_size"], opts["lr"]) == (32, 0.0125), rung.name
    algorithmic = [ladder.options(rungs, i) for i, r in enumerate(rungs)
                   if r.kind == "algorithmic"]
    assert [(o["batch_size"], o["lr"], o["warmup_epochs"]) for o in algorithmic] == [
        (128, 0.05, 1.0), (256, 0.1, 2.0)]


def test_systems_rungs_keep_the_work_fixed():
    rungs = ladder.make_ladder()
    work = [{k: ladder.options(rungs, i).get(k) for k in WORK}
            for i, r in enumerate(rungs) if r.kind != "algorithmic"]
    assert all(w == work[0] for w in work)


def test_cuda_only_rungs_are_skipped_on_a_cpu():
    rungs = ladder.make_ladder()
    on_cpu = ladder.applicable(rungs, CPU)
    assert [r.name for r in rungs if r.needs_cuda] == [
        "+ pinned memory", "+ cudnn.benchmark, TF32", "+ CUDA graphs",
        "+ the whole step in one CUDA graph"]
    assert not any(r.needs_cuda for r in on_cpu)


def test_the_algorithmic_rungs_build_on_the_systems_stack_without_its_capture():
    """A recorded step keeps its learning rate: the warmed-up, decaying algorithmic rungs
    cannot replay one, and take CUDA graphs of the compiled model instead (on a GPU)."""
    rungs = ladder.make_ladder()
    for i, rung in enumerate(rungs):
        if rung.kind == "algorithmic":
            opts = ladder.options(rungs, i)
            assert opts["capture_step"] is False and opts["compile"] == "reduce-overhead"
            assert opts["amp"] == "bf16" and opts["data_on_device"]
    on_cpu = ladder.applicable(rungs, CPU)
    cpu_alg = ladder.options(on_cpu, len(on_cpu) - 1)
    assert cpu_alg["compile"] == "default" and not cpu_alg.get("capture_step")


def test_fp16_leaves_out_the_recorded_step():
    """fp16's gradient scaler reads a value on the host every step: nothing to record."""
    names = [r.name for r in ladder.make_ladder(amp="fp16")]
    assert "+ fp16 autocast, gradient scaler" in names
    assert "+ the whole step in one CUDA graph" not in names


def test_every_rung_says_what_it_changes_in_both_languages():
    for rung in ladder.make_ladder():
        assert rung.what[0] and rung.what[1] and rung.zh, rung.name


# ---------------------------------------------------------------- verdicts
@pytest.mark.parametrize("ratios, expected", [
    ([0.9, 0.95, 0.8], ladder.FASTER), ([1.1, 1.02, 1.3], ladder.SLOWER),
    ([0.9, 1.01, 0.8], ladder.NO_GAIN), ([], "")])
def test_a_verdict_needs_every_round_on_one_side(ratios, expected):
    assert ladder.verdict(ratios) == expected


def test_the_false_alarm_rate_of_n_rounds():
    assert ladder.false_alarm(5) == pytest.approx(1 / 16)
    assert ladder.false_alarm(7) == pytest.approx(1 / 64)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeRunner:
    """A rung that takes ``per_step[round]`` seconds a step on the scripted clock, times
    ``drift ** round`` (the machine drifting), records the order of the units it ran."""

    log: list[str] = []

    def __init__(self, rung, opts, device, num_train, num_test, seed, num_epochs=10):
        spec = rung.change
        if spec.get("fail"):
            raise RuntimeError("no such switch here")
        self.rung, self.opts, self.name = rung, opts, rung.name
        self.spec = spec
        self.steps_per_epoch = 8
        self.rounds = 0
        self.whole_epochs = bool(spec.get("epochs"))

    def flags(self):
        import contextlib
        return contextlib.nullcontext()

    def step(self):
        CLOCK.now += self.spec["step"]

    def unit(self, steps):
        n = self.steps_per_epoch if self.whole_epochs else steps
        drift = self.spec.get("drift", 1.0) ** self.rounds
        CLOCK.now += n * self.spec["step"] * drift + (self.spec.get("epoch_cost", 0.0)
                                                     if self.whole_epochs else 0.0)
        if self.spec.get("compiles_in") == self.rounds:
            from torch._dynamo.utils import counters
            counters["stats"]["unique_graphs"] += 1
        FakeRunner.log.append(self.name)
        self.rounds += 1
        return n

    def accuracy(self):
        return self.spec.get("acc", [0.5])[min(self.rounds, len(self.spec.get("acc", [0.5])) - 1)]

    def train_counts(self):
        return None

    def train_accuracy(self, since=None):
        return self.spec.get("train_acc", float("nan"))

    def debiased_accuracy(self):
        return self.spec.get("debiased", float("nan"))


CLOCK = Clock()


@pytest.fixture
def scripted(monkeypatch):
    """ladder.run with FakeRunner rungs on the scripted clock, no FLOP counting, no split."""
    CLOCK.now = 0.0
    FakeRunner.log = []
    monkeypatch.setattr(ladder, "Runner", FakeRunner)
    monkeypatch.setattr(ladder.time, "perf_counter", CLOCK)
    monkeypatch.setattr(ladder, "_training_images", lambda rungs, n: 64)
    monkeypatch.setattr(ladder, "train_flops_per_image", lambda net: 1e6)
    monkeypatch.setattr(ladder, "_warm_up",
                        lambda runner, device: (0.5 + runner.spec["step"] * 3, 3))

    def run(specs, rounds=5, **kwargs):
        rungs = [ladder.Rung(name, kind, dict(spec, batch_size=8)) for name, kind, spec in specs]
        kwargs.setdefault("peak", (1e9, Text("peak", "峰值")))
        return ladder.run(rungs, CPU, rounds=rounds, steps=4, split=False, verbose=False,
                          **kwargs)

    return run


def test_paired_rounds_see_a_gain_that_drift_hides_from_ranges(scripted):
    """The machine slows by 30 % a round; the second rung is 10 % faster. Compared by their
    ranges over the rounds, the two overlap ("no clear gain"); paired round by round, the
    second is faster in every round."""
    ref, fast = scripted([("ref", "reference", dict(step=0.010, drift=1.3)),
                          ("fast", "systems", dict(step=0.009, drift=1.3))])
    assert not fast.timing.clearly_faster(ref.timing)  # what the old method judged by
    assert fast.verdict == ladder.FASTER
    assert fast.ratio.median == pytest.approx(0.9) and fast.ratio.max == pytest.approx(0.9)


def test_equal_rungs_under_noise_get_no_verdict(scripted, monkeypatch):
    """Two equally fast rungs, each unit disturbed by a different amount: no verdict."""
    noise = iter([1.0, 1.2, 1.0, 1.1, 1.0, 1.3, 1.0, 1.2, 1.0, 1.05])  # in the order run
    original = FakeRunner.unit

    def noisy(self, steps):
        start = CLOCK.now
        n = original(self, steps)
        CLOCK.now = start + (CLOCK.now - start) * next(noise)
        return n

    monkeypatch.setattr(FakeRunner, "unit", noisy)
    _, b = scripted([("a", "reference", dict(step=0.01)), ("b", "systems", dict(step=0.01))])
    assert b.verdict == ladder.NO_GAIN


def test_rounds_take_the_rungs_in_turns_reversing_the_order(scripted):
    scripted([("a", "reference", dict(step=0.01)), ("b", "systems", dict(step=0.01)),
              ("c", "systems", dict(step=0.01))], rounds=3)
    assert FakeRunner.log == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]


def test_a_loader_rung_is_timed_in_whole_epochs(scripted):
    """Starting the workers costs each epoch 0.08 s: in the time per step of a whole epoch."""
    restarted, = scripted([("restarted", "systems",
                            dict(step=0.01, epochs=True, epoch_cost=0.08))])
    assert restarted.seconds == pytest.approx((8 * 0.01 + 0.08) / 8)


def test_one_off_costs_are_kept_apart(scripted):
    """A warm-up of 3 steps that took 0.5 s more than 3 steady steps: a one-off of 0.5 s,
    and not a trace of it in the time per step."""
    a, = scripted([("a", "systems", dict(step=0.02))])
    assert a.one_off == pytest.approx(0.5)
    assert a.seconds == pytest.approx(0.02)


def test_a_warm_up_faster_than_the_steady_steps_gives_a_negative_one_off(scripted, monkeypatch):
    """The machine sped up between the warm-up and the rounds: the one-off is negative, not
    hidden behind a zero."""
    monkeypatch.setattr(ladder, "_warm_up",
                        lambda runner, device: (runner.spec["step"] * 3 - 0.3, 3))
    a, = scripted([("a", "systems", dict(step=0.2))])
    assert a.one_off == pytest.approx(-0.3)
    assert "\u22120.3" in str(ladder.table([a]))


def test_a_rung_that_fails_is_reported_and_the_next_compares_with_the_last_measured(scripted):
    ref, broken, after = scripted([("ref", "reference", dict(step=0.02)),
                                   ("broken", "systems", dict(step=0.01, fail=True)),
                                   ("after", "systems", dict(step=0.01))])
    assert broken.verdict == ladder.FAILED and "no such switch here" in broken.error
    assert after.ratio.median == pytest.approx(0.5) and after.verdict == ladder.FASTER


def test_a_window_in_which_the_compiler_moved_is_reported(scripted):
    quiet, noisy = scripted([("quiet", "reference", dict(step=0.01)),
                             ("noisy", "systems", dict(step=0.01, compiles_in=2))])
    assert quiet.compiled_in_window == [] and noisy.compiled_in_window == ["graphs compiled"]


def test_mfu_takes_every_rung_against_one_fixed_peak(scripted):
    """The denominator does not change when a rung turns on autocast."""
    a, b = scripted([("fp32", "reference", dict(step=0.01)),
                     ("bf16", "systems", dict(step=0.005, amp="bf16"))])
    assert a.peak == b.peak == 1e9
    assert a.flops_per_second == pytest.approx(1e6 * 8 / 0.01)
    assert b.mfu == pytest.approx(1e6 * 8 / 0.005 / 1e9)


def test_at_least_two_rounds():
    with pytest.raises(ValueError, match="at least two rounds"):
        ladder.run(ladder.make_ladder(), CPU, rounds=1)


# ---------------------------------------------------------------- real rungs on this CPU
def tiny(seed: int = 0, bias: bool = True) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, bias=bias), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10))


@pytest.mark.usefixtures("fmnist_dir")
def test_compiled_rungs_compile_static_shapes_once_and_never_in_a_timed_window(monkeypatch):
    """Two compiled rungs of different batches in one process (nothing reset between them):
    no timed window compiles, and each compiled graph is static (a third batch size makes
    it compile again, where a symbolic batch would not)."""
    monkeypatch.setattr(ladder, "make_net", tiny)
    rungs = [ladder.Rung("base", "reference", dict(batch_size=16, lr=0.01)),
             ladder.Rung("compiled", "systems", dict(data_on_device=True, compile="default")),
             ladder.Rung("bigger", "algorithmic", dict(batch_size=32, lr=0.02))]
    results = ladder.run(rungs, CPU, rounds=2, steps=2, num_train=64, num_test=32,
                         peak=(1e9, Text("p", "p")), verbose=False)
    for result in results:
        assert not result.error and result.compiled_in_window == []
    runner = ladder.Runner(rungs[1], ladder.options(rungs, 1), CPU, 64, 32, 0)
    with runner.flags():
        runner.step()
        before = ladder.compiler_events()["graphs compiled"]
        runner.run.model(torch.zeros(5, 1, 28, 28))
    assert ladder.compiler_events()["graphs compiled"] == before + 1


@pytest.mark.usefixtures("fmnist_dir")
def test_the_ladder_runs_its_cpu_rungs_for_real(monkeypatch, capsys):
    """Every CPU rung of the real ladder builds, warms up and is timed in rounds (a tiny
    network, a few images, loader workers as d2l uses them)."""
    monkeypatch.setattr(ladder, "make_net", tiny)
    rungs = ladder.applicable(ladder.make_ladder(16, 0.00625, scales=(2,)), CPU)
    results = ladder.run(rungs, CPU, rounds=2, steps=2, num_train=64, num_test=32,
                         peak=(1e9, Text("p", "p")))
    assert [r.error for r in results] == [""] * len(rungs)
    assert all(len(r.step_seconds) == 2 for r in results)
    assert [r.bound for r in results] == ["one"] * len(rungs)
    systems = [r for r in results if r.kind == "systems"]
    assert all(r.verdict in (ladder.FASTER, ladder.NO_GAIN, ladder.SLOWER) for r in systems)
    out = capsys.readouterr().out
    assert "built and warmed up" in out and "per step" in out
    assert len(ladder.table(results).splitlines()) == len(results) + 1
    whole = ladder.table(results)
    times, analysis = (ladder.table(results, part=p) for p in ("times", "analysis"))
    assert times.columns[0] == analysis.columns[0] == whole.columns[0]  # the rung opens both
    assert len(times.columns) + len(analysis.columns) == len(whole.columns) + 1
    assert [row[0] for row in times.cells] == [row[0] for row in whole.cells]
    assert times.cells[0][1:] == whole.cells[0][1:9]
    assert analysis.cells[0][1:] == whole.cells[0][9:]
    assert "MFU" in analysis.columns[-1] and "verdict" in times.columns[-1]
    with pytest.raises(ValueError, match="part must be one of"):
        ladder.table(results, part="speed")


@pytest.mark.usefixtures("fmnist_dir")
def test_the_runner_steps_through_epochs_and_keeps_training_mode(monkeypatch):
    monkeypatch.setattr(ladder, "make_net", tiny)
    rungs = ladder.applicable(ladder.make_ladder(16, 0.01, scales=()), CPU)
    i = next(i for i, r in enumerate(rungs) if r.name == "+ data on the device")
    runner = ladder.Runner(rungs[i], ladder.options(rungs, i), CPU, 48, 32, 0)
    assert runner.steps_per_epoch == 3 and not runner.whole_epochs
    for _ in range(7):
        runner.step()
    assert runner.epoch == 2
    runner.accuracy()
    assert runner.run.net.training  # evaluation in the middle of an epoch leaves it training


# ---------------------------------------------------------------- time to an accuracy
def test_time_to_target_counts_training_only_and_keeps_the_one_off_apart(monkeypatch):
    CLOCK.now = 0.0
    monkeypatch.setattr(ladder, "Runner", FakeRunner)
    monkeypatch.setattr(ladder.time, "perf_counter", CLOCK)
    monkeypatch.setattr(ladder, "_training_images", lambda rungs, n: 64)
    monkeypatch.setattr(ladder, "_warm_up", lambda runner, device: (2.0 + 3 * 0.01, 3))
    accs = iter([0.5, 0.7, 0.91, 0.95])

    def accuracy(self):
        CLOCK.now += 10.0  # evaluation is slow, and never counted
        return next(accs)

    monkeypatch.setattr(FakeRunner, "accuracy", accuracy)
    rung = ladder.Rung("r", "systems", dict(step=0.01, batch_size=8))
    [run] = ladder.time_to_target([rung], [0], CPU, 0.9, seeds=(3,), max_epochs=10,
                                  verbose=False)
    # warm-up 3 steps, then checks at quarter epochs: steps 4, 6 and 8
    assert run.reached and run.accuracy == 0.91 and run.seed == 3 and run.steps == 8
    assert run.epochs == pytest.approx(1.0)
    assert run.steady == pytest.approx(8 * 0.01)
    assert run.one_off == pytest.approx(2.0)


def test_time_to_target_says_whether_the_warm_up_compiled(monkeypatch):
    """A compiled rung run after the ladder in the same process may reuse its code: the run
    records whether the compiler's counters moved in its warm-up."""
    from torch._dynamo.utils import counters

    CLOCK.now = 0.0
    monkeypatch.setattr(ladder, "Runner", FakeRunner)
    monkeypatch.setattr(ladder.time, "perf_counter", CLOCK)
    monkeypatch.setattr(ladder, "_training_images", lambda rungs, n: 64)
    warm_ups = iter([True, False])

    def warm_up(runner, device):
        if next(warm_ups):
            counters["stats"]["unique_graphs"] += 1  # this warm-up compiled a graph
        return 0.1, 3

    monkeypatch.setattr(ladder, "_warm_up", warm_up)
    rung = ladder.Rung("compiled", "systems", dict(step=0.01, batch_size=8, compile="default"))
    first, second = ladder.time_to_target([rung], [0], CPU, 0.0, seeds=(0, 1), verbose=False)
    assert first.compiled and not second.compiled


# ---------------------------------------------------------------- precision, peaks
def test_bf16_is_kept_unless_fp16_is_clearly_faster_by_more_than_the_margin():
    fp32 = Timing((10.0, 10.2))
    assert ladder.choose_amp({"fp32": fp32, "bf16": Timing((9.0, 9.1)),
                              "fp16": Timing((8.8, 8.9))}) == "bf16"  # 2 %: bf16
    assert ladder.choose_amp({"fp32": fp32, "bf16": Timing((9.0, 9.1)),
                              "fp16": Timing((7.0, 7.1))}) == "fp16"
    assert ladder.choose_amp({"fp32": Timing((1.0, 1.1)), "bf16": Timing((5.0, 5.5))}) is None


def test_amp_steps_are_timed_in_the_rungs_configuration():
    timings = ladder.amp_step_timings(CPU, 2, dict(channels_last=True, bias=False), repeats=2)
    assert set(timings) == {"fp32", "bf16"}
    assert all(len(t.times) == 2 and t.repetitions >= 1 for t in timings.values())


def test_batchnorm_backend_on_a_cpu():
    assert ladder.batchnorm_backend(CPU, "bf16") == "native"


def test_the_mfu_denominator_is_the_gpus_datasheet_bf16_peak(monkeypatch):
    monkeypatch.setattr(ladder.d2l, "as_device", lambda d: torch.device("cuda", 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA H100 80GB HBM3")
    value, text, datasheet = ladder.peak_flops("cuda")
    assert value == pytest.approx(989.5e12) and "H100 SXM" in text.en and "bf16" in text.zh
    assert datasheet
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "Some Future GPU")
    value, text, datasheet = ladder.peak_flops("cuda", measured={"fp32": 5e13, "bf16": 2e14})
    assert value == 2e14 and "measured" in text.en and not datasheet


def test_on_a_cpu_the_mfu_denominator_is_the_fastest_product_measured(monkeypatch):
    """A matrix product or a convolution, whichever is faster: oneDNN's convolutions can
    outrun MKL's matrix products, and a slower reference puts MFU above 100 %."""
    monkeypatch.setattr(ladder, "conv_flops_per_second", lambda device: 5e10)
    value, text, _ = ladder.peak_flops(CPU, measured={"fp32": 1e11, "bf16": 3e10})
    assert value == 1e11 and "fp32" in text.en
    monkeypatch.setattr(ladder, "conv_flops_per_second", lambda device: 4e11)
    value, text, _ = ladder.peak_flops(CPU, measured={"fp32": 1e11})
    assert value == 4e11 and "fp32 convolution" in text.en and "卷积" in text.zh
    monkeypatch.setattr(ladder, "conv_flops_per_second", lambda device: pytest.fail("measured"))
    value, text, _ = ladder.peak_flops(CPU, measured={"fp32": 1e11, "bf16": 2e11,
                                                      "conv fp32": 1.5e11, "conv bf16": 3e11})
    assert value == 3e11 and "the bf16 convolution" in text.en  # given: not measured again


def test_the_convolution_rate_is_measured():
    assert 1e6 < ladder.conv_flops_per_second(CPU, batch_size=2, channels=8, size=8) < 1e14


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_gpu_asked_for_without_one_fails_early_and_clearly(monkeypatch):
    for call in (lambda: ladder.run(ladder.make_ladder(), "cuda"),
                 lambda: ladder.amp_candidates("cuda"),
                 lambda: ladder.amp_step_timings("cuda", 2),
                 lambda: ladder.matmul_flops_per_second("cuda")):
        with pytest.raises(ValueError, match="no CUDA GPU"):
            call()
    monkeypatch.setattr(sys, "argv", ["speed_ladder.py", "--device", "cuda"])
    with pytest.raises(SystemExit, match="--device cuda: .*no CUDA GPU"):
        speed_ladder_script().main()


@pytest.mark.parametrize("device_type, capability, hip, expected", [
    ("cpu", None, False, ["bf16"]),
    ("cuda", (9, 0), False, ["bf16", "fp16"]),  # H100
    ("cuda", (8, 0), False, ["bf16", "fp16"]),  # A100: the first with bf16 tensor cores
    ("cuda", (7, 5), False, ["fp16"]),          # T4: bf16 only emulated
    ("cuda", (9, 4), True, ["bf16", "fp16"]),   # ROCm: bf16, as torch.cuda says
])
def test_amp_formats_follow_the_gpus_capability(device_type, capability, hip, expected):
    assert ladder.amp_formats(device_type, capability, hip=hip) == expected


def test_amp_candidates_ask_the_gpu_they_are_given(monkeypatch):
    capabilities = {0: (7, 5), 1: (9, 0)}
    monkeypatch.setattr(ladder.d2l, "num_gpus", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability",
                        lambda device=None: capabilities[torch.device(device).index])
    monkeypatch.setattr(torch.version, "hip", None)
    assert ladder.amp_candidates("cuda:1") == ["bf16", "fp16"]
    assert ladder.amp_candidates(torch.device("cuda", 0)) == ["fp16"]


# ---------------------------------------------------------------- counting
def test_flops_of_softmax_regression():
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
    monkeypatch.setattr(ladder, "_matmul_rate",
                        lambda n, device, dtype: tried.append(n) or rates[n])
    assert ladder.matmul_flops_per_second(CPU) == 60e9
    assert tried == [512, 1024, 2048, 4096]


def test_matmul_rate_stops_growing_when_a_product_gets_slow(monkeypatch):
    tried = []
    monkeypatch.setattr(ladder, "_matmul_rate",
                        lambda n, *a: tried.append(n) or (1e9, 0.4 * (n / 512) ** 3))
    assert ladder.matmul_flops_per_second(CPU, torch.bfloat16, seconds=0.5) == 1e9
    assert tried == [512]


def test_matmul_rate_counts_two_flops_per_multiply_add_in_blocks(monkeypatch):
    monkeypatch.setattr(timing, "time_per_call",
                        lambda f, device, **kw: Timing((0.002, 0.001, 0.003), repetitions=50))
    rate, one = ladder._matmul_rate(100, CPU, torch.float32)
    assert one == 0.001 and rate == pytest.approx(2 * 100 ** 3 / 0.001)


def test_matmul_rate_is_measured():
    rate = ladder.matmul_flops_per_second(CPU, sizes=(64, 128), seconds=0.01)
    assert 1e6 < rate < 1e14


# ---------------------------------------------------------------- d2l's loop, the network
def test_d2l_dataset_is_the_books_dataset(fmnist_dir):
    theirs, ours = ladder.D2LFashionMNIST(True, 20), d2l.FashionMNIST(True, num_examples=20)
    for i in (0, 7, 19):
        x, y = theirs[i]
        assert isinstance(y, int) and x.dtype == torch.float32 and x.shape == (1, 28, 28)
        torch.testing.assert_close(x, ours[i][0], rtol=0, atol=0)
        assert y == int(ours[i][1])


def test_d2l_loop_starts_from_the_ladders_weights(fmnist_dir):
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
    assert a[0].weight.std().item() == pytest.approx(0.01, rel=0.2)


def test_no_bias_before_batchnorm_is_the_same_function():
    torch.manual_seed(0)
    with_bias, without = ladder.make_net(0), ladder.make_net(0, bias=False)
    X = torch.randn(4, 1, 28, 28)
    torch.testing.assert_close(with_bias(X), without(X), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- tables and the chart
def result(name, kind, seconds, verdict="", split=None, ratios=()):
    r = ladder.RungResult(Text(name, name), kind, {"batch_size": 8}, 10, 1e6, 1e9,
                          step_seconds=list(seconds), verdict=verdict, split=split,
                          ratios=list(ratios))
    return r


def test_the_table_has_a_row_per_rung_and_blanks_for_a_failed_one():
    failed = result("x", "systems", [], verdict=ladder.FAILED)
    failed.error = "boom"
    rows = ladder.rows([result("a", "reference", [0.01, 0.02]), failed])
    assert rows[0][2] == pytest.approx(15.0) and rows[0][5] == 10  # steps per epoch
    assert rows[0][6] == pytest.approx(0.15)
    assert format(rows[1][2], ".2f") == "\u2013" and rows[1][8].en == ladder.FAILED
    assert all(len(r) == len(ladder.COLUMNS) == len(ladder.FORMATS) for r in rows)


def test_a_cpu_split_is_one_time_so_table_and_plot_leave_the_device_out():
    import matplotlib

    matplotlib.use("Agg")
    t = Timing((0.002,))
    on_cpu = timing.SplitTime(t, t, t, on_cpu=True)
    results = [result("ref", "reference", [0.005], split=on_cpu)]
    [row] = ladder.rows(results)
    assert format(row[9], ".2f") == format(row[10], ".2f") == "\u2013"
    ax = ladder.plot(results)
    assert not [p for p in ax.patches if p.get_facecolor()[:3] == (0.8, 0.8, 0.8)
                and p.get_width() > 0]
    assert "device" not in ax.get_xlabel()
    assert [h.get_label() for h in ax.get_legend().get_patches()] == ["wall, reference"]


def test_plot_draws_wall_and_device_bars_hatching_host_bound_rungs():
    import matplotlib

    matplotlib.use("Agg")
    t = Timing((0.002,))
    host_bound = timing.SplitTime(Timing((0.001,)), Timing((0.003,)), t, on_cpu=False)
    device_bound = timing.SplitTime(Timing((0.004,)), Timing((0.001,)), t, on_cpu=False)
    results = [result("ref", "reference", [0.005], split=host_bound),
               result("a", "systems", [0.004], split=device_bound)]
    ax = ladder.plot(results)
    device_bars = [p for p in ax.patches if p.get_facecolor()[:3] == (0.8, 0.8, 0.8)]
    assert [b.get_hatch() for b in device_bars][:2] == [None, "//"]  # "a" first: top down


def test_plot_labels_its_log_axis_with_plain_numbers():
    """200, 300, 500 ms rather than 2×10², 3×10², 5×10²."""
    import matplotlib

    matplotlib.use("Agg")
    results = [result("ref", "reference", [0.5, 0.52]), result("a", "systems", [0.27, 0.3]),
               result("b", "systems", [0.6, 0.64])]
    ax = ladder.plot(results)
    ax.figure.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert len(labels) >= 3 and all(label.replace(",", "").isdigit() for label in labels), labels


# ---------------------------------------------------------------- the benchmark
def speed_ladder_script():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import speed_ladder

    return speed_ladder


def test_benchmark_lists_its_rungs(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["speed_ladder.py", "--list", "--batch-size", "32"])
    speed_ladder_script().main()
    out = capsys.readouterr().out
    assert len(out.splitlines()) == len(ladder.make_ladder())
    assert "(CUDA only)" in out and "batch 128, lr 0.05," in out


def test_benchmark_rejects_unknown_rungs(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["speed_ladder.py", "--rungs", "0,99"])
    with pytest.raises(SystemExit, match="comma-separated indices from 0 to"):
        speed_ladder_script().main()


def test_benchmark_writes_its_json(tmp_path, monkeypatch, fmnist_dir):
    """The script's own logic with the ladder's measurements scripted: the rungs picked, the
    sizes, the JSON with every rung's three timings, one-off cost and compiler record."""
    speed_ladder = speed_ladder_script()
    calls = {}

    def fake_run(rungs, device, rounds, steps, num_train, num_test, **kwargs):
        calls["run"] = (list(rungs), device, rounds, steps, num_train, num_test)
        t = Timing((0.002, 0.003))
        return [ladder.RungResult(r.title, r.kind, ladder.options(rungs, i), 10, 1e6, 1e9,
                                  step_seconds=[0.01, 0.012], one_off=0.5, warmup_steps=3,
                                  split=timing.SplitTime(t, t, t, on_cpu=True))
                for i, r in enumerate(rungs)]

    def fake_target(rungs, chosen, device, target, **kwargs):
        calls["target"] = (chosen, target, kwargs)
        return [ladder.TargetRun(rungs[i].title, 0, True, 0.9, 2.0, 1.0, 0.2) for i in chosen]

    out = tmp_path / "speed_ladder.json"
    monkeypatch.setattr(ladder, "run", fake_run)
    monkeypatch.setattr(ladder, "time_to_target", fake_target)
    monkeypatch.setattr(ladder, "peak_flops",
                        lambda device, measured=None: (1e9, Text("p", "p"), False))
    monkeypatch.setattr(ladder, "amp_step_timings",
                        lambda device, batch, config: {"fp32": Timing((1.0, 1.1)),
                                                       "bf16": Timing((5.0, 5.5))})
    monkeypatch.setenv("D2L_SMOKE", "1")
    monkeypatch.setattr(sys, "argv", ["speed_ladder.py", "--rungs", "0,1", "--device", "cpu",
                                      "--json", str(out)])
    speed_ladder.main()
    rungs, device, rounds, steps, num_train, num_test = calls["run"]
    assert [r.name for r in rungs][0] == "d2l's loop" and device.type == "cpu"
    assert (rounds, steps) == speed_ladder.SIZES["smoke"][:2]
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["benchmark"] == "speed_ladder"
    rung = result["rungs"][0]
    assert rung["step_seconds"] == [0.01, 0.012] and rung["one_off"] == 0.5
    assert set(rung["split"]) == {"device", "host", "wall", "bound"}
    assert result["targets"][0]["reached"] is True
    assert result["peak"]["flops"] == 1e9


# ---------------------------------------------------------------- d2l.train's step, captured
def test_a_captured_step_refuses_what_a_graph_cannot_keep():
    base = dict(schedule="constant", warmup_epochs=0)
    with pytest.raises(ValueError, match="fp16's gradient scaler"):
        d2l._config(8, 0.1, capture_step=True, amp="fp16", **base)
    with pytest.raises(ValueError, match="compile='default'"):
        d2l._config(8, 0.1, capture_step=True, compile="reduce-overhead", **base)
    with pytest.raises(ValueError, match="schedule='constant' and warmup_epochs=0"):
        d2l._config(8, 0.1, capture_step=True, schedule="cosine")
    with pytest.raises(ValueError, match="one device"):
        d2l._config(8, 0.1, capture_step=True, ranks=2, **base)


def test_on_a_cpu_a_captured_step_warns_and_trains_as_usual(fmnist_dir):
    torch.manual_seed(0)
    plain = d2l.train(tiny_torch_cnn(), [CPU], 32, 0.1, 1, warmup_epochs=0, num_train=128,
                      num_test=64, verbose=False)
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        captured = d2l.train(tiny_torch_cnn(), [CPU], 32, 0.1, 1, warmup_epochs=0,
                             num_train=128, num_test=64, verbose=False, capture_step=True)
    assert any("capture_step=True needs a CUDA GPU" in str(w.message) for w in caught)
    assert captured.test_acc == plain.test_acc


@pytest.mark.parametrize("name, group", [
    ("sm90_xmma_dgrad_implicit_gemm_bf16bf16_bf16f32", "conv dgrad"),
    ("cudnn::detail::wgrad_alg0_engine<float, 128, 6>", "conv wgrad"),
    ("sm80_xmma_fprop_implicit_gemm_indexed_f32f32", "conv forward"),
    ("aten::mkldnn_convolution", "conv forward"), ("aten::convolution_backward", "conv backward"),
    ("triton_poi_fused_native_batch_norm_backward_relu_0", "elementwise"),
    ("void at::native::multi_tensor_apply_kernel<...>", "optimizer"),
    ("ampere_sgemm_128x64_nn", "matmul"), ("aten::_log_softmax_backward_data", "other"),
    ("## Call CompiledFxGraph fk3xq2tbn7mzp ##", "compiled"),  # Inductor's C++ kernels
])
def test_kernels_and_operators_fall_into_their_groups(name, group):
    assert ladder.group_of(name) == group


def test_a_steps_time_by_group_on_this_cpu():
    net = tiny()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    X, y = torch.rand(4, 1, 28, 28), torch.randint(0, 10, (4,))

    def step():
        optimizer.zero_grad()
        nn.functional.cross_entropy(net(X), y).backward()
        optimizer.step()

    groups = ladder.time_groups(step, CPU, steps=2)
    assert {"conv forward", "conv backward", "optimizer"} <= set(groups)
    assert all(v > 0 for v in groups.values())


@pytest.mark.usefixtures("fmnist_dir")
def test_debiased_accuracy_divides_out_the_start_statistics_and_restores_them(monkeypatch):
    """After n steps with momentum 0.1 the start values (mean 0, variance 1) weigh 0.9**n
    in BatchNorm's running statistics: evaluation sees them divided out, and the statistics
    come back unchanged (on their own tensors, which a compiled step reads)."""
    monkeypatch.setattr(ladder, "make_net", tiny)
    rungs = ladder.applicable(ladder.make_ladder(16, 0.01, scales=()), CPU)
    i = next(i for i, r in enumerate(rungs) if r.name == "+ data on the device")
    runner = ladder.Runner(rungs[i], ladder.options(rungs, i), CPU, 48, 32, 0)
    for _ in range(3):
        runner.step()
    bn = next(m for m in runner.run.net.modules() if isinstance(m, nn.BatchNorm2d))
    mean, var = bn.running_mean, bn.running_var
    before_mean, before_var = mean.clone(), var.clone()
    seen = {}

    def accuracy():
        seen["mean"], seen["var"] = mean.clone(), var.clone()
        return 0.5

    monkeypatch.setattr(runner, "accuracy", accuracy)
    assert runner.debiased_accuracy() == 0.5
    left = 0.9 ** 3
    torch.testing.assert_close(seen["mean"], before_mean / (1 - left))
    torch.testing.assert_close(seen["var"], (before_var - left) / (1 - left))
    assert bn.running_mean is mean and torch.equal(mean, before_mean)
    assert torch.equal(var, before_var)
    bn.num_batches_tracked.zero_()  # nothing to divide out: no answer
    assert runner.debiased_accuracy() != runner.debiased_accuracy()


def test_time_to_target_times_at_least_one_chunk_after_a_long_warm_up(monkeypatch):
    """Warm-up steps that already fill the epochs allowed: one timed chunk all the same."""
    CLOCK.now = 0.0
    monkeypatch.setattr(ladder, "Runner", FakeRunner)
    monkeypatch.setattr(ladder.time, "perf_counter", CLOCK)
    monkeypatch.setattr(ladder, "_training_images", lambda rungs, n: 64)
    monkeypatch.setattr(ladder, "_warm_up", lambda runner, device: (1.0, 12))
    rung = ladder.Rung("r", "systems", dict(step=0.01, batch_size=8))
    [run] = ladder.time_to_target([rung], [0], CPU, 0.99, seeds=(0,), max_epochs=1,
                                  verbose=False)
    assert run.epochs == pytest.approx((12 + 1) / 8) and run.steady == pytest.approx(13 * 0.01)


def test_time_to_target_never_trains_past_its_epochs(monkeypatch):
    """Chunks of a quarter epoch, cut at the last allowed step: 3 warm-up steps and 5 timed
    ones fill exactly one epoch of 8 (a whole quarter, 2 steps, would have made it 9)."""
    CLOCK.now = 0.0
    monkeypatch.setattr(ladder, "Runner", FakeRunner)
    monkeypatch.setattr(ladder.time, "perf_counter", CLOCK)
    monkeypatch.setattr(ladder, "_training_images", lambda rungs, n: 64)
    monkeypatch.setattr(ladder, "_warm_up", lambda runner, device: (0.1, 3))
    rung = ladder.Rung("r", "systems", dict(step=0.01, batch_size=8))
    [run] = ladder.time_to_target([rung], [0], CPU, 0.99, seeds=(0,), max_epochs=1,
                                  verbose=False)
    assert run.steps == 8 and run.epochs == 1.0 and not run.reached
    assert run.debiased_accuracy != run.debiased_accuracy  # the fake keeps no statistics


@pytest.mark.parametrize("one_off, drift, en, zh", [
    (0.02, 0.0, "no one-off cost to speak of", "可以忽略"),
    (0.3, 0.4, "warm-up minus as many steady steps: +0.3 s, within the steady steps' own "
     "variation (0.4 s)", "没有超出稳态训练自身的波动（0.4 秒）"),
    (-0.2, 0.5, "minus as many steady steps: \u22120.2 s, within the", "少用 0.2 秒"),
    (0.8, 0.4, " + 0.8 s one-off", "另加一次性开销 0.8 秒"),
    (-0.9, 0.4, "took 0.9 s less than as many steady steps", "还少用 0.9 秒")])
def test_a_one_off_cost_is_reported_only_above_the_steady_steps_drift(one_off, drift, en, zh):
    from d2l_ext.i18n import Text

    run = ladder.TargetRun(Text("r", "r"), 0, True, 0.9, 1.0, 5.0, one_off, drift=drift)
    said = ladder.one_off_said(run)
    assert en in said.en and zh in said.zh
