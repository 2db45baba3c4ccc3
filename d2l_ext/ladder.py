"""The speed ladder of chapter 3: one training run made faster one switch at a time.

Chapter 2's ResNet-18 on Fashion-MNIST, first with d2l's own loop, then with
``d2l.train`` and its fast-path switches turned on one rung at a time (each rung
keeps the switches of the rungs before it). The *systems* rungs keep the work fixed
(epochs, batch, learning rate, schedule) and change only how it is done; the
*algorithmic* rungs after them change the work itself and are labelled as such.

Used by the chapter and by ``benchmarks/speed_ladder.py`` (PyTorch only)::

    from d2l_ext import ladder
    results = ladder.run(ladder.LADDER, d2l.try_gpu(), num_epochs=10)
    print(ladder.table(results))
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from d2l_ext import fashion_mnist
from d2l_ext import torch as d2l
from d2l_ext.utils import Timer, TrainResult, text_table


@dataclass(frozen=True)
class Rung:
    """One step of the ladder: the switches it adds to the rungs before it."""

    name: str
    kind: str  # "reference", "systems" or "algorithmic"
    change: dict = field(default_factory=dict)
    needs_cuda: bool = False


#: d2l's settings: batch 256, learning rate 0.1 with no warm-up, 4 loader processes.
BASE = dict(batch_size=256, lr=0.1, warmup_epochs=0.0, num_workers=4, pin_memory=False,
            persistent_workers=False)

LADDER = [
    Rung("d2l's loop", "reference"),
    Rung("d2l.train", "systems"),
    Rung("+ persistent workers", "systems", dict(persistent_workers=True)),
    Rung("+ pinned memory", "systems", dict(pin_memory=True), needs_cuda=True),
    Rung("+ data on the device", "systems", dict(data_on_device=True)),
    Rung("+ cudnn.benchmark, TF32", "systems", dict(cudnn_benchmark=True, tf32=True),
         needs_cuda=True),
    Rung("+ channels_last", "systems", dict(channels_last=True)),
    Rung("+ bf16 autocast", "systems", dict(amp="bf16")),
    Rung("+ torch.compile", "systems", dict(compile="default")),
    Rung("+ CUDA graphs, fused SGD", "systems", dict(compile="reduce-overhead", fused=True),
         needs_cuda=True),
    Rung("batch 1024, lr 0.4, warm-up + cosine", "algorithmic",
         dict(batch_size=1024, lr=0.4, warmup_epochs=1.0, schedule="cosine")),
]


def applicable(rungs: Sequence[Rung], device: torch.device) -> list[Rung]:
    """The rungs that can run on ``device`` (the CUDA-only ones need a GPU)."""
    return [r for r in rungs if device.type == "cuda" or not r.needs_cuda]


def options(rungs: Sequence[Rung], index: int, dropped: Sequence[str] = ()) -> dict:
    """``d2l.train``'s keyword arguments at ``rungs[index]``: :data:`BASE` plus the change of
    that rung and of every rung before it, except the rungs named in ``dropped``."""
    opts = dict(BASE)
    for i, rung in enumerate(rungs[:index + 1]):
        if i == index or rung.name not in dropped:
            opts.update(rung.change)
    return opts


# ---------------------------------------------------------------- the first rung
def init_weights(module: nn.Module) -> None:
    """d2l's initialisation in its multi-GPU chapter: N(0, 0.01) weights of Linear and Conv2d."""
    if type(module) in [nn.Linear, nn.Conv2d]:
        nn.init.normal_(module.weight, std=0.01)


def d2l_loop(net: nn.Module, device: torch.device, batch_size: int, lr: float,
             num_epochs: int, num_train: int | None = None,
             num_test: int | None = None) -> TrainResult:
    """The training loop of d2l-en's "Concise Implementation for Multiple GPUs" (d2l 1.0.3),
    transcribed for one device.

    Our changes: the data may be cut to ``num_train``/``num_test`` examples, the timer
    starts and stops after a barrier (so that it measures the work, not the queueing),
    and the measures are returned instead of plotted. d2l's ``train`` itself lives in the
    chapter, not in the d2l package, and d2l.torch needs torchvision, so it is not imported.
    """
    train_iter, test_iter = d2l.load_data_fashion_mnist(batch_size, num_train=num_train,
                                                        num_test=num_test)
    net.apply(init_weights)
    net = nn.DataParallel(net, device_ids=[device]) if device.type == "cuda" else net
    net = net.to(device)
    trainer = torch.optim.SGD(net.parameters(), lr)
    loss = nn.CrossEntropyLoss()
    result = TrainResult([str(device)], batch_size, lr)
    n = len(train_iter.dataset)
    for _ in range(num_epochs):
        net.train()
        d2l.synchronize(device)
        timer = Timer()
        for X, y in train_iter:
            trainer.zero_grad()
            X, y = X.to(device), y.to(device)
            l = loss(net(X), y)
            l.backward()
            trainer.step()
        d2l.synchronize(device)
        seconds = timer.stop()
        result.epoch_seconds.append(seconds)
        result.images_per_second.append(n / seconds)
        result.train_loss.append(float(l.detach()))
        result.train_acc.append(float("nan"))  # d2l's loop does not measure it
        result.test_acc.append(d2l.evaluate_accuracy_gpu(net, test_iter))
    return result


# ---------------------------------------------------------------- where the limit is
def train_flops_per_image(net: nn.Module, image_shape: tuple[int, ...] = (1, 28, 28),
                          batch_size: int = 4) -> float:
    """Floating-point operations of one training step per image (forward and backward),
    counted by ``torch.utils.flop_counter.FlopCounterMode`` (matrix products and
    convolutions; element-wise work such as BatchNorm is not counted)."""
    net = copy.deepcopy(net).cpu().train()
    X = torch.zeros(batch_size, *image_shape)
    with FlopCounterMode(display=False) as counter:
        net(X).sum().backward()
    return counter.get_total_flops() / batch_size


def matmul_flops_per_second(device: torch.device, dtype: torch.dtype = torch.float32,
                            tf32: bool = False, n: int | None = None,
                            seconds: float = 0.5) -> float:
    """The rate of a large square matrix product on ``device``, measured (FLOP/s).

    With ``tf32`` float32 products may use TensorFloat-32 (as cuDNN's convolutions do
    by default). The rate is the best this run saw: a stand-in for the device's peak.
    """
    n = n or (8192 if device.type == "cuda" else 1024)
    precision = torch.get_float32_matmul_precision()
    if tf32:
        torch.set_float32_matmul_precision("high")
    try:
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        a @ b
        repeats, elapsed = 1, 0.0
        while elapsed < seconds:  # double the repeats until the timing is long enough
            repeats *= 2
            d2l.synchronize(device)
            start = time.perf_counter()
            for _ in range(repeats):
                a @ b
            d2l.synchronize(device)
            elapsed = time.perf_counter() - start
        return 2 * n ** 3 * repeats / elapsed
    finally:
        torch.set_float32_matmul_precision(precision)


# ---------------------------------------------------------------- running the ladder
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

@dataclass
class RungResult:
    """What one rung measured. Times are of the epochs after the first (warm-up)."""

    name: str
    kind: str
    options: dict
    epoch_seconds: list[float]
    test_acc: float
    num_train: int
    flops_per_epoch: float
    peak_flops: float
    kept: bool = True  # False: slower than the rungs below, so the next rungs leave it out
    #: time of a step at the rung's batch over a step at a quarter of it (None: not probed)
    batch_growth: float | None = None

    @property
    def bound(self) -> str:
        """What limits the rung, from chapter 1's cost model ``t_step = t_fixed + b * t_image``.

        Four times the batch in less than twice the time: the fixed per-step cost (Python,
        kernel launches, loading) dominates, ``"overhead"``. Otherwise the work grows with
        the batch: ``"compute"`` if the counted FLOPs run at 40% or more of the measured
        matmul rate, else ``"memory"`` (moving bytes, not arithmetic, is the cost).
        """
        if self.batch_growth is None:
            return "-"
        if self.batch_growth < 2:
            return "overhead"
        return "compute" if self.mfu >= 0.4 else "memory"

    @property
    def seconds(self) -> float:
        """The median time of an epoch."""
        return statistics.median(self.timed)

    @property
    def timed(self) -> list[float]:
        return self.epoch_seconds[1:] or self.epoch_seconds

    @property
    def images_per_second(self) -> float:
        return self.num_train / self.seconds

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation: the counted FLOPs per second over the measured peak."""
        return self.flops_per_epoch / self.seconds / self.peak_flops


def make_net(seed: int = 0) -> nn.Module:
    """Chapter 2's ResNet-18 with d2l's initialisation; the same weights for every rung."""
    torch.manual_seed(seed)
    net = d2l.resnet18(10)
    net.apply(init_weights)
    return net


def batch_growth(opts: dict, device: torch.device, steps: int = 20, seed: int = 0) -> float:
    """How a training step's time grows with the batch: the time of a step at
    ``opts["batch_size"]`` over the time at a quarter of it, with the rung's switches.

    Each size trains ``steps`` steps twice (the first pass warms up) on that many images.
    """
    seconds = []
    for batch_size in (opts["batch_size"] // 4, opts["batch_size"]):
        probe = dict(opts, batch_size=batch_size, warmup_epochs=0.0, schedule="constant")
        result = d2l.train(make_net(seed), [device], num_epochs=2,
                           num_train=steps * batch_size, num_test=batch_size, seed=seed,
                           verbose=False, **probe)
        seconds.append(result.epoch_seconds[-1])
    return seconds[1] / seconds[0]


def run(rungs: Sequence[Rung], device: torch.device, num_epochs: int = 10,
        num_train: int | None = None, num_test: int | None = None, seed: int = 0,
        probe: bool | None = None, verbose: bool = True) -> list[RungResult]:
    """Run each rung that ``device`` supports for ``num_epochs`` (the first is a warm-up).

    A systems rung that is slower than the fastest systems rung before it is reported and
    then left out of the rungs that follow (``kept=False``): a tip that does not pay on
    this hardware is dropped, as a reader would drop it. With ``probe`` (default: on a GPU;
    on a CPU it would double the run) each rung but the first is also timed at a quarter of
    its batch (:func:`batch_growth`) to tell what bounds it (:attr:`RungResult.bound`).

    MFU is taken against the fastest matrix product the device offers for the rung: its
    precision's rate, or float32's where that is faster (CPUs without native bf16
    instructions emulate bf16 and run it slower than float32).
    """
    if num_epochs < 4:
        raise ValueError(f"num_epochs={num_epochs}: the first epoch is a warm-up and at least "
                         "three more are timed; use num_epochs >= 4.")
    device = torch.device(device)
    if probe is None:
        probe = device.type == "cuda"
    rungs = applicable(rungs, device)
    n = len(fashion_mnist.load(True, num_examples=num_train)[1])
    flops = train_flops_per_image(make_net(seed)) * n
    peaks: dict[str, float] = {}
    results: list[RungResult] = []
    dropped: list[str] = []
    for i, rung in enumerate(rungs):
        opts = options(rungs, i, dropped)
        precision = opts.get("amp") or "fp32"
        for p in ("fp32", precision):
            if p not in peaks:  # cuDNN convolutions use TF32 by default on GPUs
                peaks[p] = matmul_flops_per_second(device, DTYPES[p],
                                                   tf32=device.type == "cuda")
        net = make_net(seed)
        if rung.kind == "reference":
            result = d2l_loop(net, device, opts["batch_size"], opts["lr"], num_epochs,
                              num_train, num_test)
        else:
            result = d2l.train(net, [device], num_epochs=num_epochs, num_train=num_train,
                               num_test=num_test, seed=seed, verbose=False, **opts)
        this = RungResult(rung.name, rung.kind, opts, result.epoch_seconds,
                          result.test_acc[-1], n, flops, max(peaks[precision], peaks["fp32"]))
        best = min((r.seconds for r in results if r.kept and r.kind == rung.kind),
                   default=None)
        if rung.kind == "systems" and best is not None and this.seconds > best:
            this.kept = False  # slower here: the rungs above go on without it
            dropped.append(rung.name)
        if probe and rung.kind != "reference":
            this.batch_growth = batch_growth(opts, device, seed=seed)
        results.append(this)
        if verbose:
            print(f"{rung.name}: {this.seconds:.2f} s/epoch, test acc {this.test_acc:.3f}"
                  + ("" if this.kept else " (slower: not kept)"), flush=True)
    return results


COLUMNS = ["rung", "kind", "kept", "s/epoch", "min", "max", "images/s", "test acc", "speed-up",
           "MFU", "4x batch", "bound"]
FORMATS = ["", "", "", ".2f", ".2f", ".2f", ".0f", ".3f", ".2f", ".1%", "", ""]


def rows(results: Sequence[RungResult]) -> list[list]:
    """One row per rung, in :data:`COLUMNS`' order; the speed-up is over the first rung."""
    first = results[0].seconds
    return [[r.name, r.kind, "yes" if r.kept else "no", r.seconds, min(r.timed), max(r.timed),
             r.images_per_second, r.test_acc, first / r.seconds, r.mfu,
             "-" if r.batch_growth is None else f"{r.batch_growth:.1f}x time", r.bound]
            for r in results]


def table(results: Sequence[RungResult]) -> str:
    """The ladder as a text table."""
    return text_table(COLUMNS, rows(results), FORMATS, left=3)


def plot(results: Sequence[RungResult], ax=None):
    """A bar per rung: the median seconds per epoch, min to max as an error bar, the
    speed-up over the first rung on top; rungs that were not kept are hatched."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.35 * len(results) + 1))
    colors = {"reference": "#888888", "systems": "#0a7d91", "algorithmic": "#c46a12"}
    names = [r.name for r in results][::-1]
    medians = [r.seconds for r in results][::-1]
    errors = [[r.seconds - min(r.timed) for r in results][::-1],
              [max(r.timed) - r.seconds for r in results][::-1]]
    bars = ax.barh(names, medians, xerr=errors, capsize=2,
                   color=[colors[r.kind] for r in results][::-1],
                   edgecolor="white")
    first = results[0].seconds
    for bar, r in zip(bars, results[::-1]):
        if not r.kept:
            bar.set_hatch("//")
        ax.text(max(r.timed), bar.get_y() + bar.get_height() / 2,  # after the error bar
                f"  {first / r.seconds:.2f}x", va="center", fontsize=9)
    ax.set_xlabel("seconds per epoch (median; min to max)")
    ax.margins(x=0.15)
    return ax
