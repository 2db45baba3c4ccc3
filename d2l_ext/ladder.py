"""The speed ladder of the tuning-tips chapter: one training run made faster one switch at a time,
and
measured so that each verdict means something.

The multi-GPU chapter's ResNet-18 on Fashion-MNIST, first with d2l's own loop, then with
``d2l.train``'s
step (:class:`d2l_ext.torch.Training`) and its switches turned on one rung at a time (each
rung keeps the switches of the rungs before it). The *systems* rungs keep the work fixed
(images, batch, learning rate, schedule) and change only how it is done; the *algorithmic*
rungs change the work itself and are judged by the time they take to reach an accuracy.

How each rung is measured (:func:`run`):

* **One-off costs apart.** Every rung is built and warmed up first: its loader started, its
  network compiled, autotuned, recorded as a CUDA graph. The warm-up is timed and reported as
  the rung's one-off cost, never inside a timed window. Compiled rungs compile with static
  shapes, and the compiler's own counters (graphs compiled, CUDA graphs skipped) are read
  around every timed window: a window in which they moved is reported, not silently timed.
* **Rounds.** Every round runs a unit of every rung in turn (a whole epoch for the rungs
  whose loader works in epochs, ``steps`` steps for the others), the order reversed every
  other round, so that a drift of the machine falls on all rungs alike. A rung's verdict is
  the paired per-round ratio of its time per step to the rung before it: "faster" only if it
  was faster in every round, "slower" only if slower in every round, else "no clear gain".
* **Where the time goes.** Each rung's step is also split (:func:`d2l_ext.timing.split_time`)
  into the device's time (CUDA events, the step queued behind a blocker), the host's time to
  issue it, and the wall time: a rung whose host takes longer than its device is
  *host-bound*, and a switch that shortens the device's work cannot show in its wall time.
  On a CPU the host does the work: the three are one.
* **Achieved FLOP/s against one figure.** MFU divides every rung's counted FLOP/s by one fixed
  peak: the GPU's dense bf16 datasheet peak (:mod:`d2l_ext.datasheets`), or on a device
  without one, the fastest matrix product measured on it.
* **Time to an accuracy** (:func:`time_to_target`): fresh runs from several seeds, the test
  accuracy read every quarter epoch, steady training time and one-off time reported apart.

Used by the chapter and by ``benchmarks/speed_ladder.py`` (PyTorch only).
"""

from __future__ import annotations

import contextlib
import copy
import math
import re
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch.utils import data
from torch.utils.flop_counter import FlopCounterMode

from d2l_ext import datasheets, fashion_mnist, timing, tuning, utils
from d2l_ext import torch as d2l
from d2l_ext.i18n import Text, label, message
from d2l_ext.utils import Table, Timing, text_table

#: The kinds of rung, in English and Chinese.
KINDS = {"reference": ("reference", "参照"), "systems": ("systems", "系统类"),
         "algorithmic": ("algorithmic", "算法类")}


@dataclass(frozen=True)
class Rung:
    """One step of the ladder: the switches it adds to the rungs before it.

    ``change`` holds ``d2l.train``'s keyword arguments, and ``bias=False`` for a network
    without the biases that BatchNorm cancels. ``what`` says, in English and Chinese, what
    the switch changes in the step.
    """

    name: str
    kind: str  # "reference", "systems" or "algorithmic"
    change: dict = field(default_factory=dict)
    needs_cuda: bool = False
    zh: str = ""
    what: tuple[str, str] = ("", "")

    @property
    def title(self) -> Text:
        """The rung's name in the reader's language (English and Chinese kept)."""
        return Text(self.name, self.zh or self.name)


#: d2l's settings: batch 256, learning rate 0.1 with no warm-up, 4 loader processes
#: started anew every epoch.
BASE = dict(batch_size=256, lr=0.1, warmup_epochs=0.0, num_workers=4, pin_memory=False,
            persistent_workers=False)

#: The autocast rung for each 16-bit format (:func:`make_ladder`'s ``amp``).
AMP_RUNGS = {"bf16": ("+ bf16 autocast", "+ bf16 自动混合精度",
                      ("matrix products and convolutions in bfloat16: twice TF32's tensor-core "
                       "rate, half the bytes; no gradient scaler",
                       "矩阵乘法和卷积改用 bfloat16：张量核心的速率是 TF32 的两倍，字节数减半；"
                       "不需要梯度缩放器")),
             "fp16": ("+ fp16 autocast, gradient scaler", "+ fp16 自动混合精度与梯度缩放器",
                      ("matrix products and convolutions in float16, with a gradient scaler "
                       "whose step reads a value on the host (a synchronisation) every step",
                       "矩阵乘法和卷积改用 float16，并配上梯度缩放器；"
                       "缩放器每一步都要在主机上读一个值（一次同步）"))}


def make_ladder(batch_size: int = 256, lr: float = 0.1, amp: str | None = "bf16",
                scales: Sequence[int] = (4, 8)) -> list[Rung]:
    """The rungs, for a base batch and rate: d2l's 256 and 0.1, or on a CPU a smaller batch
    with the rate scaled by the same factor. An algorithmic rung for each of ``scales``
    trains with that many times the batch and the rate, warmed up (one epoch for every
    factor of 4), then decayed (cosine).

    ``amp`` is the autocast rung's 16-bit format, ``"bf16"`` or ``"fp16"`` (with a gradient
    scaler; the fused SGD rung above it then spares the scaler's synchronisation), or
    ``None`` to leave the rung out: choose it by measurement (:func:`choose_amp`).
    """
    tuning.check_options(amp, None, "constant")
    workers = BASE["num_workers"]
    rungs = [
        Rung("d2l's loop", "reference", dict(batch_size=batch_size, lr=lr),
             zh="d2l 的训练循环",
             what=("d2l's own loop and loader: each image made a PIL image, then a tensor, in "
                   "4 worker processes started every epoch; blocking copies to the device",
                   "d2l 自己的循环和加载器：每张图像先变成 PIL 图像再变成张量，"
                   "由每轮重新启动的 4 个工作进程完成；复制到设备时阻塞")),
        Rung(f"d2l.train, {workers} loader workers restarted each epoch", "systems",
             zh=f"d2l.train，{workers} 个数据加载工作进程（每轮重启）",
             what=("the book's step: images kept as tensors, metrics summed on the device, "
                   "copies with non_blocking=True (from pageable memory CUDA may still make "
                   "such a copy wait for the device: its API documentation allows it)",
                   "本书的训练步：图像保存为张量，指标在设备上累加，复制时设 non_blocking=True"
                   "（从可分页内存出发，CUDA 仍可能让这样的复制等待设备，其 API 文档允许这样做）")),
        Rung("+ persistent workers", "systems", dict(persistent_workers=True),
             zh="+ 常驻工作进程",
             what=("the 4 worker processes are started once, not every epoch",
                   "4 个工作进程只启动一次，而不是每轮一次")),
        Rung("+ pinned memory", "systems", dict(pin_memory=True), needs_cuda=True,
             zh="+ 锁页内存",
             what=("batches arrive in page-locked memory: the copy to the GPU is a real "
                   "asynchronous DMA, and the host no longer waits for the queue",
                   "批量放在锁页内存里：复制到 GPU 是真正异步的 DMA，主机不再等队列")),
        Rung("+ data on the device", "systems", dict(data_on_device=True),
             zh="+ 数据放在设备上",
             what=("the whole uint8 dataset on the device, each batch sliced there: no workers, "
                   "no copies per step",
                   "整个 uint8 数据集放在设备上，每个批量就地切出：没有工作进程，每步也没有复制")),
        Rung("+ cudnn.benchmark, TF32", "systems", dict(cudnn_benchmark=True, tf32=True),
             needs_cuda=True, zh="+ cudnn.benchmark 与 TF32",
             what=("cuDNN times its convolution algorithms once per shape and keeps the "
                   "fastest; matrix products may use TF32",
                   "cuDNN 对每种形状把各种卷积算法计时一次，留下最快的；矩阵乘法可以用 TF32")),
        Rung("+ channels_last", "systems", dict(channels_last=True), zh="+ channels_last",
             what=("NHWC memory format, which tensor-core convolutions read without transposes",
                   "NHWC 内存格式，张量核心上的卷积读它时不必转置")),
        Rung("+ no bias before BatchNorm", "systems", dict(bias=False),
             zh="+ 批量规范化之前不加偏置",
             what=("the convolutions before BatchNorm lose the biases it cancels: less work, "
                   "the same function",
                   "批量规范化之前的卷积去掉了会被它抵消的偏置：工作更少，函数不变")),
    ]
    if amp is not None:
        name, zh, what = AMP_RUNGS[amp]
        rungs.append(Rung(name, "systems", dict(amp=amp), zh=zh, what=what))
    rungs += [
        Rung("+ fused SGD", "systems", dict(fused=True), zh="+ 融合 SGD",
             what=("one kernel updates every parameter (with fp16 it also checks the gradients "
                   "for infinities on the device, sparing the scaler's synchronisation)",
                   "一个核函数更新全部参数（用 fp16 时它还在设备上检查梯度里的无穷大，"
                   "省掉缩放器的那次同步）")),
        Rung("+ torch.compile", "systems", dict(compile="default"), zh="+ torch.compile",
             what=("Inductor fuses the element-wise work into fewer kernels (static shapes)",
                   "Inductor 把逐元素的工作融合成更少的核函数（静态形状）")),
        Rung("+ CUDA graphs", "systems", dict(compile="reduce-overhead"), needs_cuda=True,
             zh="+ CUDA 图",
             what=("the compiled forward and backward are replayed as CUDA graphs: one launch "
                   "each instead of hundreds",
                   "编译后的前向和反向作为 CUDA 图回放：各一次发射，而不是几百次")),
    ]
    if amp != "fp16":  # fp16's scaler reads a value on the host every step: no capture
        rungs.append(Rung(
            "+ the whole step in one CUDA graph", "systems",
            dict(compile="default", capture_step=True), needs_cuda=True,
            zh="+ 整个训练步录成一个 CUDA 图",
            what=("forward, backward, the update and the metric recorded once and replayed "
                  "as one graph: one launch per step",
                  "前向、反向、参数更新和指标只录制一次，作为一个图回放：每步一次发射")))
    for scale in scales:
        big, warm = batch_size * scale, max(1, round(math.log(scale, 4)))
        rungs.append(Rung(
            f"batch {big}, lr {lr * scale:g}, {warm}-epoch warm-up, cosine", "algorithmic",
            dict(batch_size=big, lr=lr * scale, warmup_epochs=float(warm), schedule="cosine"),
            zh=f"批量 {big}、学习率 {lr * scale:g}、预热 {warm} 轮、余弦衰减",
            what=(f"{scale} times the batch and the rate: fewer, larger steps; the rate warmed "
                  "up, then decayed", f"批量和学习率都乘以 {scale}：步数更少、每步更大；"
                  "学习率先预热再衰减")))
    return rungs


def applicable(rungs: Sequence[Rung], device: torch.device) -> list[Rung]:
    """The rungs that can run on ``device`` (the CUDA-only ones need a GPU)."""
    return [r for r in rungs if torch.device(device).type == "cuda" or not r.needs_cuda]


def options(rungs: Sequence[Rung], index: int) -> dict:
    """The switches at ``rungs[index]``: :data:`BASE` plus the change of that rung and of
    every rung before it but the algorithmic ones (an algorithmic rung builds on all the
    systems rungs, not on another algorithmic rung)."""
    opts = dict(BASE)
    for rung in rungs[:index]:
        if rung.kind != "algorithmic":
            opts.update(rung.change)
    opts.update(rungs[index].change)
    if opts.get("capture_step") and (
            opts.get("amp") == "fp16"  # the scaler reads a value on the host every step
            or opts.get("schedule", "constant") != "constant"  # a recorded step keeps the
            or opts.get("warmup_epochs")):  # rate it was recorded with
        opts["capture_step"] = False
        if any(r.change.get("compile") == "reduce-overhead" for r in rungs[:index]):
            opts["compile"] = "reduce-overhead"  # CUDA graphs of the compiled model instead
    return opts


def switches(rungs: Sequence[Rung], index: int) -> str:
    """The keyword arguments that ``rungs[index]`` adds, as code; for the first systems
    rung, which adds none, the loader and warm-up settings it trains with (:data:`BASE`)."""
    rung = rungs[index]
    change = rung.change
    if not change and rung.kind == "systems":
        change = {k: v for k, v in BASE.items() if k not in ("batch_size", "lr")}
    return ", ".join(f"{k}={v!r}" for k, v in change.items())


def loads_in_epochs(opts: dict) -> bool:
    """Whether a rung's loader works in epochs (worker processes, d2l's loader): its timed
    unit is then a whole epoch, so that what an epoch's start costs is in it."""
    return not opts.get("data_on_device")


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
    """:func:`amp_formats` for ``device``: for a GPU, its own capability."""
    device = d2l.as_device(device)
    if device.type != "cuda":
        return amp_formats(device.type)
    return amp_formats("cuda", torch.cuda.get_device_capability(device),
                       hip=bool(torch.version.hip))


#: fp16 must beat bf16 by more than this to be chosen: bf16 needs no scaler and no sync.
FP16_MARGIN = 0.05


def choose_amp(timings: dict[str, Timing]) -> str | None:
    """The autocast format for the ladder from measured steps (``timings["fp32"]`` and one
    per candidate, in order of preference): the first candidate that float32 is not clearly
    faster than, unless a later one is clearly faster than it *and* by more than
    :data:`FP16_MARGIN` (bf16 is preferred where it is about as fast: no gradient scaler, no
    synchronisation); ``None`` if float32 was clearly faster than every candidate."""
    fp32 = timings["fp32"]
    usable = [name for name in timings if name != "fp32"
              and not fp32.clearly_faster(timings[name])]
    if not usable:
        return None
    choice = usable[0]
    for name in usable[1:]:
        if (timings[name].clearly_faster(timings[choice])
                and timings[name].median < timings[choice].median * (1 - FP16_MARGIN)):
            choice = name
    return choice


def batchnorm_backend(device: torch.device, amp: str | None, channels_last: bool = False,
                      batch_size: int = 8) -> str:
    """Which kernel library eager BatchNorm takes on ``device`` for the inputs autocast gives
    it (``"cudnn"``, ``"miopen"``, ``"native"``; ``"native"`` on a CPU)."""
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


def amp_step_timings(device: torch.device, batch_size: int, config: dict | None = None,
                     repeats: int = 5, seed: int = 0) -> dict[str, Timing]:
    """Time a training step of :func:`make_net` in float32 and in each of
    :func:`amp_candidates`, in the configuration of the rung that adds autocast
    (``config``: ``channels_last``, ``bias``, ``cudnn_benchmark``, ``tf32``), ``repeats``
    times each, the precisions in turns, each a block of steps lasting at least 50 ms
    between barriers (what :func:`choose_amp` decides from)."""
    device = d2l.as_device(device)
    config = dict(config or {})
    memory_format = torch.channels_last if config.get("channels_last") else torch.contiguous_format
    net = make_net(seed, bias=config.get("bias", True)).to(device, memory_format=memory_format)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    X = torch.rand(batch_size, 1, 28, 28, device=device).contiguous(memory_format=memory_format)
    y = torch.randint(0, 10, (batch_size,), device=device)

    def step(amp: str | None, scaler: torch.amp.GradScaler) -> None:
        with tuning.autocast(device, amp):
            loss = loss_fn(net(X), y)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    names = ["fp32", *amp_candidates(device)]
    times: dict[str, list[float]] = {name: [] for name in names}
    with tuning.backend_flags(device, config.get("cudnn_benchmark", False),
                              config.get("tf32", False)):
        steps, calls = {}, {}
        for name in names:
            amp = None if name == "fp32" else name
            scaler = tuning.grad_scaler(device, amp)
            steps[name] = (lambda amp=amp, scaler=scaler: step(amp, scaler))
            for _ in range(3):
                steps[name]()  # warm-up of the exact step (autotuning included)
            calls[name] = timing.calls_per_block(steps[name], device)
        for _ in range(repeats):
            for name in names:
                d2l.synchronize(device)
                start = time.perf_counter()
                for _ in range(calls[name]):
                    steps[name]()
                d2l.synchronize(device)
                times[name].append((time.perf_counter() - start) / calls[name])
    return {name: Timing(tuple(t), repetitions=calls[name]) for name, t in times.items()}


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


class D2LLoop:
    """The training loop of d2l-en's "Concise Implementation for Multiple GPUs" (d2l 1.0.3),
    transcribed for one device, with d2l's data loader (:func:`load_data_d2l`), driven a step
    at a time as :class:`d2l_ext.torch.Training` is: ``batches()``, ``step(X, y)``,
    ``test_counts()``.

    Our changes: the data may be cut to ``num_train``/``num_test`` examples; the random
    generator is seeded with ``seed`` just before d2l's ``net.apply(init_weights)``, so that
    the weights it draws are those of :func:`make_net`. Its step is d2l's: a blocking copy of
    each batch, ``zero_grad``, forward, backward, ``step`` (on CUDA through d2l's
    ``nn.DataParallel`` wrapper).
    """

    def __init__(self, net: nn.Module, device: torch.device, batch_size: int, lr: float,
                 num_train: int | None = None, num_test: int | None = None,
                 seed: int = 0) -> None:
        self.device = device
        self.train_iter, self.test_iter = load_data_d2l(batch_size, num_train, num_test)
        torch.manual_seed(seed)
        net.apply(init_weights)
        self.net = net.to(device)
        self.model = (nn.DataParallel(self.net, device_ids=[device]) if device.type == "cuda"
                      else self.net)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr)
        self.loss = nn.CrossEntropyLoss()
        self.num_batches = len(self.train_iter)

    def flags(self):
        return contextlib.nullcontext()

    def start_epoch(self, epoch: int) -> None:
        self.model.train()

    def batches(self):
        for X, y in self.train_iter:
            yield X.to(self.device), y.to(self.device)

    def step(self, X: torch.Tensor, y: torch.Tensor) -> None:
        self.optimizer.zero_grad()
        self.loss(self.model(X), y).backward()
        self.optimizer.step()

    def test_counts(self) -> list[float]:
        return [d2l.evaluate_accuracy_gpu(self.net, self.test_iter, self.device)
                * len(self.test_iter.dataset), len(self.test_iter.dataset)]


def d2l_loop(net: nn.Module, device: torch.device, batch_size: int, lr: float,
             num_epochs: int, num_train: int | None = None,
             num_test: int | None = None, seed: int = 0) -> d2l.TrainResult:
    """d2l's loop (:class:`D2LLoop`) for ``num_epochs``, each epoch timed between barriers;
    the test accuracy after each (d2l's loop does not measure the training accuracy)."""
    loop = D2LLoop(net, device, batch_size, lr, num_train, num_test, seed)
    result = d2l.TrainResult([str(device)], batch_size, lr)
    n = len(loop.train_iter.dataset)
    for epoch in range(num_epochs):
        loop.start_epoch(epoch)
        d2l.synchronize(device)
        start = time.perf_counter()
        for X, y in loop.batches():
            loop.step(X, y)
        d2l.synchronize(device)
        seconds = time.perf_counter() - start
        result.epoch_seconds.append(seconds)
        result.images_per_second.append(n / seconds)
        result.train_loss.append(float("nan"))
        result.train_acc.append(float("nan"))
        correct, total = loop.test_counts()
        result.test_acc.append(correct / total)
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


def _matmul_rate(n: int, device: torch.device, dtype: torch.dtype) -> tuple[float, float]:
    """FLOP/s of ``n`` x ``n`` products (the fastest of five blocks of at least 50 ms) and
    the time of one."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    measured = timing.time_per_call(lambda: a @ b, device, repeats=5, warmup=2)
    return 2 * n ** 3 / measured.min, measured.min


def matmul_flops_per_second(device: torch.device, dtype: torch.dtype = torch.float32,
                            tf32: bool = False, sizes: Sequence[int] | None = None,
                            seconds: float = 0.5) -> float:
    """The best rate of square matrix products on ``device`` this run measured (FLOP/s).

    Each size ``n`` (default: 512 to 4096 on a CPU, 2048 to 8192 on an accelerator) is
    timed in blocks of back-to-back products lasting at least 50 ms; the fastest block
    counts. Small products do not reach a device's plateau, so the largest rate over the
    sizes is returned. A larger size is tried only while one product of the last size,
    times 8 (the cube), stays under ``seconds``: a CPU that emulates bf16 stops early.
    With ``tf32`` float32 products may use TensorFloat-32.
    """
    device = d2l.as_device(device)
    if sizes is None:
        sizes = (512, 1024, 2048, 4096) if device.type == "cpu" else (2048, 4096, 8192)
    best = 0.0
    with tuning.backend_flags(device, cudnn_benchmark=False, tf32=tf32):
        for n in sizes:
            rate, one = _matmul_rate(n, device, dtype)
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


def peak_flops(device: torch.device | str, measured: dict[str, float] | None = None
               ) -> tuple[float, Text, bool]:
    """The one figure every rung's FLOP rate is divided by, and what it is: a GPU's dense bf16
    peak from its datasheet (:mod:`d2l_ext.datasheets`; the ratio is then an MFU); elsewhere
    (a CPU, a GPU not in the table) the fastest rate measured on the device in any precision.
    ``measured``: FLOP/s by name, matrix products by precision (``"fp32"``, ``"bf16"``, e.g.
    from :func:`matmul_flops_per_second`) and convolutions as ``"conv fp32"``, ``"conv bf16"``
    (:func:`conv_flops_per_second`); a float32 product is measured here if none is given,
    and on a CPU a float32 convolution too unless one is given (oneDNN's convolutions can
    outrun MKL's products: a slower reference puts the ratio above 100 %). The third value
    says whether the figure is a datasheet's."""
    device = d2l.as_device(device)
    if device.type == "cuda":
        sheet = datasheets.for_gpu(torch.cuda.get_device_name(device))
        if sheet is not None and sheet.bf16:
            says = message(
                en=f"the {sheet.name}'s dense bf16 peak on its datasheet, "
                   f"{sheet.bf16 / 1e12:,.0f} TFLOP/s",
                zh=f"{sheet.name} 数据手册上的稠密 bf16 峰值，{sheet.bf16 / 1e12:,.0f} TFLOP/s")
            return sheet.bf16, says, True
    measured = dict(measured or {"fp32": matmul_flops_per_second(device, torch.float32)})
    if device.type == "cpu" and not any(k.startswith("conv") for k in measured):
        measured["conv fp32"] = conv_flops_per_second(device)
    best = max(measured, key=measured.get)
    if best.startswith("conv"):
        precision = best.split()[-1] if " " in best else "fp32"
        what_en, what_zh = f"{precision} convolution", f"{precision} 卷积"
    else:
        what_en, what_zh = f"{best} matrix product", f"{best} 矩阵乘法"
    return measured[best], message(
        en=f"the fastest rate measured on this device in any precision: the {what_en}, "
           f"{measured[best] / 1e12:,.2f} TFLOP/s",
        zh=f"这台设备上各种精度中实测的最快速率：{what_zh}，"
           f"{measured[best] / 1e12:,.2f} TFLOP/s"), False


# ---------------------------------------------------------------- the compiler's own counters
def compiler_events() -> dict[str, int]:
    """What the compiler has done so far, by its own counters: graphs compiled by Dynamo,
    CUDA graphs skipped or re-recorded by Inductor. A timed window in which these move
    compiled, or ran without its graphs."""
    from torch._dynamo.utils import counters

    events = {"graphs compiled": int(counters["stats"].get("unique_graphs", 0))}
    for key, value in counters["inductor"].items():
        if "cudagraph" in key:
            events[key] = int(value)
    return events


def _moved(before: dict[str, int], after: dict[str, int]) -> list[str]:
    return [k for k in sorted(set(before) | set(after)) if before.get(k, 0) != after.get(k, 0)]


# ---------------------------------------------------------------- one rung, a step at a time
class Runner:
    """One rung's training, built once, then run a few steps or an epoch at a time.

    The reference rung runs :class:`D2LLoop`; every other rung runs
    :class:`d2l_ext.torch.Training`, the step ``d2l.train`` runs, with the rung's switches.
    """

    def __init__(self, rung: Rung, opts: dict, device: torch.device, num_train: int,
                 num_test: int | None, seed: int, num_epochs: int = 10) -> None:
        self.rung, self.opts, self.device = rung, dict(opts), device
        train_opts = dict(opts)
        net = make_net(seed, bias=train_opts.pop("bias", True))
        if rung.kind == "reference":
            self.run = D2LLoop(net, device, opts["batch_size"], opts["lr"], num_train,
                               num_test, seed)
        else:
            train_opts = {k: v for k, v in train_opts.items() if k not in ("batch_size", "lr")}
            cfg = d2l._config(opts["batch_size"], opts["lr"], num_epochs=num_epochs,
                              num_train=num_train, num_test=num_test, seed=seed, **train_opts)
            with tuning.backend_flags(device, cfg.cudnn_benchmark, cfg.tf32):
                self.run = d2l.Training(net, device, cfg)
        self.epoch = 0
        self._batches = None

    @property
    def whole_epochs(self) -> bool:
        return loads_in_epochs(self.opts)

    @property
    def steps_per_epoch(self) -> int:
        return self.run.num_batches

    def flags(self):
        return self.run.flags()

    def step(self) -> None:
        """One training step on the next batch; a new epoch begins (its loader restarted,
        where that is the rung's) when the last one is done."""
        while True:
            if self._batches is None:
                self.run.start_epoch(self.epoch)
                self._batches = self.run.batches()
            try:
                X, y = next(self._batches)
                break
            except StopIteration:
                self._batches = None
                self.epoch += 1
        self.run.step(X, y)

    def unit(self, steps: int) -> int:
        """One timed unit: a whole fresh epoch for a rung whose loader works in epochs,
        else ``steps`` steps. Returns the number of steps run."""
        if not self.whole_epochs:
            for _ in range(steps):
                self.step()
            return steps
        self._batches = None  # an epoch begun by earlier single steps is dropped
        self.run.start_epoch(self.epoch)
        done = 0
        for X, y in self.run.batches():
            self.run.step(X, y)
            done += 1
        self.epoch += 1
        return done

    def train_counts(self) -> tuple | None:
        """A snapshot of the epoch's running count of correct training predictions (on the
        device, no wait), for :meth:`train_accuracy`; None where the loop keeps none."""
        metric = getattr(self.run, "metric", None)
        return None if metric is None else (self.epoch, metric[1].clone(), self.run.seen)

    def train_accuracy(self, since: tuple | None = None) -> float:
        """The share of correct training predictions, as the steps made them (BatchNorm in
        training mode), since the snapshot ``since`` (or over the epoch in progress, if an
        epoch began in between); NaN where the loop does not count them (d2l's)."""
        metric = getattr(self.run, "metric", None)
        if metric is None:
            return float("nan")
        correct, seen = float(metric[1]), self.run.seen
        if since is not None and since[0] == self.epoch and seen > since[2]:
            correct, seen = correct - float(since[1]), seen - since[2]
        return correct / seen if seen else float("nan")

    def accuracy(self) -> float:
        """The test accuracy now; training goes on in training mode afterwards."""
        correct, total = self.run.test_counts()
        self.run.net.train()
        return correct / total

    def debiased_accuracy(self) -> float:
        """The test accuracy with each BatchNorm's running statistics freed of their start
        values (mean 0, variance 1), which after ``n`` updates with momentum ``m`` still weigh
        ``(1 - m) ** n`` in them; the statistics are restored afterwards. NaN where no
        BatchNorm keeps such statistics."""
        saved = []
        with torch.no_grad():
            for module in self.run.net.modules():
                if not (isinstance(module, nn.modules.batchnorm._BatchNorm)
                        and module.running_mean is not None and module.momentum is not None):
                    continue
                left = (1 - module.momentum) ** int(module.num_batches_tracked)
                if left >= 1:
                    continue
                saved.append((module, module.running_mean.clone(), module.running_var.clone()))
                module.running_mean.div_(1 - left)
                module.running_var.sub_(left).div_(1 - left)
        if not saved:
            return float("nan")
        try:
            return self.accuracy()
        finally:
            with torch.no_grad():
                for module, mean, var in saved:
                    module.running_mean.copy_(mean)
                    module.running_var.copy_(var)


# ---------------------------------------------------------------- results
FASTER, NO_GAIN, SLOWER, FAILED = utils.FASTER, utils.NO_GAIN, utils.SLOWER, "failed"
#: Each verdict in English and Chinese.
VERDICTS = {FASTER: "更快", NO_GAIN: "看不出收益", SLOWER: "更慢", FAILED: "失败", "": "–"}
#: Steps per window of the split (:func:`d2l_ext.timing.split_time`): an eager step launches
#: hundreds of kernels, and more than about 1,000 fill CUDA's launch queue, which would make
#: the host wait behind the blocker and every step read as one that waits for the device.
SPLIT_CALLS = 2

#: A rung against the rung before it, from per-round ratios (:func:`d2l_ext.utils.paired_verdict`).
verdict = utils.paired_verdict
false_alarm = utils.false_alarm


@dataclass
class RungResult:
    """What one rung measured: seconds per step in each round, the split of a step, the
    one-off cost, and the verdict against the rung before it."""

    name: Text
    kind: str
    options: dict
    steps_per_epoch: int
    flops_per_step: float
    peak: float
    step_seconds: list[float] = field(default_factory=list)  # one per round
    #: the warm-up's seconds beyond as many steady steps (negative where the warm-up ran
    #: faster than the steady steps: the machine's speed drifted between them)
    one_off: float = 0.0
    warmup_steps: int = 0
    split: timing.SplitTime | None = None
    ratios: list[float] = field(default_factory=list)  # against the rung before, per round
    verdict: str = ""
    compiled_in_window: list[str] = field(default_factory=list)  # counters that moved
    error: str = ""

    @property
    def timing(self) -> Timing:
        """Seconds per step over the rounds (median and range)."""
        return Timing(tuple(self.step_seconds))

    @property
    def seconds(self) -> float:
        """The median time of a step."""
        return statistics.median(self.step_seconds)

    @property
    def epoch_seconds(self) -> float:
        """The median step time times the steps of an epoch."""
        return self.seconds * self.steps_per_epoch

    @property
    def batch_size(self) -> int:
        return self.options["batch_size"]

    @property
    def images_per_second(self) -> float:
        return self.batch_size / self.seconds

    @property
    def flops_per_second(self) -> float:
        """Counted FLOPs per second of wall time (the median step)."""
        return self.flops_per_step / self.seconds

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation against the ladder's one fixed peak (:func:`peak_flops`)."""
        return self.flops_per_second / self.peak

    @property
    def ratio(self) -> Timing | None:
        return Timing(tuple(self.ratios)) if self.ratios else None

    @property
    def bound(self) -> str:
        """``"host"``, ``"device"``, ``"sync"`` (the step waits for the device), ``"one"``
        (a CPU) or ``""`` (not measured)."""
        if self.split is None:
            return ""
        return "sync" if self.split.syncs else self.split.bound

    @property
    def verdict_text(self) -> Text:
        return Text(self.verdict or "–", VERDICTS.get(self.verdict, self.verdict))

    @property
    def kind_text(self) -> Text:
        return Text(*KINDS[self.kind])


def make_net(seed: int = 0, bias: bool = True) -> nn.Module:
    """The multi-GPU chapter's ResNet-18 with d2l's initialisation; the same weights for every rung.

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


def _training_images(rungs: Sequence[Rung], num_train: int | None) -> int:
    largest = max(options(rungs, i)["batch_size"] for i in range(len(rungs)))
    available = len(fashion_mnist.load(True, num_examples=num_train)[1])
    n = available - available % largest
    if n == 0:
        raise ValueError(f"{available} training images are fewer than the largest batch of "
                         f"the rungs ({largest}).")
    return n


def _warm_up(runner: Runner, device: torch.device, min_steps: int = 3,
             max_steps: int = 12) -> tuple[float, int]:
    """Run steps until the compiler's counters stop moving (at least ``min_steps``); the
    seconds they took between barriers and their number."""
    d2l.synchronize(device)
    start = time.perf_counter()
    steps, quiet = 0, 0
    while steps < max_steps:
        before = compiler_events()
        runner.step()
        steps += 1
        quiet = quiet + 1 if not _moved(before, compiler_events()) else 0
        if steps >= min_steps and quiet >= 2:
            break
    d2l.synchronize(device)
    return time.perf_counter() - start, steps


def run(rungs: Sequence[Rung], device: torch.device, rounds: int = 5, steps: int = 20,
        num_train: int | None = None, num_test: int | None = None, seed: int = 0, *,
        peak: tuple[float, Text] | None = None, split: bool = True,
        verbose: bool = True) -> list[RungResult]:
    """Measure each rung that ``device`` supports, in ``rounds`` rounds (see the module's
    docstring). Every rung trains on the same images, the first ``num_train`` (default: all),
    cut to a multiple of the largest batch of the rungs, from the same weights
    (:func:`make_net`). A rung that fails to build or run is reported with its error and left
    out of the rounds; the others go on.

    ``peak``: the MFU denominator and its description (default: :func:`peak_flops`'s).
    With ``split`` each rung's step is also split into device, host and wall time.
    """
    if rounds < 2:
        raise ValueError(f"rounds={rounds}: a verdict needs at least two rounds.")
    device = d2l.as_device(device)
    rungs = applicable(rungs, device)
    n = _training_images(rungs, num_train)
    flops_per_image = train_flops_per_image(make_net(seed))
    peak_value = peak[0] if peak is not None else peak_flops(device)[0]
    old_limit = torch._dynamo.config.cache_size_limit
    torch._dynamo.config.cache_size_limit = max(old_limit, 64)  # one entry per compiled rung
    results, runners = [], []
    try:
        for i, rung in enumerate(rungs):
            opts = options(rungs, i)
            result = RungResult(rung.title, rung.kind, opts, 0,
                                flops_per_image * opts["batch_size"], peak_value)
            results.append(result)
            try:
                runner = Runner(rung, opts, device, n, num_test, seed)
                result.steps_per_epoch = runner.steps_per_epoch
                with runner.flags():
                    result.one_off, result.warmup_steps = _warm_up(runner, device)
                runners.append((runner, result))
            except Exception as err:  # a rung that cannot run here: say why, go on
                result.error = f"{type(err).__name__}: {err}".splitlines()[0][:300]
                result.verdict = FAILED
            if verbose:
                _report_built(result)
        for r in range(rounds):
            for runner, result in (runners if r % 2 == 0 else runners[::-1]):
                if result.error:
                    continue
                before = compiler_events()
                try:
                    with runner.flags():
                        d2l.synchronize(device)
                        start = time.perf_counter()
                        done = runner.unit(steps)
                        d2l.synchronize(device)
                        seconds = time.perf_counter() - start
                except Exception as err:
                    result.error = f"{type(err).__name__}: {err}".splitlines()[0][:300]
                    result.verdict = FAILED
                    continue
                result.compiled_in_window += _moved(before, compiler_events())
                result.step_seconds.append(seconds / done)
        for runner, result in runners:
            if result.error or not result.step_seconds:
                continue
            steady = result.seconds * result.warmup_steps
            result.one_off -= steady
            if split:
                try:
                    with runner.flags():
                        result.split = timing.split_time(runner.step, device,
                                                         calls=SPLIT_CALLS, repeats=3,
                                                         warmup=1)
                except Exception as err:
                    result.error = f"split: {type(err).__name__}: {err}".splitlines()[0][:300]
        _judge(results)
    finally:
        torch._dynamo.config.cache_size_limit = old_limit
        for runner, _ in runners:
            runner._batches = None
    if verbose:
        for result in results:
            _report_measured(result)
    return results


def _judge(results: Sequence[RungResult]) -> None:
    """Each systems rung against the last measured rung before it (reference or systems):
    per-round ratios and the verdict."""
    below = None
    for result in results:
        if result.kind == "algorithmic" or result.error or not result.step_seconds:
            continue
        if below is not None and result.kind == "systems":
            rounds = min(len(result.step_seconds), len(below.step_seconds))
            result.ratios = [a / b for a, b in zip(result.step_seconds[:rounds],
                                                   below.step_seconds[:rounds])]
            result.verdict = verdict(result.ratios)
        below = result


def _report_built(result: RungResult) -> None:
    if result.error:
        print(message(en=f"{result.name.en}: failed to build or warm up ({result.error})",
                      zh=f"{result.name.zh}：构建或预热失败（{result.error}）"), flush=True)
    else:
        print(message(en=f"{result.name.en}: built and warmed up, {result.warmup_steps} steps "
                         f"in {result.one_off:.2f} s",
                      zh=f"{result.name.zh}：已构建并预热，{result.warmup_steps} 步用了 "
                         f"{result.one_off:.2f} 秒"), flush=True)


def _report_measured(result: RungResult) -> None:
    if result.error:
        print(message(en=f"{result.name.en}: {result.error}",
                      zh=f"{result.name.zh}：{result.error}"))
        return
    ms = result.timing.text("ms")
    extra_en = extra_zh = ""
    if result.ratios:
        r = result.ratio
        extra_en = (f"; \u00d7{r.median:.2f} ({r.min:.2f}\u2013{r.max:.2f}) the rung before: "
                    f"{result.verdict}")
        extra_zh = (f"；是前一个台阶的 {r.median:.2f} 倍（{r.min:.2f}–{r.max:.2f}）："
                    f"{result.verdict_text.zh}")
    print(message(en=f"{result.name.en}: {ms.en} per step{extra_en}",
                  zh=f"{result.name.zh}：每步 {ms.zh}{extra_zh}"))
    if result.compiled_in_window:
        moved = sorted(set(result.compiled_in_window))
        print(message(en=f"  the compiler moved during a timed window: {', '.join(moved)}",
                      zh=f"  计时窗口内编译器的计数器有变化：{'、'.join(moved)}"))


# ---------------------------------------------------------------- time to an accuracy
@dataclass
class TargetRun:
    """One run of one rung from fresh weights to a test accuracy."""

    name: Text
    seed: int
    reached: bool
    accuracy: float  # the last one read
    epochs: float  # epochs trained when it was read
    steady: float  # training seconds at the steady rate (warm-up steps counted at that rate)
    one_off: float  # the warm-up's seconds beyond that (negative: the warm-up ran faster)
    steps: int = 0  # training steps taken
    #: the accuracy of the training predictions of the last chunk, as the steps made them
    #: (BatchNorm in training mode); NaN for d2l's loop, which does not count them
    train_accuracy: float = float("nan")
    #: where the target was not reached: the test accuracy at the end with BatchNorm's
    #: running statistics freed of their start values (:meth:`Runner.debiased_accuracy`)
    debiased_accuracy: float = float("nan")
    #: whether the compiler's counters moved in its warm-up (``False`` for a compiled rung
    #: that reused code compiled earlier in the process)
    compiled: bool = False
    #: how much as many steady steps as the warm-up took varied between the timed chunks
    #: (their slowest minus their fastest per-step time, times the warm-up's steps): step
    #: jitter and drift together; a one-off cost no larger than that cannot be told apart
    drift: float = 0.0


def one_off_said(run: TargetRun) -> Text:
    """The clause after a target run's training time that says its one-off cost: none to
    speak of, none beyond the steady steps' drift, the cost, or a warm-up that ran faster."""
    if abs(run.one_off) < 0.05:  # prints as 0.0 s either way
        return message(en=", with no one-off cost to speak of", zh="，一次性开销可以忽略")
    if abs(run.one_off) <= run.drift:
        beyond = utils.signed(run.one_off, "+.1f")
        return message(en=f"; warm-up minus as many steady steps: {beyond} s, within the steady "
                          f"steps' own variation ({run.drift:.1f} s), so no one-off cost showed",
                       zh=f"；预热比同样步数的稳态训练{'多' if run.one_off > 0 else '少'}用 "
                          f"{abs(run.one_off):.1f} 秒，没有超出稳态训练自身的波动"
                          f"（{run.drift:.1f} 秒），看不出一次性开销")
    if run.one_off > 0:
        return message(en=f" + {run.one_off:.1f} s one-off",
                       zh=f"，另加一次性开销 {run.one_off:.1f} 秒")
    return message(en=f"; its warm-up took {-run.one_off:.1f} s less than as many steady steps",
                   zh=f"；它的预热比同样步数的稳态训练还少用 {-run.one_off:.1f} 秒")


def time_to_target(rungs: Sequence[Rung], chosen: Sequence[int], device: torch.device,
                   target: float, seeds: Sequence[int] = (0, 1), max_epochs: int = 10,
                   every: float = 0.25, num_train: int | None = None,
                   num_test: int | None = None, verbose: bool = True) -> list[TargetRun]:
    """Train each of ``rungs[i]`` for ``i`` in ``chosen`` from fresh weights, once per seed,
    until the test accuracy, read every ``every`` of an epoch (untimed), reaches ``target``
    or ``max_epochs`` pass. Training time is timed between barriers, chunk by chunk; the
    warm-up's extra cost (compilation, autotuning, recording) is reported apart.

    A compiled rung run after :func:`run` in the same process finds its code already compiled:
    a fresh model of the same class passes the guards of what Dynamo compiled for the ladder's
    rung, so the warm-up compiles nothing and the one-off cost is near zero.
    :attr:`TargetRun.compiled` says whether the compiler's counters moved in the warm-up."""
    device = d2l.as_device(device)
    n = _training_images(rungs, num_train)
    out = []
    for i in chosen:
        rung, opts = rungs[i], options(rungs, i)
        for seed in seeds:
            runner = Runner(rung, opts, device, n, num_test, seed, num_epochs=max_epochs)
            with runner.flags():
                before = compiler_events()
                warm_seconds, warm_steps = _warm_up(runner, device)
                compiled = bool(_moved(before, compiler_events()))
                chunk = max(1, round(runner.steps_per_epoch * every))
                done, timed, timed_steps, acc = warm_steps, 0.0, 0, 0.0
                rates = []  # each chunk's seconds per step
                limit = max_epochs * runner.steps_per_epoch
                train_acc = float("nan")
                while timed_steps == 0 or done < limit:
                    # up to the next multiple of the chunk (quarter epochs), never past limit
                    these = max(1, min((done // chunk + 1) * chunk, limit) - done)
                    before = runner.train_counts()
                    d2l.synchronize(device)  # (at least one timed chunk, however short)
                    start = time.perf_counter()
                    for _ in range(these):
                        runner.step()
                    d2l.synchronize(device)
                    took = time.perf_counter() - start
                    timed += took
                    rates.append(took / these)
                    timed_steps += these
                    done += these
                    train_acc = runner.train_accuracy(since=before)
                    acc = runner.accuracy()
                    if acc >= target:
                        break
            per_step = timed / timed_steps
            debiased = float("nan") if acc >= target else runner.debiased_accuracy()
            one = TargetRun(rung.title, seed, acc >= target, acc, done / runner.steps_per_epoch,
                            timed + warm_steps * per_step,
                            warm_seconds - warm_steps * per_step, done,
                            train_acc, debiased, compiled,
                            warm_steps * (max(rates) - min(rates)))
            runner._batches = None
            out.append(one)
            if verbose:
                state_en = "reached" if one.reached else "did not reach"
                state_zh = "达到" if one.reached else "没有达到"
                extra = one_off_said(one)
                print(message(
                    en=f"{one.name.en}, seed {seed}: {state_en} {target} ({acc:.3f}) after "
                       f"{one.epochs:.2f} epochs, {one.steady:.1f} s of training{extra.en}",
                    zh=f"{one.name.zh}，种子 {seed}：训练 {one.epochs:.2f} 轮后{state_zh} "
                       f"{target}（{acc:.3f}），训练 {one.steady:.1f} 秒{extra.zh}"),
                      flush=True)
    return out


# ---------------------------------------------------------------- where the top rung's time goes
#: Groups of a step's time, in the order tables list them (English, Chinese), and the name
#: patterns that pick them: GPU kernels (cuDNN's fprop/dgrad/wgrad, cuBLAS/CUTLASS GEMMs,
#: Inductor's Triton kernels) or, on a CPU, operators.
GROUPS = {
    "conv forward": ("convolutions, forward", "卷积，前向"),
    "conv dgrad": ("convolutions, data gradient", "卷积，数据梯度"),
    "conv wgrad": ("convolutions, weight gradient", "卷积，权重梯度"),
    "conv backward": ("convolutions, backward (both gradients)", "卷积，反向（两种梯度）"),
    "matmul": ("matrix products", "矩阵乘法"),
    "elementwise": ("normalisation and element-wise", "规范化与逐元素运算"),
    "compiled": ("kernels the compiler generated (fused normalisation and element-wise)",
                 "编译器生成的核函数（融合后的规范化与逐元素运算）"),
    "optimizer": ("optimizer", "优化器"),
    "other": ("other", "其他"),
}
_GROUP_PATTERNS = [
    # on a CPU, Inductor's C++ kernels are not profiler events: their time is the self time
    # of the call of the compiled graph
    ("compiled", re.compile(r"CompiledFxGraph", re.I)),
    ("conv dgrad", re.compile(r"dgrad", re.I)),
    ("conv wgrad", re.compile(r"wgrad", re.I)),
    ("conv backward", re.compile(r"convolution_backward", re.I)),
    ("conv forward", re.compile(r"fprop|convolve|conv2d|convolution|implicit_gemm", re.I)),
    ("optimizer", re.compile(r"sgd|multi_tensor|foreach|optimizer", re.I)),
    ("matmul", re.compile(r"gemm|cutlass|matmul|addmm|(^|[:_])mm($|_)|linear", re.I)),
    ("elementwise", re.compile(r"triton|norm|relu|elementwise|vectorized|reduce|pool|add|mul|"
                               r"fill|copy|threshold", re.I)),
]


def group_of(name: str) -> str:
    """The group (:data:`GROUPS`) of a kernel or operator by its name."""
    for group, pattern in _GROUP_PATTERNS:
        if pattern.search(name):
            return group
    return "other"


def _group_with_parents(event) -> str:
    """An operator's group; inside ``optimizer.step()`` (the profiler's annotation
    ``Optimizer.step#SGD.step``) every operator counts as the optimizer's."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("Optimizer."):
            return "optimizer"
        parent = parent.cpu_parent
    return group_of(event.name)


def time_groups(step, device: torch.device | str, steps: int = 3) -> dict[str, float]:
    """Seconds per step of each group of :data:`GROUPS` over ``steps`` profiled calls of
    ``step`` (after one untimed call): on a GPU each kernel's device time by its name, so
    that cuDNN's forward, data-gradient and weight-gradient kernels separate; on a CPU each
    operator's self time (a convolution's backward is one operator there), the kernels that
    Inductor generated counted as the self time of the compiled graph's call ("compiled")."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    device = d2l.as_device(device)
    step()
    d2l.synchronize(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                           if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        d2l.synchronize(device)
    groups = dict.fromkeys(GROUPS, 0.0)
    for event in prof.events():
        if device.type == "cuda":
            if event.device_type != DeviceType.CUDA:
                continue
            seconds = event.self_device_time_total / 1e6
        else:
            if event.device_type != DeviceType.CPU or event.is_user_annotation:
                continue
            seconds = event.self_cpu_time_total / 1e6
        if seconds > 0:
            groups[_group_with_parents(event)] += seconds / steps
    return {k: v for k, v in groups.items() if v > 0}


def profile_rung(rungs: Sequence[Rung], index: int, device: torch.device | str,
                 num_train: int | None = None, num_test: int | None = None,
                 steps: int = 3, seed: int = 0) -> dict[str, float]:
    """:func:`time_groups` of ``rungs[index]``'s step, built and warmed up as :func:`run`
    builds it (on the same images)."""
    device = d2l.as_device(device)
    n = _training_images(rungs, num_train)
    runner = Runner(rungs[index], options(rungs, index), device, n, num_test, seed)
    with runner.flags():
        _warm_up(runner, device)
        groups = time_groups(runner.step, device, steps)
    runner._batches = None
    return groups


def groups_table(groups: dict[str, float]) -> Table:
    """The groups as a table: milliseconds per step and share, in the reader's language."""
    total = sum(groups.values())
    return text_table(
        [message(en="where the step's time goes", zh="一步的时间花在哪里"),
         message(en="ms per step", zh="每步（毫秒）"), message(en="share", zh="占比")],
        [[Text(*GROUPS[k]), v * 1e3, v / total] for k, v in groups.items()],
        ["", ".2f", ".0%"], left=1)


# ---------------------------------------------------------------- tables and a chart
class _Blank:
    """A table cell with nothing to show, whatever the column's format."""

    def __format__(self, spec: str) -> str:
        return "\u2013"


#: The table's columns (English and Chinese), and each column's format.
COLUMNS = [message(en=en, zh=zh) for en, zh in [
    ("rung", "台阶"), ("batch", "批量"), ("ms/step", "每步（毫秒）"), ("min", "最小"),
    ("max", "最大"), ("steps/epoch", "每轮步数"), ("s/epoch", "每轮（秒）"),
    ("time ÷ previous (median per round)", "用时 ÷ 前一台阶（各遍中位数）"), ("verdict", "判定"),
    ("device ms", "设备（毫秒）"),
    ("host ms", "主机（毫秒）"), ("bound", "瓶颈"), ("one-off s", "一次性开销（秒）"),
    ("TFLOP/s", "TFLOP/s"), ("MFU", "MFU")]]
FORMATS = ["", "d", ",.2f", ",.2f", ",.2f", ",d", ",.2f", ".2f", "", ",.2f", ",.2f", "",
           ",.1f", ".2f", ".1%"]
#: Each kind of bound in English and Chinese.
BOUNDS = {"host": ("host", "主机"), "device": ("device", "设备"), "sync": ("waits", "同步等待"),
          "one": ("not split (CPU)", "不区分（CPU）"), "": ("\u2013", "\u2013")}


def rows(results: Sequence[RungResult]) -> list[list]:
    """One row per measured rung, in :data:`COLUMNS`' order."""
    out = []
    for r in results:
        if r.error or not r.step_seconds:
            out.append([r.name, r.batch_size] + [_Blank()] * 6 + [r.verdict_text]
                       + [_Blank()] * 6)
            continue
        t = r.timing
        split = r.split if r.split is not None and not r.split.on_cpu else None  # a CPU: one
        out.append([r.name, r.batch_size, t.median * 1e3, t.min * 1e3, t.max * 1e3,
                    r.steps_per_epoch, r.epoch_seconds,
                    r.ratio.median if r.ratios else _Blank(), r.verdict_text,
                    split.device.median * 1e3 if split else _Blank(),
                    split.host.median * 1e3 if split else _Blank(),
                    Text(*BOUNDS[r.bound]), r.one_off, r.flops_per_second / 1e12, r.mfu])
    return out


#: The columns of each part of the ladder's table (:func:`table`): its times and verdicts,
#: then what each step is made of; the rung's name opens both.
PARTS = {"times": list(range(9)), "analysis": [0, *range(9, len(COLUMNS))]}


def table(results: Sequence[RungResult], datasheet: bool = True,
          part: str | None = None) -> Table:
    """The ladder as a table in the reader's language (:func:`rows`); the last column is
    "MFU" against a datasheet's peak, else the share of the measured reference rate.
    ``part`` ("times" or "analysis", :data:`PARTS`) keeps that part's columns only, so
    that each fits a page's width."""
    columns = list(COLUMNS)
    if not datasheet:
        columns[-1] = message(en="of fastest rate", zh="占最快速率")
    if part is None:
        return text_table(columns, rows(results), FORMATS, left=1)
    if part not in PARTS:
        raise ValueError(f"part must be one of {sorted(PARTS)} (or None for the whole "
                         f"table), not {part!r}")
    keep = PARTS[part]
    return text_table([columns[i] for i in keep],
                      [[row[i] for i in keep] for row in rows(results)],
                      [FORMATS[i] for i in keep], left=1)


def target_table(runs: Sequence[TargetRun], target: float) -> Table:
    """Each rung's runs to the target: seeds, reached, test, training and debiased accuracy,
    steps, epochs, steady and one-off seconds."""
    return text_table(
        [message(en="rung", zh="台阶"), message(en="seed", zh="种子"),
         message(en=f"reached {target}", zh=f"达到 {target}"),
         message(en="test acc", zh="测试准确率"),
         message(en="train acc", zh="训练准确率"),
         message(en="debiased acc", zh="去偏后测试准确率"), message(en="steps", zh="步数"),
         message(en="epochs", zh="轮数"),
         message(en="training s", zh="训练时间（秒）"),
         message(en="one-off s", zh="一次性开销（秒）")],
        [[r.name, r.seed, message(en="yes", zh="是") if r.reached else message(en="no", zh="否"),
          r.accuracy, *(_Blank() if v != v else v
                        for v in (r.train_accuracy, r.debiased_accuracy)),
          r.steps, r.epochs, r.steady, r.one_off] for r in runs],
        ["", "d", "", ".3f", ".3f", ".3f", ",d", ".2f", ".1f", ".1f"], left=1)


def _plain_log_ticks(ax) -> None:
    """Ticks of 1, 2 and 5 (or more, where the axis spans less than a decade or so) times a
    power of ten, labelled as plain numbers (200, 500, 1,000) rather than as 2×10²."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator, ScalarFormatter

    ax.figure.canvas.draw_idle()
    low, high = ax.get_xlim()
    ticks = []
    for mantissas in ((1,), (1, 2, 5), (1, 2, 4, 6), (1, 2, 3, 4, 5, 6, 8)):
        ticks = [m * 10.0 ** k for k in range(math.floor(math.log10(low)) - 1,
                                              math.ceil(math.log10(high)) + 1)
                 for m in mantissas if low <= m * 10.0 ** k <= high]
        if len(ticks) >= 4:
            break
    formatter = ScalarFormatter()
    formatter.set_scientific(False)
    formatter.set_useOffset(False)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(formatter)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(low, high)


#: The bar colour of each kind of rung.
COLORS = {"reference": "#888888", "systems": "#0a7d91", "algorithmic": "#c46a12"}


def plot(results: Sequence[RungResult], ax=None):
    """Two bars per measured rung: its device time and its wall time per step (median; the
    wall time's range over the rounds as an error bar); hatched where the host limits."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    shown = [r for r in results if not r.error and r.step_seconds][::-1]
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.4 * len(shown) + 1.6))
    ys = np.arange(len(shown))
    wall = [r.seconds * 1e3 for r in shown]
    err = [[(r.seconds - r.timing.min) * 1e3 for r in shown],
           [(r.timing.max - r.seconds) * 1e3 for r in shown]]
    ax.barh(ys + 0.2, wall, height=0.4, xerr=err, capsize=2,
            color=[COLORS[r.kind] for r in shown], edgecolor="white",
            hatch=None)
    split = [r.split is not None and not r.split.on_cpu for r in shown]  # a CPU's is one time
    device = [r.split.device.median * 1e3 if s else 0.0 for r, s in zip(shown, split)]
    bars = ax.barh(ys - 0.2, device, height=0.4, color="#cccccc", edgecolor="white")
    for bar, r in zip(bars, shown):
        if r.bound == "host":
            bar.set_hatch("//")
    ax.set_yticks(ys, [label(en=r.name.en, zh=r.name.zh) for r in shown])
    ax.set_xscale("log")
    _plain_log_ticks(ax)
    ax.set_xlabel(label(en="milliseconds per step (log scale): wall time (median, range over "
                           "rounds)" + (" and the device's time" if any(split) else ""),
                        zh="每步毫秒数（对数坐标）：挂钟时间（中位数，各遍的范围）"
                           + ("与设备时间" if any(split) else "")))
    handles = [Patch(color=COLORS[k], label=label(en=f"wall, {KINDS[k][0]}",
                                                  zh=f"{KINDS[k][1]}台阶（挂钟时间）"))
               for k in KINDS if any(r.kind == k for r in shown)]
    if any(split):
        handles.append(Patch(color="#cccccc", label=label(en="device", zh="设备时间")))
    if any(r.bound == "host" for r in shown):
        handles.append(Patch(facecolor="#cccccc", edgecolor="#444444", hatch="//",
                             label=label(en="device, host-bound rung",
                                         zh="设备时间（受主机限制的台阶）")))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.15),
              ncol=2, frameon=False, fontsize=8)
    return ax
