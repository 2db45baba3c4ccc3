"""The speed ladder of chapter 3: one training run made faster one switch at a time.

Chapter 2's ResNet-18 on Fashion-MNIST, first with d2l's own loop, then with
``d2l.train`` and its fast-path switches turned on one rung at a time (each rung
keeps the switches of the rungs before it). The *systems* rungs keep the work fixed
(epochs, images, batch, learning rate, schedule) and change only how it is done; the
*algorithmic* rung after them changes the work itself and is judged by the time it
takes to reach an accuracy, not by seconds per epoch.

Used by the chapter and by ``benchmarks/speed_ladder.py`` (PyTorch only)::

    from d2l_ext import ladder
    results = ladder.run(ladder.LADDER, d2l.try_gpu(), num_epochs=10)
    print(ladder.table(results))
"""

from __future__ import annotations

import copy
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch.utils import data
from torch.utils.flop_counter import FlopCounterMode

from d2l_ext import fashion_mnist, tuning
from d2l_ext import torch as d2l
from d2l_ext.utils import Timer, Timing, TrainResult, text_table


@dataclass(frozen=True)
class Rung:
    """One step of the ladder: the switches it adds to the rungs before it.

    ``change`` holds ``d2l.train``'s keyword arguments, and ``bias=False`` for a network
    without the biases that BatchNorm cancels.
    """

    name: str
    kind: str  # "reference", "systems", "algorithmic" or "check"
    change: dict = field(default_factory=dict)
    needs_cuda: bool = False


#: d2l's settings: batch 256, learning rate 0.1 with no warm-up, 4 loader processes.
BASE = dict(batch_size=256, lr=0.1, warmup_epochs=0.0, num_workers=4, pin_memory=False,
            persistent_workers=False)


def make_ladder(batch_size: int = 256, lr: float = 0.1, scale: int = 4) -> list[Rung]:
    """The rungs, for a base batch and rate: d2l's 256 and 0.1, or on a CPU a smaller batch
    with the rate scaled by the same factor. The algorithmic rung trains with ``scale``
    times the batch and the rate, warmed up over its first epoch, then decayed (cosine)."""
    big = batch_size * scale
    return [
        Rung("d2l's loop", "reference", dict(batch_size=batch_size, lr=lr)),
        Rung("d2l.train", "systems"),
        Rung("+ persistent workers", "systems", dict(persistent_workers=True)),
        Rung("+ pinned memory", "systems", dict(pin_memory=True), needs_cuda=True),
        Rung("+ data on the device", "systems", dict(data_on_device=True)),
        Rung("+ cudnn.benchmark, TF32", "systems", dict(cudnn_benchmark=True, tf32=True),
             needs_cuda=True),
        Rung("+ channels_last", "systems", dict(channels_last=True)),
        Rung("+ no bias before BatchNorm", "systems", dict(bias=False)),
        Rung("+ bf16 autocast", "systems", dict(amp="bf16")),
        Rung("+ fused SGD", "systems", dict(fused=True)),
        Rung("+ torch.compile", "systems", dict(compile="default")),
        Rung("+ CUDA graphs", "systems", dict(compile="reduce-overhead"), needs_cuda=True),
        Rung(f"batch {big}, lr {lr * scale:g}, 1-epoch warm-up, cosine", "algorithmic",
             dict(batch_size=big, lr=lr * scale, warmup_epochs=1.0, schedule="cosine")),
    ]


LADDER = make_ladder()


def applicable(rungs: Sequence[Rung], device: torch.device) -> list[Rung]:
    """The rungs that can run on ``device`` (the CUDA-only ones need a GPU)."""
    return [r for r in rungs if torch.device(device).type == "cuda" or not r.needs_cuda]


def options(rungs: Sequence[Rung], index: int, dropped: Sequence[str] = ()) -> dict:
    """The switches at ``rungs[index]``: :data:`BASE` plus the change of that rung and of
    every rung before it, except the rungs named in ``dropped``."""
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


def _to_tensor(pic) -> torch.Tensor:
    """torchvision's ``transforms.ToTensor()`` for a PIL image, transcribed."""
    x = torch.from_numpy(np.array(pic, np.uint8, copy=True))
    x = x.view(pic.size[1], pic.size[0], len(pic.getbands())).permute((2, 0, 1)).contiguous()
    return x.to(dtype=torch.get_default_dtype()).div(255)


class D2LFashionMNIST(data.Dataset):
    """Fashion-MNIST as d2l 1.0.3 reads it: ``torchvision.datasets.FashionMNIST`` with
    ``transforms.ToTensor()``, transcribed (torchvision is not needed). Each example is
    made a PIL image and then a float tensor, one at a time, in the loader's workers."""

    def __init__(self, train: bool = True, num_examples: int | None = None) -> None:
        images, labels = fashion_mnist.load(train, num_examples=num_examples)
        self.data = torch.from_numpy(images.copy())
        self.targets = torch.from_numpy(labels.astype("int64"))

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        from PIL import Image  # Pillow comes with matplotlib

        img, target = self.data[index], int(self.targets[index])
        return _to_tensor(Image.fromarray(img.numpy())), target


def load_data_d2l(batch_size: int, num_train: int | None = None,
                  num_test: int | None = None) -> tuple[data.DataLoader, data.DataLoader]:
    """d2l 1.0.3's ``load_data_fashion_mnist``: :class:`D2LFashionMNIST` in two data loaders
    with 4 worker processes each (started anew every epoch), the training set shuffled."""
    workers = d2l.get_dataloader_workers()
    return (data.DataLoader(D2LFashionMNIST(True, num_train), batch_size, shuffle=True,
                            num_workers=workers),
            data.DataLoader(D2LFashionMNIST(False, num_test), batch_size, shuffle=False,
                            num_workers=workers))


def d2l_loop(net: nn.Module, device: torch.device, batch_size: int, lr: float,
             num_epochs: int, num_train: int | None = None,
             num_test: int | None = None, seed: int = 0) -> TrainResult:
    """The training loop of d2l-en's "Concise Implementation for Multiple GPUs" (d2l 1.0.3),
    transcribed for one device, with d2l's data loader (:func:`load_data_d2l`).

    Our changes: the data may be cut to ``num_train``/``num_test`` examples; the random
    generator is seeded with ``seed`` just before d2l's ``net.apply(init_weights)``, so that
    the weights it draws are those of :func:`make_net`; the timer starts and stops after a
    barrier (so that it measures the work, not the queueing); the measures are returned
    instead of plotted. d2l's ``train`` itself lives in the chapter, not in the d2l package,
    and d2l.torch needs torchvision, so it is not imported.
    """
    train_iter, test_iter = load_data_d2l(batch_size, num_train, num_test)
    torch.manual_seed(seed)
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


def _matmul_rate(n: int, device: torch.device, dtype: torch.dtype,
                 seconds: float) -> tuple[float, float]:
    """FLOP/s of ``n`` x ``n`` products (the best of three timings) and the time of one."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    one = d2l.measure(lambda: a @ b, device, repeats=1, warmup=1).min
    repeats = max(1, round(seconds / 3 / one))

    def products() -> None:
        for _ in range(repeats):
            a @ b

    timing = d2l.measure(products, device, repeats=3, warmup=0)
    return 2 * n ** 3 * repeats / timing.min, one


def matmul_flops_per_second(device: torch.device, dtype: torch.dtype = torch.float32,
                            tf32: bool = False, sizes: Sequence[int] | None = None,
                            seconds: float = 0.5) -> float:
    """The best rate of square matrix products on ``device`` this run measured (FLOP/s).

    Each size ``n`` (default: 512 to 4096 on a CPU, 2048 to 8192 on an accelerator) is
    timed between barriers: three runs of enough products to last about ``seconds / 3``.
    Small products do not reach a device's plateau, so the largest rate over the sizes is
    returned. A larger size is tried only while one product of the last size, times 8 (the
    cube), stays under ``seconds``: a CPU that emulates bf16 stops early. With ``tf32``
    float32 products may use TensorFloat-32 (as cuDNN's convolutions do by default).

    This is a measured stand-in for the device's peak; a datasheet's peak is higher.
    """
    device = torch.device(device)
    if sizes is None:
        sizes = (512, 1024, 2048, 4096) if device.type == "cpu" else (2048, 4096, 8192)
    best = 0.0
    with tuning.backend_flags(device, cudnn_benchmark=False, tf32=tf32):
        for n in sizes:
            rate, one = _matmul_rate(n, device, dtype, seconds)
            best = max(best, rate)
            if one * 8 > seconds:
                break
    return best


# ---------------------------------------------------------------- running the ladder
#: matrix-product precisions: "tf32" is float32 with TensorFloat-32 allowed (GPUs)
DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16,
          "fp16": torch.float16}

FASTER, NO_GAIN, DROPPED = "faster", "no clear gain", "slower: dropped"
BASE_SLOWER = "slower (kept: the base)"


def verdict(this: Timing, best: Timing, droppable: bool = True) -> str:
    """A systems rung against the best kept rung below it, by their ranges (min to max):
    :data:`FASTER` if every epoch of it was faster than every epoch of the best,
    :data:`DROPPED` if every one was slower (:data:`BASE_SLOWER` for the first systems
    rung, which the others build on), else :data:`NO_GAIN`: the difference is noise."""
    if best.clearly_faster(this):
        return DROPPED if droppable else BASE_SLOWER
    return FASTER if this.clearly_faster(best) else NO_GAIN


@dataclass
class RungResult:
    """What one rung measured. Times are of the epochs after the first (warm-up)."""

    name: str
    kind: str
    options: dict
    epoch_seconds: list[float]
    test_accs: list[float]
    num_train: int
    flops_per_epoch: float
    peak_flops: float
    verdict: str = ""

    @property
    def kept(self) -> bool:
        """False for a systems rung that was clearly slower: the rungs above leave it out."""
        return self.verdict != DROPPED

    @property
    def batch_size(self) -> int:
        return self.options["batch_size"]

    @property
    def steps(self) -> int:
        """Training steps per epoch (every batch is full: see :func:`run`)."""
        return self.num_train // self.batch_size

    @property
    def timed(self) -> list[float]:
        return self.epoch_seconds[1:] or self.epoch_seconds

    @property
    def timing(self) -> Timing:
        """The timed epochs as a :class:`d2l_ext.utils.Timing` (median and range)."""
        return Timing(tuple(self.timed))

    @property
    def seconds(self) -> float:
        """The median time of an epoch."""
        return statistics.median(self.timed)

    @property
    def test_acc(self) -> float:
        """The test accuracy after the last epoch."""
        return self.test_accs[-1]

    @property
    def images_per_second(self) -> float:
        return self.num_train / self.seconds

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation: the counted FLOPs per second over the measured
        matrix-product rate (not a datasheet's peak)."""
        return self.flops_per_epoch / self.seconds / self.peak_flops

    def time_to(self, target: float) -> float | None:
        """Training seconds, every epoch counted (the first too: a real run pays it), until
        the test accuracy after an epoch first reached ``target``; ``None`` if it never did."""
        total = 0.0
        for seconds, acc in zip(self.epoch_seconds, self.test_accs):
            total += seconds
            if acc >= target:
                return total
        return None


def make_net(seed: int = 0, bias: bool = True) -> nn.Module:
    """Chapter 2's ResNet-18 with d2l's initialisation; the same weights for every rung.

    ``bias=False``: the same network and weights without the biases of the convolutions
    that BatchNorm follows (BatchNorm subtracts them again: the same function in training).
    """
    torch.manual_seed(seed)
    net = d2l.resnet18(10)
    torch.manual_seed(seed)
    net.apply(init_weights)
    if bias:
        return net
    lean = d2l.resnet18(10, bias=False)
    missing, _ = lean.load_state_dict(net.state_dict(), strict=False)
    assert not missing, missing
    return lean


def _peak(device: torch.device, amp: str | None, peaks: dict[str, float]) -> float:
    """The fastest matrix-product rate a rung's arithmetic can use: float32's (TF32's on a
    GPU, as cuDNN's convolutions use it by default) or its autocast precision's, whichever
    is faster (CPUs without native bf16 instructions run bf16 slower than float32)."""
    names = ["fp32"] + (["tf32"] if device.type == "cuda" else []) + ([amp] if amp else [])
    for name in names:
        if name not in peaks:
            peaks[name] = matmul_flops_per_second(device, DTYPES[name], tf32=name == "tf32")
    return max(peaks[name] for name in names)


def _run_rung(name: str, kind: str, opts: dict, device: torch.device, num_epochs: int,
              num_train: int, num_test: int | None, seed: int, flops: float,
              peaks: dict[str, float]) -> RungResult:
    train_opts = dict(opts)
    net = make_net(seed, bias=train_opts.pop("bias", True))
    if kind == "reference":
        result = d2l_loop(net, device, opts["batch_size"], opts["lr"], num_epochs, num_train,
                          num_test, seed=seed)
    else:
        result = d2l.train(net, [device], num_epochs=num_epochs, num_train=num_train,
                           num_test=num_test, seed=seed, verbose=False, **train_opts)
    return RungResult(name, kind, opts, list(result.epoch_seconds), list(result.test_acc),
                      num_train, flops, _peak(device, opts.get("amp"), peaks))


def run(rungs: Sequence[Rung], device: torch.device, num_epochs: int = 10,
        num_train: int | None = None, num_test: int | None = None, seed: int = 0, *,
        peaks: dict[str, float] | None = None, recheck: bool = False,
        verbose: bool = True) -> list[RungResult]:
    """Run each rung that ``device`` supports for ``num_epochs`` (the first is a warm-up).

    Every rung trains on the same images: the first ``num_train`` (default: all), cut to a
    multiple of the largest batch of the rungs, so that no rung has a partial batch and
    ``drop_last`` (on under ``compile``) changes no rung's work. Every rung starts from the
    same weights (:func:`make_net`).

    A systems rung is compared with the fastest kept rung below it by their ranges
    (:func:`verdict`); one that was clearly slower is reported and then left out of the
    rungs that follow (``kept`` is False). With ``recheck`` the first systems rung runs
    again at the end (kind ``"check"``): the difference between its two runs is the drift
    of the machine during the ladder.

    MFU is taken against the fastest matrix product this run measured for the rung's
    precision (:func:`matmul_flops_per_second`); ``peaks`` may hold rates already measured
    (keys of :data:`DTYPES`) and receives those measured here.
    """
    if num_epochs < 4:
        raise ValueError(f"num_epochs={num_epochs}: the first epoch is a warm-up and at least "
                         "three more are timed; use num_epochs >= 4.")
    device = torch.device(device)
    rungs = applicable(rungs, device)
    largest = max(options(rungs, i)["batch_size"] for i in range(len(rungs)))
    available = len(fashion_mnist.load(True, num_examples=num_train)[1])
    n = available - available % largest
    if n == 0:
        raise ValueError(f"{available} training images are fewer than the largest batch of "
                         f"the rungs ({largest}).")
    flops = train_flops_per_image(make_net(seed)) * n
    peaks = {} if peaks is None else peaks
    results: list[RungResult] = []
    dropped: list[str] = []

    def report(this: RungResult) -> None:
        results.append(this)
        if verbose:
            print(f"{this.name}: {this.timing.text('s')} per epoch, test acc "
                  f"{this.test_acc:.3f}" + (f" ({this.verdict})" if this.verdict else ""),
                  flush=True)

    for i, rung in enumerate(rungs):
        opts = options(rungs, i, dropped)
        this = _run_rung(rung.name, rung.kind, opts, device, num_epochs, n, num_test, seed,
                         flops, peaks)
        below = [r for r in results if r.kept and r.kind in ("reference", "systems")]
        if rung.kind == "systems" and below:
            best = min(below, key=lambda r: r.seconds)
            first = not any(r.kind == "systems" for r in results)
            this.verdict = verdict(this.timing, best.timing, droppable=not first)
            if not this.kept:
                dropped.append(rung.name)
        elif rung.kind == "algorithmic":
            this.verdict = "changes the work"
        report(this)
    systems = [i for i, r in enumerate(rungs) if r.kind == "systems"]
    if recheck and systems:
        first = systems[0]
        this = _run_rung(f"{rungs[first].name}, again", "check", options(rungs, first),
                         device, num_epochs, n, num_test, seed, flops, peaks)
        this.verdict = "drift check"
        report(this)
    return results


COLUMNS = ["rung", "kind", "verdict", "batch", "steps", "s/epoch", "min", "max", "images/s",
           "test acc", "speed-up", "MFU"]
FORMATS = ["", "", "", "d", "d", ".2f", ".2f", ".2f", ".0f", ".3f", ".2f", ".1%"]


def rows(results: Sequence[RungResult]) -> list[list]:
    """One row per rung, in :data:`COLUMNS`' order; the speed-up is over the first rung."""
    first = results[0].seconds
    return [[r.name, r.kind, r.verdict or "-", r.batch_size, r.steps, r.seconds,
             min(r.timed), max(r.timed), r.images_per_second, r.test_acc, first / r.seconds,
             r.mfu]
            for r in results]


def table(results: Sequence[RungResult]) -> str:
    """The ladder as a text table."""
    return text_table(COLUMNS, rows(results), FORMATS, left=3)


def plot(results: Sequence[RungResult], ax=None):
    """A bar per rung: the median seconds per epoch, min to max as an error bar, the
    speed-up over the first rung on top; rungs that were dropped are hatched."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.35 * len(results) + 1))
    colors = {"reference": "#888888", "systems": "#0a7d91", "algorithmic": "#c46a12",
              "check": "#bbbbbb"}
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
