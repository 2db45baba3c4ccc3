"""The speed ladder of chapter 3: one training run made faster one switch at a time.

Chapter 2's ResNet-18 on Fashion-MNIST, first with d2l's own loop, then with
``d2l.train`` and its fast-path switches turned on one rung at a time (each rung
keeps the switches of the rungs before it). The *systems* rungs keep the work fixed
(epochs, images, batch, learning rate, schedule) and change only how it is done; the
*algorithmic* rung after them changes the work itself and is judged by the time it
takes to reach an accuracy, not by seconds per epoch.

Used by the chapter and by ``benchmarks/speed_ladder.py`` (PyTorch only)::

    from d2l_ext import ladder
    device = d2l.try_gpu()
    amp = ladder.choose_amp(ladder.amp_step_timings(device, 256))  # bf16 may be slow on a CPU
    results = ladder.run(ladder.make_ladder(amp=amp), device, num_epochs=10)
    print(ladder.table(results))

Everything it prints or draws for the reader is in the reader's language
(:func:`d2l_ext.i18n.message`, :func:`d2l_ext.i18n.label`).
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

from d2l_ext import fashion_mnist, timing, tuning
from d2l_ext import torch as d2l
from d2l_ext.i18n import Text, label, message
from d2l_ext.utils import Timer, Timing, TrainResult, text_table

#: The kinds of rung, in English and Chinese.
KINDS = {"reference": ("reference", "参照"), "systems": ("systems", "系统类"),
         "algorithmic": ("algorithmic", "算法类"), "check": ("drift check", "漂移检查")}


@dataclass(frozen=True)
class Rung:
    """One step of the ladder: the switches it adds to the rungs before it.

    ``change`` holds ``d2l.train``'s keyword arguments, and ``bias=False`` for a network
    without the biases that BatchNorm cancels. ``name`` is English (and names the rung in
    ``options``' ``dropped``); ``zh`` is its Chinese name.
    """

    name: str
    kind: str  # "reference", "systems", "algorithmic" or "check"
    change: dict = field(default_factory=dict)
    needs_cuda: bool = False
    zh: str = ""

    @property
    def title(self) -> Text:
        """The rung's name in the reader's language (English and Chinese kept)."""
        return Text(self.name, self.zh or self.name)


#: d2l's settings: batch 256, learning rate 0.1 with no warm-up, 4 loader processes
#: started anew every epoch.
BASE = dict(batch_size=256, lr=0.1, warmup_epochs=0.0, num_workers=4, pin_memory=False,
            persistent_workers=False)

#: The autocast rung for each 16-bit format (:func:`make_ladder`'s ``amp``).
AMP_RUNGS = {"bf16": ("+ bf16 autocast", "+ bf16 autocast"),
             "fp16": ("+ fp16 autocast, gradient scaler", "+ fp16 autocast 与梯度缩放器")}


def make_ladder(batch_size: int = 256, lr: float = 0.1, scale: int = 4,
                amp: str | None = "bf16") -> list[Rung]:
    """The rungs, for a base batch and rate: d2l's 256 and 0.1, or on a CPU a smaller batch
    with the rate scaled by the same factor. The algorithmic rung trains with ``scale``
    times the batch and the rate, warmed up over its first epoch, then decayed (cosine).

    ``amp`` is the autocast rung's 16-bit format, ``"bf16"`` or ``"fp16"`` (with a gradient
    scaler; the fused SGD rung above it then spares the scaler's synchronisation), or
    ``None`` to leave the rung out: choose it by measurement (:func:`choose_amp`).
    """
    tuning.check_options(amp, None, "constant")
    big = batch_size * scale
    workers = BASE["num_workers"]
    rungs = [
        Rung("d2l's loop", "reference", dict(batch_size=batch_size, lr=lr),
             zh="d2l 的训练循环"),
        Rung(f"d2l.train, {workers} loader workers restarted each epoch", "systems",
             zh=f"d2l.train，{workers} 个加载器工作进程（每轮重启）"),
        Rung("+ persistent workers", "systems", dict(persistent_workers=True),
             zh="+ 常驻工作进程"),
        Rung("+ pinned memory", "systems", dict(pin_memory=True), needs_cuda=True,
             zh="+ 锁页内存"),
        Rung("+ data on the device", "systems", dict(data_on_device=True),
             zh="+ 数据放在设备上"),
        Rung("+ cudnn.benchmark, TF32", "systems", dict(cudnn_benchmark=True, tf32=True),
             needs_cuda=True, zh="+ cudnn.benchmark 与 TF32"),
        Rung("+ channels_last", "systems", dict(channels_last=True), zh="+ channels_last"),
        Rung("+ no bias before BatchNorm", "systems", dict(bias=False),
             zh="+ 批量规范化之前不加偏置"),
    ]
    if amp is not None:
        rungs.append(Rung(AMP_RUNGS[amp][0], "systems", dict(amp=amp), zh=AMP_RUNGS[amp][1]))
    rungs += [
        Rung("+ fused SGD", "systems", dict(fused=True), zh="+ 融合 SGD"),
        Rung("+ torch.compile", "systems", dict(compile="default"), zh="+ torch.compile"),
        Rung("+ CUDA graphs", "systems", dict(compile="reduce-overhead"), needs_cuda=True,
             zh="+ CUDA 图"),
        Rung(f"batch {big}, lr {lr * scale:g}, 1-epoch warm-up, cosine", "algorithmic",
             dict(batch_size=big, lr=lr * scale, warmup_epochs=1.0, schedule="cosine"),
             zh=f"批量 {big}、学习率 {lr * scale:g}、预热 1 轮、余弦衰减"),
    ]
    return rungs


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


def switches(rungs: Sequence[Rung], index: int) -> str:
    """The keyword arguments that ``rungs[index]`` adds, as code; for the first systems
    rung, which adds none, the loader and warm-up settings it trains with (:data:`BASE`)."""
    rung = rungs[index]
    change = rung.change
    if not change and rung.kind == "systems":
        change = {k: v for k, v in BASE.items() if k not in ("batch_size", "lr")}
    return ", ".join(f"{k}={v!r}" for k, v in change.items())


# ---------------------------------------------------------------- mixed precision
def amp_formats(device_type: str, capability: tuple[int, int] | None = None,
                hip: bool = False) -> list[str]:
    """The 16-bit autocast formats worth measuring, in order of preference, on a device of
    type ``device_type`` (for CUDA, a GPU of compute ``capability``): bf16 (no gradient
    scaler), then, on CUDA, fp16. A GPU older than Ampere (capability 8.0), whose tensor
    cores lack bf16, only emulates it: there fp16 alone is a candidate. ROCm GPUs (``hip``)
    count as having bf16, as ``torch.cuda.is_bf16_supported`` says."""
    if device_type != "cuda":
        return ["bf16"]
    native_bf16 = hip or (capability is not None and tuple(capability) >= (8, 0))
    return (["bf16"] if native_bf16 else []) + ["fp16"]


def amp_candidates(device: torch.device | str) -> list[str]:
    """:func:`amp_formats` for ``device``: for a GPU, its own capability (not the current
    GPU's, which ``torch.cuda.is_bf16_supported`` would ask about)."""
    device = d2l.as_device(device)
    if device.type != "cuda":
        return amp_formats(device.type)
    return amp_formats("cuda", torch.cuda.get_device_capability(device),
                       hip=bool(torch.version.hip))


def choose_amp(timings: dict[str, Timing]) -> str | None:
    """The autocast format for the ladder from measured steps (``timings["fp32"]`` and one
    per candidate, in order of preference): the first candidate that float32 is not clearly
    faster than, unless a later one is clearly faster than it; ``None`` if float32 was
    clearly faster than every candidate (the rung is then left out)."""
    fp32 = timings["fp32"]
    usable = [name for name in timings if name != "fp32"
              and not fp32.clearly_faster(timings[name])]
    if not usable:
        return None
    choice = usable[0]
    for name in usable[1:]:
        if timings[name].clearly_faster(timings[choice]):
            choice = name
    return choice


def amp_step_timings(device: torch.device, batch_size: int, repeats: int = 3,
                     seed: int = 0) -> dict[str, Timing]:
    """Time a training step of :func:`make_net` in float32 and in each of
    :func:`amp_candidates` (autocast; fp16 with a gradient scaler), ``repeats`` times each,
    the precisions in turns, on random images (what :func:`choose_amp` decides from)."""
    device = d2l.as_device(device)
    net = make_net(seed).to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    X = torch.rand(batch_size, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (batch_size,), device=device)

    def step(amp: str | None, scaler: torch.amp.GradScaler) -> None:
        with tuning.autocast(device, amp):
            loss = loss_fn(net(X), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    names = ["fp32", *amp_candidates(device)]
    steps = {}
    for name in names:
        amp = None if name == "fp32" else name
        scaler = tuning.grad_scaler(device, amp)
        steps[name] = (lambda amp=amp, scaler=scaler: step(amp, scaler))
        steps[name]()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(repeats):
        for name in names:
            times[name] += d2l.measure(steps[name], device, repeats=1, warmup=0).times
    return {name: Timing(tuple(t)) for name, t in times.items()}


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
    device = d2l.as_device(device)
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


def conv_flops_per_second(device: torch.device | str, dtype: torch.dtype = torch.float32,
                          batch_size: int = 32, channels: int = 64, size: int = 28) -> float:
    """The rate of a 3x3 convolution's forward pass on ``device`` (FLOP/s, the fastest of
    five blocks of at least 50 ms): the library the network's convolutions run in (cuDNN,
    oneDNN), which on a CPU may be faster than the matrix products of ``torch.mm`` (MKL):
    a reference rate for the step's arithmetic must be at least this."""
    device = d2l.as_device(device)
    x = torch.randn(batch_size, channels, size, size, device=device).to(dtype)
    w = torch.randn(channels, channels, 3, 3, device=device).to(dtype)
    flops = 2 * batch_size * channels * channels * 9 * size * size
    with torch.no_grad():
        measured = timing.time_per_call(
            lambda: torch.nn.functional.conv2d(x, w, padding=1), device, repeats=5, warmup=2)
    return flops / measured.min


def batchnorm_backend(device: torch.device, amp: str | None, channels_last: bool = False,
                      batch_size: int = 8) -> str:
    """Which kernel library eager BatchNorm takes on ``device`` for the inputs autocast gives
    it (``"cudnn"``, ``"miopen"``, ``"native"``; ``"native"`` on a CPU), as PyTorch's own
    ``torch._C._select_batch_norm_backend`` decides."""
    dtype = tuning.AMP_DTYPES[amp] if amp else torch.float32
    x = torch.zeros(batch_size, 64, 14, 14, device=device, dtype=dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    w, b = torch.ones(64, device=device), torch.zeros(64, device=device)
    mean, var = torch.zeros(64, device=device), torch.ones(64, device=device)
    select = getattr(torch._C, "_select_batch_norm_backend", None)
    if select is None:
        return "unknown (this PyTorch does not say)"
    backend = select(x, w, b, mean, var, True, 1e-5)
    return str(backend).rsplit(".", 1)[-1].lower()


# ---------------------------------------------------------------- running the ladder
#: matrix-product precisions: "tf32" is float32 with TensorFloat-32 allowed (GPUs)
DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16,
          "fp16": torch.float16}

FASTER, NO_GAIN, DROPPED = "faster", "no clear gain", "slower: dropped"
BASE_SLOWER = "slower (kept: the base)"
CHANGES_WORK, DRIFT_CHECK = "changes the work", "drift check"
#: Each verdict in English and Chinese.
VERDICTS = {FASTER: "更快", NO_GAIN: "看不出收益", DROPPED: "更慢：舍弃",
            BASE_SLOWER: "更慢（作为基础保留）", CHANGES_WORK: "改变了工作",
            DRIFT_CHECK: "漂移检查", "": "–"}


def verdict(this: Timing, before: Timing, droppable: bool = True) -> str:
    """A systems rung against the rung it builds on (the last kept rung below it), by their
    ranges (min to max): :data:`FASTER` if every epoch of it was faster than every epoch of
    the rung below, :data:`DROPPED` if every one was slower (:data:`BASE_SLOWER` for the
    first systems rung, which the others build on), else :data:`NO_GAIN`: the difference
    is noise."""
    if before.clearly_faster(this):
        return DROPPED if droppable else BASE_SLOWER
    return FASTER if this.clearly_faster(before) else NO_GAIN


@dataclass
class RungResult:
    """What one rung measured. Times are of the epochs after the first (warm-up).

    ``name`` is a :class:`d2l_ext.i18n.Text`: the reader's language, English and Chinese
    kept (``name.en``, ``name.zh``).
    """

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
    def verdict_text(self) -> Text:
        """The verdict in the reader's language."""
        return Text(self.verdict or "–", VERDICTS.get(self.verdict, self.verdict))

    @property
    def kind_text(self) -> Text:
        """The kind of rung in the reader's language."""
        return Text(*KINDS[self.kind])

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


def _run_rung(rung: Rung, opts: dict, device: torch.device, num_epochs: int,
              num_train: int, num_test: int | None, seed: int, flops: float,
              peaks: dict[str, float]) -> RungResult:
    train_opts = dict(opts)
    net = make_net(seed, bias=train_opts.pop("bias", True))
    if rung.kind == "reference":
        result = d2l_loop(net, device, opts["batch_size"], opts["lr"], num_epochs, num_train,
                          num_test, seed=seed)
    else:
        result = d2l.train(net, [device], num_epochs=num_epochs, num_train=num_train,
                           num_test=num_test, seed=seed, verbose=False, **train_opts)
    return RungResult(rung.title, rung.kind, opts, list(result.epoch_seconds),
                      list(result.test_acc), num_train, flops,
                      _peak(device, opts.get("amp"), peaks))


def run(rungs: Sequence[Rung], device: torch.device, num_epochs: int = 10,
        num_train: int | None = None, num_test: int | None = None, seed: int = 0, *,
        peaks: dict[str, float] | None = None, recheck: bool = False,
        verbose: bool = True) -> list[RungResult]:
    """Run each rung that ``device`` supports for ``num_epochs`` (the first is a warm-up).

    Every rung trains on the same images: the first ``num_train`` (default: all), cut to a
    multiple of the largest batch of the rungs, so that no rung has a partial batch and
    ``drop_last`` (on under ``compile``) changes no rung's work. Every rung starts from the
    same weights (:func:`make_net`).

    A systems rung is compared with the rung it builds on, the last kept rung below it, by
    their ranges (:func:`verdict`); one that was clearly slower is reported and then left
    out of the rungs that follow (``kept`` is False). With ``recheck`` the first systems
    rung runs again at the end (kind ``"check"``): the difference between its two runs is
    the drift of the machine during the ladder.

    MFU is taken against the fastest matrix product this run measured for the rung's
    precision (:func:`matmul_flops_per_second`); ``peaks`` may hold rates already measured
    (keys of :data:`DTYPES`) and receives those measured here. With ``verbose`` each rung
    prints a line, in the reader's language, when it is done.
    """
    if num_epochs < 4:
        raise ValueError(f"num_epochs={num_epochs}: the first epoch is a warm-up and at least "
                         "three more are timed; use num_epochs >= 4.")
    device = d2l.as_device(device)
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
            timing, acc = this.timing.text("s"), f"{this.test_acc:.3f}"
            verdict_en = f" ({this.verdict_text.en})" if this.verdict else ""
            verdict_zh = f"（{this.verdict_text.zh}）" if this.verdict else ""
            print(message(en=f"{this.name.en}: {timing} per epoch, test acc {acc}{verdict_en}",
                          zh=f"{this.name.zh}：每轮 {timing}，测试准确率 {acc}{verdict_zh}"),
                  flush=True)

    for i, rung in enumerate(rungs):
        opts = options(rungs, i, dropped)
        this = _run_rung(rung, opts, device, num_epochs, n, num_test, seed, flops, peaks)
        below = [r for r in results if r.kept and r.kind in ("reference", "systems")]
        if rung.kind == "systems" and below:
            first = not any(r.kind == "systems" for r in results)
            this.verdict = verdict(this.timing, below[-1].timing, droppable=not first)
            if not this.kept:
                dropped.append(rung.name)
        elif rung.kind == "algorithmic":
            this.verdict = CHANGES_WORK
        report(this)
    systems = [i for i, r in enumerate(rungs) if r.kind == "systems"]
    if recheck and systems:
        first = rungs[systems[0]]
        again = Rung(f"{first.name}, again", "check", first.change, zh=f"{first.zh}，重跑")
        this = _run_rung(again, options(rungs, systems[0]), device, num_epochs, n, num_test,
                         seed, flops, peaks)
        this.verdict = DRIFT_CHECK
        report(this)
    return results


def top_of_stack(results: Sequence[RungResult]) -> RungResult:
    """The last kept systems rung: every switch that was not dropped, stacked."""
    return [r for r in results if r.kind == "systems" and r.kept][-1]


def drift(results: Sequence[RungResult]) -> float | None:
    """How much slower (positive) or faster the first systems rung ran when it ran again at
    the end (:func:`run`'s ``recheck``), by the medians; ``None`` without the re-run."""
    first = next((r for r in results if r.kind == "systems"), None)
    check = next((r for r in results if r.kind == "check"), None)
    if first is None or check is None:
        return None
    return check.seconds / first.seconds - 1


#: The table's columns (English and Chinese), and each column's format.
COLUMNS = [message(en=en, zh=zh) for en, zh in [
    ("rung", "台阶"), ("kind", "类别"), ("verdict", "判定"), ("batch", "批量"),
    ("steps", "步数"), ("s/epoch", "秒/轮"), ("min", "最小"), ("max", "最大"),
    ("images/s", "图像/秒"), ("test acc", "测试准确率"), ("to target (s)", "达到目标（秒）"),
    ("speed-up", "加速比"), ("MFU", "MFU")]]
FORMATS = ["", "", "", "d", "d", ".2f", ".2f", ".2f", ".0f", ".3f", ".1f", ".2f", ".1%"]


def rows(results: Sequence[RungResult], target: float | None = None) -> list[list]:
    """One row per rung, in :data:`COLUMNS`' order. The speed-up is over the first rung,
    ``None`` for the algorithmic rung (it does other work: :meth:`RungResult.time_to`
    judges it); "to target" is the training time until the test accuracy first reached
    ``target`` (``None``: not reached, or no target)."""
    first = results[0].seconds
    return [[r.name, r.kind_text, r.verdict_text, r.batch_size, r.steps, r.seconds,
             min(r.timed), max(r.timed), r.images_per_second, r.test_acc,
             None if target is None else r.time_to(target),
             None if r.kind == "algorithmic" else first / r.seconds, r.mfu]
            for r in results]


class _Blank:
    """A table cell with nothing to show, whatever the column's format."""

    def __format__(self, spec: str) -> str:
        return "–"


def table(results: Sequence[RungResult], target: float | None = None) -> str:
    """The ladder as a text table in the reader's language (:func:`rows`)."""
    cells = [[_Blank() if v is None else v for v in row] for row in rows(results, target)]
    return text_table(COLUMNS, cells, FORMATS, left=3)


#: The bar colour of each kind of rung.
COLORS = {"reference": "#888888", "systems": "#0a7d91", "algorithmic": "#c46a12",
          "check": "#bbbbbb"}


def plot(results: Sequence[RungResult], ax=None):
    """A bar per rung: the median seconds per epoch, min to max as an error bar, the
    speed-up over the first rung after it (none for the algorithmic rung, which does other
    work); rungs that were dropped are hatched; a legend names the colours. Every text is a
    :func:`d2l_ext.i18n.label`."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.35 * len(results) + 1.6))
    shown = results[::-1]  # the first rung on top
    names = [label(en=r.name.en, zh=r.name.zh) for r in shown]
    errors = [[r.seconds - min(r.timed) for r in shown], [max(r.timed) - r.seconds for r in shown]]
    bars = ax.barh(names, [r.seconds for r in shown], xerr=errors, capsize=2,
                   color=[COLORS[r.kind] for r in shown], edgecolor="white")
    first = results[0].seconds
    for bar, r in zip(bars, shown):
        if not r.kept:
            bar.set_hatch("//")
        if r.kind != "algorithmic":
            ax.text(max(r.timed), bar.get_y() + bar.get_height() / 2,  # after the error bar
                    f"  {first / r.seconds:.2f}x", va="center", fontsize=9)
    ax.set_xlabel(label(en="seconds per epoch (median; min to max); speed-up over the first rung",
                        zh="每轮秒数（中位数；最小值到最大值）；相对第一级的加速比"))
    ax.margins(x=0.15)
    kinds = [k for k in KINDS if any(r.kind == k for r in results)]
    handles = [Patch(color=COLORS[k], label=label(en=KINDS[k][0], zh=KINDS[k][1]))
               for k in kinds]
    if any(not r.kept for r in results):
        handles.append(Patch(facecolor="white", edgecolor="#444444", hatch="//",
                             label=label(en="dropped", zh="已舍弃")))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.8 / len(results)),
              ncol=len(handles), frameon=False, fontsize=9)
    return ax
