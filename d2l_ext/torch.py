"""The PyTorch half of d2l_ext: ``from d2l_ext import torch as d2l``.

Works without torchvision, without d2l and with numpy 1 or 2.
"""

from __future__ import annotations

import datetime
import io
import os
import socket
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn import functional as F
from torch.utils import data

from d2l_ext import fashion_mnist, gpu_runs, tuning  # noqa: F401 - gpu_runs: d2l.gpu_runs
from d2l_ext.catalogue import after_colon, figure_text, listing, say
from d2l_ext.exercises import checker as _checker
from d2l_ext.timing import block_device, device_time, split_time, time_per_call
from d2l_ext.tuning import LAMB, DeviceLoader
from d2l_ext.utils import (
    Accumulator,
    Animator,
    Benchmark,
    Table,
    Timer,
    Timing,
    TrainProgress,
    TrainResult,
    check_split,
    check_train_args,
    false_alarm,
    label,
    message,
    paired_verdict,
    show,
    signed,
    text_table,
)
from d2l_ext.utils import measure as _measure

__all__ = [
    "Accumulator", "Animator", "Benchmark", "DeviceLoader", "LAMB", "Timer", "TrainResult",
    "Residual",
    "accuracy", "block_device", "device_time", "split_time", "time_per_call",
    "Training", "cpu", "evaluate_accuracy_gpu", "get_dataloader_workers", "gpu",
    "label", "load_data_fashion_mnist", "measure", "message", "num_gpus", "resnet18", "sgd",
    "Table", "show", "text_table", "signed", "say", "figure_text", "listing", "after_colon",
    "split_batch", "synchronize", "Timing", "train", "paired_verdict",
    "false_alarm", "try_all_devices", "try_all_gpus",
    "try_gpu", "check_exercise",
]

#: The chapters' exercise checks (:func:`d2l_ext.exercises.check`) for this framework.
check_exercise = _checker("torch")


# ---------------------------------------------------------------- devices
def cpu() -> torch.device:
    """The CPU device."""
    return torch.device("cpu")


def gpu(i: int = 0) -> torch.device:
    """The ``i``-th GPU device (it need not exist)."""
    return torch.device(f"cuda:{i}")


def num_gpus() -> int:
    """The number of available GPUs."""
    return torch.cuda.device_count()


def try_gpu(i: int = 0) -> torch.device:
    """Return ``gpu(i)`` if it exists, otherwise ``cpu()``."""
    return gpu(i) if num_gpus() >= i + 1 else cpu()


def try_all_gpus() -> list[torch.device]:
    """Return all available GPUs, or ``[cpu()]`` if there is none.

    (d2l 1.0.3's docstring promises ``[cpu()]`` but its code returns ``[]``;
    we keep the documented meaning so that ``train(net, try_all_gpus(), ...)``
    works everywhere.)
    """
    return [gpu(i) for i in range(num_gpus())] or [cpu()]


def try_all_devices(min_count: int = 2) -> list[torch.device]:
    """All GPUs if there are at least ``min_count``, else ``min_count`` CPU stand-ins.

    Each entry becomes one training process in :func:`train`, so on a machine
    with fewer GPUs the multi-device code still runs (on CPU processes that
    talk over gloo): this shows correctness, not speed.
    """
    gpus = [gpu(i) for i in range(num_gpus())]
    return gpus if len(gpus) >= min_count else [cpu()] * min_count


def as_device(device: torch.device | str | int) -> torch.device:
    """``device`` as a ``torch.device`` with an index for CUDA: ``"cuda"`` is the current
    GPU (``cuda:0`` unless ``torch.cuda.set_device`` chose another), an int a GPU index.

    A CUDA device on a machine without CUDA, or past the last GPU, raises a ``ValueError``
    that says what there is (torch itself would fail later, deep inside).
    """
    if isinstance(device, int):
        device = gpu(device)
    device = torch.device(device)
    if device.type != "cuda":
        return device
    count = num_gpus()
    if count == 0:
        raise ValueError(f"{device} was asked for, but this machine has no CUDA GPU that "
                         f"PyTorch {torch.__version__} can use: pass d2l.try_gpu() (a GPU if "
                         "there is one, else the CPU) or d2l.cpu().")
    index = torch.cuda.current_device() if device.index is None else device.index
    if not 0 <= index < count:
        raise ValueError(f"{device} was asked for, but there are {count} GPUs "
                         f"(cuda:0 to cuda:{count - 1}).")
    return torch.device("cuda", index)


def as_devices(devices) -> list[torch.device]:
    """A list of devices (:func:`as_device`), from a list or from a single device or name."""
    if isinstance(devices, (str, int, torch.device)):
        devices = [devices]
    devices = [as_device(d) for d in devices]
    if not devices:
        raise ValueError("devices is empty; pass at least one device, e.g. [d2l.try_gpu()].")
    return devices


def process_group_backend(device: torch.device) -> str:
    """The ``torch.distributed`` backend for ranks on ``device``: NCCL on GPUs, else gloo."""
    return "nccl" if device.type == "cuda" else "gloo"


# ---------------------------------------------------------------- splitting
def split_batch(X: torch.Tensor, y: torch.Tensor,
                devices: Sequence[torch.device]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Split ``X`` and ``y`` into ``len(devices)`` shards, one on each device.

    Shard sizes differ by at most one. Unlike d2l (``nn.parallel.scatter``)
    this also works for CPU devices.
    """
    devices = as_devices(devices)
    check_split(X.shape[0], y.shape[0], len(devices))
    return ([x.to(d) for x, d in zip(torch.tensor_split(X, len(devices)), devices)],
            [t.to(d) for t, d in zip(torch.tensor_split(y, len(devices)), devices)])


# ---------------------------------------------------------------- models
class Residual(nn.Module):
    """The residual block of ResNet (d2l's, with lazy input sizes).

    Give ``in_channels`` to build it eagerly (as :func:`resnet18` does), so that
    its parameters exist before the first forward pass. ``bias=False`` drops the bias of
    the convolutions that BatchNorm follows (BatchNorm subtracts the mean, bias included).
    """

    def __init__(self, num_channels: int, use_1x1conv: bool = False, strides: int = 1,
                 in_channels: int | None = None, bias: bool = True) -> None:
        super().__init__()

        def conv(kernel_size: int, stride: int, padding: int, first: bool,
                 bias: bool = bias) -> nn.Module:
            if first and in_channels is not None:
                return nn.Conv2d(in_channels, num_channels, kernel_size, stride, padding,
                                 bias=bias)
            if first:
                return nn.LazyConv2d(num_channels, kernel_size, stride, padding, bias=bias)
            return nn.Conv2d(num_channels, num_channels, kernel_size, stride, padding, bias=bias)

        self.conv1 = conv(3, strides, 1, first=True)
        self.conv2 = conv(3, 1, 1, first=False)
        # the shortcut's convolution is not followed by BatchNorm: it keeps its bias
        self.conv3 = conv(1, strides, 0, first=True, bias=True) if use_1x1conv else None
        self.bn1 = nn.BatchNorm2d(num_channels)
        self.bn2 = nn.BatchNorm2d(num_channels)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        Y = F.relu(self.bn1(self.conv1(X)))
        Y = self.bn2(self.conv2(Y))
        if self.conv3 is not None:
            X = self.conv3(X)
        return F.relu(Y + X)


def resnet18(num_classes: int, in_channels: int = 1, bias: bool = True) -> nn.Sequential:
    """d2l's ResNet-18 variant for small images: 3x3 stem, stride 1, no max-pooling.

    ``bias=False``: no bias in the convolutions that BatchNorm follows (a tip of the tuning-tips
    chapter).
    """

    def resnet_block(in_ch: int, out_ch: int, num_residuals: int,
                     first_block: bool = False) -> nn.Sequential:
        blk = []
        for i in range(num_residuals):
            if i == 0 and not first_block:
                blk.append(Residual(out_ch, use_1x1conv=True, strides=2, in_channels=in_ch,
                                    bias=bias))
            else:
                blk.append(Residual(out_ch, in_channels=out_ch, bias=bias))
        return nn.Sequential(*blk)

    net = nn.Sequential(nn.Conv2d(in_channels, 64, kernel_size=3, stride=1, padding=1,
                                  bias=bias),
                        nn.BatchNorm2d(64), nn.ReLU())
    net.add_module("resnet_block1", resnet_block(64, 64, 2, first_block=True))
    net.add_module("resnet_block2", resnet_block(64, 128, 2))
    net.add_module("resnet_block3", resnet_block(128, 256, 2))
    net.add_module("resnet_block4", resnet_block(256, 512, 2))
    net.add_module("global_avg_pool", nn.AdaptiveAvgPool2d((1, 1)))
    net.add_module("fc", nn.Sequential(nn.Flatten(), nn.Linear(512, num_classes)))
    return net


# ---------------------------------------------------------------- data
def get_dataloader_workers() -> int:
    """Use 4 processes to read the data (as d2l)."""
    return 4


class FashionMNIST(data.Dataset):
    """Fashion-MNIST as ``(1, H, W)`` float tensors in [0, 1] and int64 labels."""

    def __init__(self, train: bool = True, resize: int | tuple[int, int] | None = None,
                 root: str | os.PathLike | None = None, num_examples: int | None = None) -> None:
        images, labels = fashion_mnist.load(train, root, num_examples)
        self.images = torch.from_numpy(images.copy())
        self.labels = torch.from_numpy(labels.astype("int64"))
        self.resize = (resize, resize) if isinstance(resize, int) else resize

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.images[i].unsqueeze(0).float().div_(255)
        if self.resize is not None:
            x = F.interpolate(x[None], size=self.resize, mode="bilinear",
                              align_corners=False, antialias=True)[0]
        return x, self.labels[i]


def load_data_fashion_mnist(batch_size: int, resize: int | tuple[int, int] | None = None, *,
                            root: str | os.PathLike | None = None,
                            num_workers: int | None = None, pin_memory: bool = False,
                            persistent_workers: bool = False,
                            num_train: int | None = None, num_test: int | None = None,
                            ) -> tuple[data.DataLoader, data.DataLoader]:
    """Load Fashion-MNIST into a training and a test ``DataLoader`` (as d2l).

    The files are found as described in :mod:`d2l_ext.fashion_mnist` (``root``,
    ``D2L_DATA_DIR``, the cache, Debian's package, then a download).
    ``num_workers`` defaults to :func:`get_dataloader_workers`; ``num_train`` and
    ``num_test`` keep only the first examples, for quick runs.
    """
    if num_workers is None:
        num_workers = get_dataloader_workers()
    options = dict(num_workers=num_workers, pin_memory=pin_memory,
                   persistent_workers=persistent_workers and num_workers > 0)
    train_set = FashionMNIST(True, resize, root, num_train)
    test_set = FashionMNIST(False, resize, root, num_test)
    return (data.DataLoader(train_set, batch_size, shuffle=True, **options),
            data.DataLoader(test_set, batch_size, shuffle=False, **options))


# ---------------------------------------------------------------- evaluation
def accuracy(y_hat: torch.Tensor, y: torch.Tensor) -> float:
    """The number of correct predictions."""
    if y_hat.ndim > 1 and y_hat.shape[1] > 1:
        y_hat = y_hat.argmax(dim=1)
    return float((y_hat.type(y.dtype) == y).sum())


def evaluate_accuracy_gpu(net: nn.Module, data_iter, device: torch.device | None = None) -> float:
    """The accuracy of ``net`` on ``data_iter``, computed on ``device``.

    ``device`` defaults to where the first parameter of ``net`` lives.
    """
    if isinstance(net, nn.Module):
        net.eval()
        if device is None:
            device = next(iter(net.parameters())).device
    metric = Accumulator(2)
    with torch.no_grad():
        for X, y in data_iter:
            X, y = X.to(device), y.to(device)
            metric.add(accuracy(net(X), y), y.numel())
    return metric[0] / metric[1]


# ---------------------------------------------------------------- training
def sgd(params, lr: float, batch_size: int) -> None:
    """Minibatch stochastic gradient descent on ``params`` (as d2l): each parameter moves by
    ``lr`` times its gradient divided by ``batch_size``; the gradients are then zeroed."""
    with torch.no_grad():
        for param in params:
            param -= lr * param.grad / batch_size
            param.grad.zero_()


@dataclass
class _Config:
    batch_size: int
    lr: float
    num_epochs: int
    warmup_epochs: float
    num_train: int | None
    num_test: int | None
    num_workers: int
    root: str | None
    sync_bn: bool
    seed: int
    timeout: float
    # the fast path's switches, off by default (d2l's behaviour)
    pin_memory: bool | None = None
    persistent_workers: bool = True
    data_on_device: bool = False
    channels_last: bool = False
    amp: str | None = None
    compile: str | None = None
    fused: bool = False
    cudnn_benchmark: bool = False
    tf32: bool = False
    schedule: str = "constant"
    label_smoothing: float = 0.0
    optimizer: str = "sgd"
    momentum: float = 0.0
    weight_decay: float = 0.0
    drop_last: bool | None = None  # None: drop the last partial batch only under compile
    capture_step: bool = False  # the whole step in one CUDA graph (GPU only)

    @property
    def drops_last(self) -> bool:
        return self.compile is not None if self.drop_last is None else self.drop_last

    def pins_memory(self, device: torch.device) -> bool:
        """Whether the loaders pin their batches: ``pin_memory`` as given, by default on
        CUDA (it only helps copies to a GPU), never on a CPU (with a warning if asked)."""
        pin = device.type == "cuda" if self.pin_memory is None else self.pin_memory
        return pin and tuning.cuda_only("pin_memory=True", device)

    def cuda_graphs(self, device: torch.device) -> bool:
        """Whether the compiled model replays CUDA graphs (``compile="reduce-overhead"`` or
        ``"max-autotune"`` on a GPU), so that each step must be marked
        (``cudagraph_mark_step_begin``)."""
        return self.compile in tuning.CUDA_GRAPH_MODES and device.type == "cuda"

    def captures_step(self, device: torch.device) -> bool:
        """Whether the whole training step is replayed as one CUDA graph: asked for, and a
        GPU (on a CPU: a warning, and the step runs as it is)."""
        return self.capture_step and tuning.cuda_only(
            "capture_step=True", device, "runs the step without a CUDA graph")

    def syncs_batchnorm(self, device: torch.device, world_size: int) -> bool:
        """Whether BatchNorm is converted to SyncBatchNorm: asked for, several ranks, and a
        GPU (SyncBatchNorm refuses CPU tensors: warn, keep per-rank statistics)."""
        return (self.sync_bn and world_size > 1 and tuning.cuda_only(
            "sync_bn=True", device, "keeps each process's own BatchNorm statistics"))


def ddp_device_ids(device: torch.device) -> list[torch.device] | None:
    """``DistributedDataParallel``'s ``device_ids`` for a rank on ``device``: the GPU it
    runs on, ``None`` for CPU ranks (DDP refuses device ids for them)."""
    return [device] if device.type == "cuda" else None


def process_group_device(device: torch.device) -> torch.device | None:
    """``init_process_group``'s ``device_id`` for a rank on ``device``: its GPU, which binds
    the rank's NCCL communicator to it (without it NCCL guesses the device from the current
    context and warns at the first barrier), ``None`` for CPU ranks."""
    return device if device.type == "cuda" else None


def check_rank_devices(devices: Sequence[torch.device], torchrun: bool = False) -> None:
    """Refuse, in the parent, device lists that the ranks' process group cannot join:
    devices of different kinds (one backend serves the group: NCCL for GPUs, gloo for
    CPUs), or one GPU twice (NCCL allows one rank per GPU; CPU stand-ins may repeat).
    Under ``torchrun`` (``torchrun=True``) each rank takes ``devices[LOCAL_RANK]``, and the
    list is not checked for repeats."""
    if len({d.type for d in devices}) > 1:
        raise ValueError(f"devices {[str(d) for d in devices]} mix kinds: the ranks form one "
                         "process group with one backend (NCCL on GPUs, gloo on CPUs); pass "
                         "only GPUs or only CPUs.")
    gpus = [d for d in devices if d.type == "cuda"]
    if not torchrun and len(gpus) != len(set(gpus)):
        raise ValueError(f"devices {[str(d) for d in devices]} name a GPU twice: NCCL runs one "
                         "rank per GPU. Pass distinct GPUs (d2l.try_all_gpus()); only CPU "
                         "stand-ins may repeat.")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _all_sum(values: list[float], device: torch.device, world_size: int) -> list[float]:
    if world_size == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def synchronize(device: torch.device | str | None = None) -> None:
    """Wait until ``device`` has finished all work queued on it (a barrier).

    CUDA: ``torch.cuda.synchronize``; another accelerator: ``torch.accelerator.synchronize``
    (PyTorch 2.6+); a CPU: nothing to wait for, since PyTorch's CPU operators have finished
    when they return. ``None``: the current accelerator, if there is one.
    """
    if device is None:
        device = _current_accelerator()
        if device is None:
            return
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type != "cpu" and hasattr(torch, "accelerator"):
        torch.accelerator.synchronize(device)


def _current_accelerator() -> torch.device | None:
    if hasattr(torch, "accelerator"):  # PyTorch 2.6 and later
        return (torch.accelerator.current_accelerator() if torch.accelerator.is_available()
                else None)
    return torch.device("cuda") if torch.cuda.is_available() else None


def measure(f, device: torch.device | str | None = None, repeats: int = 5,
            warmup: int = 1) -> Timing:
    """Time ``repeats`` runs of ``f()`` on ``device``, each between two barriers
    (:func:`synchronize`), after ``warmup`` runs; the median and the range
    (:class:`d2l_ext.utils.Timing`)."""
    return _measure(f, lambda: synchronize(device), repeats, warmup)


def _loaders(rank: int, world_size: int, device: torch.device, cfg: _Config,
             memory_format: torch.memory_format):
    """This rank's training and test minibatches: a ``DataLoader`` or a ``DeviceLoader``.

    With ``cfg.drops_last`` the training loader leaves out the last partial batch, so that a
    compiled model always sees one batch shape: a smaller last batch would make Dynamo
    recompile with a symbolic batch size and run every later batch through that graph.
    The test loaders keep every example (evaluation runs the uncompiled network).
    """
    per_rank = cfg.batch_size // world_size
    drop_last = cfg.drops_last
    if cfg.data_on_device:
        return (tuning.DeviceLoader(*fashion_mnist.load(True, cfg.root, cfg.num_train), per_rank,
                                    device, rank=rank, world_size=world_size, seed=cfg.seed,
                                    memory_format=memory_format, drop_last=drop_last),
                tuning.DeviceLoader(*fashion_mnist.load(False, cfg.root, cfg.num_test), per_rank,
                                    device, shuffle=False, rank=rank, world_size=world_size,
                                    memory_format=memory_format))
    train_set = FashionMNIST(True, None, cfg.root, cfg.num_train)
    test_set = FashionMNIST(False, None, cfg.root, cfg.num_test)
    sampler = (data.distributed.DistributedSampler(train_set, world_size, rank, seed=cfg.seed)
               if world_size > 1 else data.RandomSampler(train_set))
    options = dict(num_workers=cfg.num_workers, pin_memory=cfg.pins_memory(device),
                   persistent_workers=cfg.persistent_workers and cfg.num_workers > 0)
    train_iter = data.DataLoader(train_set, per_rank, sampler=sampler, drop_last=drop_last,
                                 **options)
    # Each rank evaluates its own slice of the test set; the counts are summed.
    test_iter = data.DataLoader(data.Subset(test_set, range(rank, len(test_set), world_size)),
                                per_rank, **options)
    return train_iter, test_iter


def _optimizer(model: nn.Module, cfg: _Config) -> torch.optim.Optimizer:
    if cfg.optimizer == "lamb":
        return tuning.LAMB(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    return torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                           weight_decay=cfg.weight_decay, fused=cfg.fused or None)


class Training:
    """One rank's training, built from :func:`train`'s switches: the network on its device in
    its memory format (wrapped in DDP for several ranks, compiled if asked), the optimizer,
    the learning-rate schedule, the gradient scaler, the loaders, and the training step.

    :func:`train` runs it epoch by epoch. The speed ladder (:mod:`d2l_ext.ladder`) drives it
    a few steps at a time, so that it times exactly the step that ``train`` runs. Build and
    run it inside :meth:`flags` (``cudnn.benchmark`` and TF32 are process-wide settings).
    """

    def __init__(self, net: nn.Module, device: torch.device, cfg: _Config, rank: int = 0,
                 world_size: int = 1) -> None:
        torch.manual_seed(cfg.seed)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        if cfg.syncs_batchnorm(device, world_size):
            net = nn.SyncBatchNorm.convert_sync_batchnorm(net)
        self.cfg, self.device, self.rank, self.world_size = cfg, device, rank, world_size
        self.memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
        self.net = net.to(device, memory_format=self.memory_format)
        model = (nn.parallel.DistributedDataParallel(self.net, device_ids=ddp_device_ids(device))
                 if world_size > 1 else self.net)
        self.model = tuning.compile_model(model, cfg.compile, device)
        self.cuda_graphs = cfg.cuda_graphs(device)
        self.train_iter, self.test_iter = _loaders(rank, world_size, device, cfg,
                                                   self.memory_format)
        self.num_batches = len(self.train_iter)
        if self.num_batches == 0:
            raise ValueError(f"no full batch of {cfg.batch_size} among the training examples "
                             "with drop_last=True: use more examples (num_train) or a smaller "
                             "batch.")
        self.optimizer = _optimizer(self.model, cfg)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(self.optimizer, tuning.lr_lambda(
            cfg.schedule, round(cfg.warmup_epochs * self.num_batches),
            cfg.num_epochs * self.num_batches))
        self.scaler = tuning.grad_scaler(device, cfg.amp)
        self.loss_fn = nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
        # loss and correct predictions summed on the device: no host-device sync per step
        self.metric = torch.zeros(2, dtype=torch.float64, device=device)
        self.seen = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.captures_step = cfg.captures_step(device)

    def flags(self):
        """The block in which this training's ``cudnn.benchmark`` and TF32 settings hold."""
        return tuning.backend_flags(self.device, self.cfg.cudnn_benchmark, self.cfg.tf32)

    def start_epoch(self, epoch: int) -> None:
        """Reshuffle for ``epoch`` (the same order on every rank) and reset the metric."""
        if self.world_size > 1 or self.cfg.data_on_device:
            loader = self.train_iter if self.cfg.data_on_device else self.train_iter.sampler
            loader.set_epoch(epoch)
        self.metric.zero_()
        self.seen = 0
        self.model.train()

    def batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One epoch of training batches on the device, in the model's memory format."""
        for X, y in self.train_iter:
            yield (X.to(self.device, non_blocking=True, memory_format=self.memory_format),
                   y.to(self.device, non_blocking=True))

    def step(self, X: torch.Tensor, y: torch.Tensor) -> None:
        """One training step: forward, backward, update, schedule, metric (no sync)."""
        if self.captures_step:
            self._replay(X, y)
        else:
            if self.cuda_graphs:  # the graph's outputs of the last step may now be overwritten
                torch.compiler.cudagraph_mark_step_begin()
            self._update(X, y)
        self.schedule.step()
        self.seen += y.numel()

    def _update(self, X: torch.Tensor, y: torch.Tensor, zero_grad: bool = True) -> None:
        with tuning.autocast(self.device, self.cfg.amp):
            y_hat = self.model(X)
            loss = self.loss_fn(y_hat, y)
        if zero_grad:
            self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()  # fp16: scaled so that small gradients survive
        self.scaler.step(self.optimizer)
        self.scaler.update()
        with torch.no_grad():
            self.metric += torch.stack([loss.double() * y.numel(),
                                        (y_hat.argmax(1) == y).sum().double()])

    def _replay(self, X: torch.Tensor, y: torch.Tensor) -> None:
        """The step as one CUDA graph (PyTorch's "whole-network capture"): the first call
        runs three steps on a side stream (lazy initialisation: libraries' handles, the
        optimizer's state, compilation), puts the weights, buffers and momentum back as they
        were, and records the step into a graph with static input tensors; every call copies
        its batch into them and replays the graph."""
        if self.graph is None:
            self._static = (X.clone(), y.clone())
            saved = {k: v.clone() for k, v in self.net.state_dict().items()}
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(3):
                    self._update(*self._static)
            torch.cuda.current_stream(self.device).wait_stream(side)
            with torch.no_grad():  # copies in place: the graph keeps these tensors' addresses
                self.net.load_state_dict(saved)
                for state in self.optimizer.state.values():
                    for value in state.values():
                        if torch.is_tensor(value) and value.is_floating_point():
                            value.zero_()  # a zero momentum buffer acts as none (no dampening)
                self.metric.zero_()
            self.optimizer.zero_grad(set_to_none=True)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self._update(*self._static, zero_grad=False)  # backward writes fresh gradients
        self._static[0].copy_(X, non_blocking=True)
        self._static[1].copy_(y, non_blocking=True)
        self.graph.replay()

    def test_counts(self) -> list[float]:
        """Correct predictions and examples on this rank's slice of the test set, by the
        plain network (not the DDP wrapper: ranks may see different numbers of batches)."""
        self.net.eval()
        hits = Accumulator(2)
        with torch.no_grad():
            for X, y in self.test_iter:
                X = X.to(self.device, memory_format=self.memory_format)
                y = y.to(self.device)
                hits.add(accuracy(self.net(X), y), y.numel())
        return [hits[0], hits[1]]


def _config(batch_size: int, lr: float, *, num_epochs: int = 10, warmup_epochs: float = 1.0,
            num_train: int | None = None, num_test: int | None = None, num_workers: int = 0,
            root: str | os.PathLike | None = None, sync_bn: bool = False, seed: int = 0,
            timeout: float = 300.0, pin_memory: bool | None = None,
            persistent_workers: bool = True, data_on_device: bool = False,
            channels_last: bool = False, amp: str | None = None, compile: str | None = None,
            fused: bool = False, cudnn_benchmark: bool = False, tf32: bool = False,
            schedule: str = "constant", label_smoothing: float = 0.0, optimizer: str = "sgd",
            momentum: float = 0.0, weight_decay: float = 0.0, drop_last: bool | None = None,
            capture_step: bool = False, ranks: int = 1) -> _Config:
    """:func:`train`'s switches, checked, as one object (the defaults are :func:`train`'s;
    a test keeps them equal). ``ranks``: the processes the batch is split over."""
    check_train_args(batch_size=batch_size, lr=lr, num_epochs=num_epochs,
                     warmup_epochs=warmup_epochs, num_train=num_train, num_test=num_test,
                     label_smoothing=label_smoothing, num_workers=num_workers)
    if batch_size < ranks:
        raise ValueError(f"batch_size {batch_size} is smaller than the {ranks} ranks.")
    if batch_size % ranks:
        raise ValueError(f"batch_size {batch_size} is not a multiple of the {ranks} ranks "
                         "(one per device, or torchrun's WORLD_SIZE); each rank loads "
                         f"batch_size // ranks examples a step, so use e.g. "
                         f"{batch_size - batch_size % ranks}.")
    tuning.check_options(amp, compile, schedule)
    if optimizer not in ("sgd", "lamb"):
        raise ValueError(f"optimizer={optimizer!r} is not one of 'sgd', 'lamb'.")
    if optimizer == "lamb" and (fused or momentum):
        raise ValueError("fused and momentum are options of optimizer='sgd'; LAMB keeps its own "
                         "moments and has no fused kernel here.")
    if capture_step:
        _check_capture(amp, compile, schedule, warmup_epochs, ranks)
    return _Config(batch_size, lr, num_epochs, warmup_epochs, num_train, num_test, num_workers,
                   None if root is None else str(root), sync_bn, seed, timeout,
                   pin_memory, persistent_workers, data_on_device, channels_last, amp, compile,
                   fused, cudnn_benchmark, tf32, schedule, label_smoothing, optimizer, momentum,
                   weight_decay, drop_last, capture_step)


def _check_capture(amp: str | None, compile: str | None, schedule: str, warmup_epochs: float,
                   ranks: int) -> None:
    """Refuse, with what to do, the switches a step recorded as one CUDA graph cannot keep."""
    if amp == "fp16":
        raise ValueError("capture_step=True cannot keep fp16's gradient scaler, which reads a "
                         "value on the host every step: use amp='bf16' (no scaler) or None.")
    if compile in tuning.CUDA_GRAPH_MODES:
        raise ValueError("capture_step=True records the whole step as a CUDA graph itself; "
                         "use compile='default' or 'max-autotune-no-cudagraphs' (their "
                         "kernels are recorded) or None.")
    if schedule != "constant" or warmup_epochs:
        raise ValueError("capture_step=True replays the step with the learning rate it was "
                         "recorded with: use schedule='constant' and warmup_epochs=0.")
    if ranks > 1:
        raise ValueError("capture_step=True records one device's step: train on one device.")


def _train_rank(rank: int, world_size: int, net: nn.Module, device: torch.device,
                cfg: _Config, report) -> nn.Module:
    """Train on one device; with ``world_size > 1`` as one rank of a DDP group."""
    with tuning.backend_flags(device, cfg.cudnn_benchmark, cfg.tf32):
        return _train_loop(rank, world_size, net, device, cfg, report)


def _train_loop(rank: int, world_size: int, net: nn.Module, device: torch.device,
                cfg: _Config, report) -> nn.Module:
    run = Training(net, device, cfg, rank, world_size)
    for epoch in range(cfg.num_epochs):
        run.start_epoch(epoch)
        if world_size > 1:
            dist.barrier()
        synchronize(device)
        timer = Timer()
        for i, (X, y) in enumerate(run.batches()):
            run.step(X, y)
            if ((i + 1) % max(1, run.num_batches // 5) == 0 and i + 1 < run.num_batches
                    and rank == 0):
                m = run.metric.tolist()  # a host-device sync, five times an epoch
                report("batch", epoch + (i + 1) / run.num_batches, m[0] / run.seen,
                       m[1] / run.seen)
        synchronize(device)
        if world_size > 1:
            dist.barrier()
        seconds = timer.stop()
        loss_sum, correct, n = _all_sum(run.metric.tolist() + [run.seen], device, world_size)
        test_correct, test_n = _all_sum(run.test_counts(), device, world_size)
        if rank == 0:
            report("epoch", epoch + 1, loss_sum / n, correct / n, test_correct / test_n,
                   seconds, n / seconds)
    return run.net


def _spawned_rank(rank: int, world_size: int, net_bytes: bytes, devices: list[torch.device],
                  cfg: _Config, port: int, queue) -> None:
    device = devices[rank]
    # Each rank unpickles its own copy: passing the module itself would put its CPU
    # tensors in shared memory, and all CPU ranks would then train one set of weights.
    net = torch.load(io.BytesIO(net_bytes), map_location="cpu", weights_only=False)
    backend = process_group_backend(device)
    if device.type == "cpu":
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    else:
        torch.cuda.set_device(device)  # before the process group, which binds to it
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=cfg.timeout),
                            device_id=process_group_device(device))
    try:
        net = _train_rank(rank, world_size, net, device, cfg, lambda *msg: queue.put(msg))
        if rank == 0:  # bytes, not tensors: shared-memory tensors die with this process
            buffer = io.BytesIO()
            torch.save(net.state_dict(), buffer)
            queue.put(("state", buffer.getvalue()))
    finally:
        dist.destroy_process_group()
    # Leave without Python's interpreter shutdown: a gloo thread may still be freeing a
    # finished work item that holds tensors, and tearing down the interpreter under it
    # aborts the process ("terminate called without an active exception").
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _rank_failure(err: Exception, devices: list[torch.device], timeout: float) -> RuntimeError:
    """A clear error for a rank that died or failed (``torch.multiprocessing``'s ``err``)."""
    rank = err.error_index
    where = f"training rank {rank} of {len(devices)} (on {devices[rank]})"
    if isinstance(err, mp.ProcessExitedException):
        if err.signal_name:
            why = f"was killed by {err.signal_name}"
            if err.signal_name == "SIGKILL":
                why += (" (often the out-of-memory killer: try a smaller batch_size or fewer "
                        "CPU stand-ins)")
        else:
            why = f"exited with status {err.exit_code}"
        return RuntimeError(f"{where} {why}; the other ranks were stopped.")
    text = str(err)
    hint = ""
    if "timed out" in text.lower() or "timeout" in text.lower():
        hint = (f" It waited more than timeout={timeout:g} s for the other ranks: one of them "
                "is stuck.")
    return RuntimeError(f"{where} failed; the other ranks were stopped.{hint}\n{text}")


def _launched_by_torchrun() -> bool:
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def train(net: nn.Module, devices: Sequence[torch.device], batch_size: int, lr: float,
          num_epochs: int = 10, *, warmup_epochs: float = 1.0,
          num_train: int | None = None, num_test: int | None = None,
          num_workers: int = 0, root: str | os.PathLike | None = None,
          sync_bn: bool = False, seed: int = 0, timeout: float = 300.0,
          verbose: bool = True,
          pin_memory: bool | None = None, persistent_workers: bool = True,
          data_on_device: bool = False, channels_last: bool = False,
          amp: str | None = None, compile: str | None = None, fused: bool = False,
          cudnn_benchmark: bool = False, tf32: bool = False,
          schedule: str = "constant", label_smoothing: float = 0.0,
          optimizer: str = "sgd", momentum: float = 0.0,
          weight_decay: float = 0.0, drop_last: bool | None = None,
          capture_step: bool = False) -> TrainResult:
    """Train ``net`` on Fashion-MNIST with SGD on one device or several.

    ``batch_size`` is the global minibatch: with ``k`` devices each device
    gets ``batch_size // k`` examples a step, so scale ``lr`` with the batch.
    The learning rate rises linearly from ``lr / steps`` to ``lr`` over the first
    ``warmup_epochs`` epochs (a warm-up keeps large scaled rates stable), then
    follows ``schedule``: ``"constant"``, or a ``"linear"`` or ``"cosine"`` decay
    to 0 at the end of the last epoch.

    The defaults train as d2l's multi-GPU loop does (plain SGD at the given batch and rate,
    the test accuracy after every epoch), with four differences: ``net`` is trained as given
    (d2l's loop first draws N(0, 0.01) weights), the rate warms up over
    ``warmup_epochs=1.0`` (pass 0 for d2l's constant rate), there are no loader processes
    (``num_workers=0``; d2l uses 4) and, on CUDA, batches are pinned. The fast path's
    switches (the tuning-tips chapter turns them on one at a time; :mod:`d2l_ext.tuning` says which
    need
    a GPU):

    * data: ``num_workers`` loader processes, ``pin_memory`` (default: on CUDA),
      ``persistent_workers``; or ``data_on_device=True``: the whole uint8 dataset on
      the device, shuffled and sliced there (:class:`d2l_ext.tuning.DeviceLoader`);
    * ``channels_last`` memory format for the network and its inputs;
    * ``amp="bf16"`` or ``"fp16"``: ``torch.autocast``, fp16 with a gradient scaler;
    * ``compile="default"``, ``"max-autotune-no-cudagraphs"``, or ``"reduce-overhead"`` and
      ``"max-autotune"`` (both with CUDA graphs on a GPU):
      ``torch.compile``; the first epoch then includes the compilation. ``drop_last``
      (default: ``True`` under ``compile``, else ``False``) leaves out the last partial
      training batch, so that the compiled graph keeps one static batch shape;
    * ``capture_step=True`` (GPU): the whole step (forward, backward, update, metric)
      recorded once as a CUDA graph and replayed (:class:`Training`); with a constant rate
      (``schedule="constant"``, ``warmup_epochs=0``), no fp16 gradient scaler, one device;
      with ``compile="default"`` the compiled kernels are recorded;
    * ``fused=True``: the fused SGD kernel (with ``amp="fp16"`` it also spares the gradient
      scaler's host-device synchronisation); ``cudnn_benchmark``; ``tf32`` matmuls (both
      process-wide settings, restored when ``train`` returns);
    * optimisation: ``schedule``, ``label_smoothing``, ``momentum``, ``weight_decay``,
      ``optimizer="sgd"`` or ``"lamb"`` (:class:`d2l_ext.tuning.LAMB`).

    * One device: trains in this process.
    * Several devices: one process per device, started here, joined by
      ``torch.distributed`` (NCCL on GPUs, gloo on CPU) and trained with
      ``DistributedDataParallel``. A CPU may appear several times (e.g.
      ``[cpu(), cpu()]``: two CPU processes, for correctness, not speed); a GPU may not
      (NCCL runs one rank per GPU), nor may GPUs and CPUs mix.
      The network's classes must be importable by the new processes (defined
      in a module, not in a notebook cell).
    * Started by ``torchrun``: this process is one rank and trains on
      ``devices[LOCAL_RANK]``; rank 0 prints progress.

    With several devices a rank that dies (killed, out of memory, an exception)
    stops the others, and ``train`` raises a ``RuntimeError`` naming it; a rank
    that waits more than ``timeout`` seconds for the others in one collective
    fails instead of hanging (under ``torchrun``, torchrun reports the rank).

    After training ``net`` holds the trained weights (rank 0's in a DDP run).
    Returns per-epoch loss, accuracies, seconds and images per second; in a
    notebook the curves are drawn live.
    """
    devices = as_devices(devices)
    torchrun = _launched_by_torchrun()
    check_rank_devices(devices, torchrun)
    ranks = int(os.environ["WORLD_SIZE"]) if torchrun else len(devices)
    cfg = _config(batch_size, lr, num_epochs=num_epochs, warmup_epochs=warmup_epochs,
                  num_train=num_train, num_test=num_test, num_workers=num_workers, root=root,
                  sync_bn=sync_bn, seed=seed, timeout=timeout, pin_memory=pin_memory,
                  persistent_workers=persistent_workers, data_on_device=data_on_device,
                  channels_last=channels_last, amp=amp, compile=compile, fused=fused,
                  cudnn_benchmark=cudnn_benchmark, tf32=tf32, schedule=schedule,
                  label_smoothing=label_smoothing, optimizer=optimizer, momentum=momentum,
                  weight_decay=weight_decay, drop_last=drop_last, capture_step=capture_step,
                  ranks=ranks)
    progress = TrainProgress(TrainResult([str(d) for d in devices], batch_size, lr),
                             num_epochs, verbose)

    def report(kind: str, *values) -> None:
        if kind == "state":
            net.load_state_dict(torch.load(io.BytesIO(values[0]), map_location="cpu"))
        else:
            getattr(progress, kind)(*values)

    if _launched_by_torchrun():
        world_size, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
        device = devices[int(os.environ["LOCAL_RANK"]) % len(devices)]
        if world_size > 1 and not dist.is_initialized():
            if device.type == "cuda":
                torch.cuda.set_device(device)
            dist.init_process_group(process_group_backend(device),
                                    timeout=datetime.timedelta(seconds=timeout),
                                    device_id=process_group_device(device))
        _train_rank(rank, world_size, net, device, cfg,
                    report if rank == 0 else lambda *msg: None)
    elif len(devices) == 1:
        _train_rank(0, 1, net, devices[0], cfg, report)
    else:
        ctx = mp.get_context("spawn")
        queue = ctx.SimpleQueue()
        net_bytes = io.BytesIO()
        torch.save(net.cpu(), net_bytes)
        procs = mp.start_processes(
            _spawned_rank,
            args=(len(devices), net_bytes.getvalue(), devices, cfg, _free_port(), queue),
            nprocs=len(devices), join=False, start_method="spawn")
        done = False
        while not done:
            while not queue.empty():
                report(*queue.get())
            try:
                done = procs.join(timeout=0.5)
            except (mp.ProcessExitedException, mp.ProcessRaisedException) as err:
                raise _rank_failure(err, devices, timeout) from err
        while not queue.empty():
            report(*queue.get())
    if _launched_by_torchrun() and int(os.environ["RANK"]) != 0:
        return progress.result
    return progress.done()
