"""The MXNet half of d2l_ext: ``from d2l_ext import mxnet as d2l``.

MXNet 1.9.1 is the last release (the project is retired). It imports only
with numpy < 1.24, and numpy 1.23.5 has wheels only up to Python 3.11.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy

from d2l_ext.catalogue import after_colon, figure_text, listing, say
from d2l_ext.exercises import checker as _checker
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

_NEEDS = ("d2l_ext.mxnet needs MXNet 1.9.1 with numpy < 1.24 (numpy 1.23.5), which exists "
          "only for Python <= 3.11. In a Python 3.11 environment run: "
          "pip install 'mxnet==1.9.1' 'numpy==1.23.5'. For PyTorch use d2l_ext.torch instead.")

if tuple(int(p) for p in numpy.__version__.split(".")[:2]) >= (1, 24):
    raise ImportError(f"{_NEEDS} Found numpy {numpy.__version__}.")
try:
    import mxnet as mx
    from mxnet import autograd, gluon, init, np, npx
    from mxnet.gluon import nn
except ImportError as err:
    raise ImportError(f"{_NEEDS} ({err})") from err

from d2l_ext import fashion_mnist  # noqa: E402

npx.set_np()

__all__ = [
    "Accumulator", "Animator", "Benchmark", "Timer", "TrainResult", "Residual", "accuracy",
    "cpu", "evaluate_accuracy_gpu", "evaluate_accuracy_gpus", "get_dataloader_workers", "gpu",
    "label", "load_data_fashion_mnist", "measure", "message", "num_gpus", "resnet18", "sgd",
    "Table", "show", "text_table", "signed", "say", "figure_text", "listing", "after_colon",
    "split_batch", "synchronize", "Timing", "train", "paired_verdict",
    "false_alarm", "Training", "try_all_devices",
    "try_all_gpus", "try_gpu", "check_exercise",
]

#: The chapters' exercise checks (:func:`d2l_ext.exercises.check`) for this framework.
check_exercise = _checker("mxnet")


# ---------------------------------------------------------------- devices
def synchronize() -> None:
    """Wait until MXNet's engine has finished every queued operation, on every device
    (``npx.waitall``). MXNet is asynchronous on a CPU too: a timer needs this barrier."""
    npx.waitall()


def measure(f, repeats: int = 5, warmup: int = 1) -> Timing:
    """Time ``repeats`` runs of ``f()``, each between two barriers (:func:`synchronize`),
    after ``warmup`` runs; the median and the range (:class:`d2l_ext.utils.Timing`)."""
    return _measure(f, synchronize, repeats, warmup)


def cpu(i: int = 0) -> mx.Context:
    """The CPU context ``i`` (several CPU contexts stand in for several devices)."""
    return npx.cpu(i)


def gpu(i: int = 0) -> mx.Context:
    """The ``i``-th GPU context (it need not exist)."""
    return npx.gpu(i)


def num_gpus() -> int:
    """The number of available GPUs."""
    return npx.num_gpus()


def try_gpu(i: int = 0) -> mx.Context:
    """Return ``gpu(i)`` if it exists, otherwise ``cpu()``."""
    return gpu(i) if num_gpus() >= i + 1 else cpu()


def try_all_gpus() -> list[mx.Context]:
    """Return all available GPUs, or ``[cpu()]`` if there is none (d2l's documented meaning)."""
    return [gpu(i) for i in range(num_gpus())] or [cpu()]


def try_all_devices(min_count: int = 2) -> list[mx.Context]:
    """All GPUs if there are at least ``min_count``, else ``[cpu(0), cpu(1), ...]``.

    Several CPU contexts let the multi-device code run on a laptop: it shows
    correctness, not speed (they share the same cores).
    """
    gpus = [gpu(i) for i in range(num_gpus())]
    return gpus if len(gpus) >= min_count else [cpu(i) for i in range(min_count)]


# ---------------------------------------------------------------- splitting
def split_batch(X: np.ndarray, y: np.ndarray,
                devices: Sequence[mx.Context]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Split ``X`` and ``y`` into ``len(devices)`` shards, one on each device."""
    check_split(X.shape[0], y.shape[0], len(devices))
    return (gluon.utils.split_and_load(X, devices, even_split=False),
            gluon.utils.split_and_load(y, devices, even_split=False))


# ---------------------------------------------------------------- models
class Residual(nn.HybridBlock):
    """The residual block of ResNet (d2l's, as a ``HybridBlock``: ``hybridize()`` compiles it)."""

    def __init__(self, num_channels: int, use_1x1conv: bool = False, strides: int = 1,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.conv1 = nn.Conv2D(num_channels, kernel_size=3, padding=1, strides=strides)
        self.conv2 = nn.Conv2D(num_channels, kernel_size=3, padding=1)
        self.conv3 = (nn.Conv2D(num_channels, kernel_size=1, strides=strides)
                      if use_1x1conv else None)
        self.bn1 = nn.BatchNorm()
        self.bn2 = nn.BatchNorm()

    def hybrid_forward(self, F, X):
        Y = F.npx.relu(self.bn1(self.conv1(X)))
        Y = self.bn2(self.conv2(Y))
        if self.conv3:
            X = self.conv3(X)
        return F.npx.relu(Y + X)


def resnet18(num_classes: int) -> nn.HybridSequential:
    """d2l's ResNet-18 variant for small images: 3x3 stem, stride 1, no max-pooling.

    Built from hybrid blocks, so that ``net.hybridize()`` compiles the whole network.
    """

    def resnet_block(num_channels: int, num_residuals: int,
                     first_block: bool = False) -> nn.HybridSequential:
        blk = nn.HybridSequential()
        for i in range(num_residuals):
            if i == 0 and not first_block:
                blk.add(Residual(num_channels, use_1x1conv=True, strides=2))
            else:
                blk.add(Residual(num_channels))
        return blk

    net = nn.HybridSequential()
    net.add(nn.Conv2D(64, kernel_size=3, strides=1, padding=1),
            nn.BatchNorm(), nn.Activation("relu"))
    net.add(resnet_block(64, 2, first_block=True), resnet_block(128, 2),
            resnet_block(256, 2), resnet_block(512, 2))
    net.add(nn.GlobalAvgPool2D(), nn.Dense(num_classes))
    return net


# ---------------------------------------------------------------- data
def get_dataloader_workers() -> int:
    """Use 4 processes to read the data (as d2l)."""
    return 4


def fashion_mnist_dataset(train: bool = True, resize: int | None = None,
                          root: str | os.PathLike | None = None,
                          num_examples: int | None = None) -> gluon.data.Dataset:
    """Fashion-MNIST as a gluon dataset of ``(1, H, W)`` float32 images in [0, 1]."""
    images, labels = fashion_mnist.load(train, root, num_examples)
    labels = labels.astype("int32")
    if not resize:  # convert once, in numpy: much faster than a per-image ToTensor
        return gluon.data.ArrayDataset(images[:, None].astype("float32") / 255, labels)
    trans = gluon.data.vision.transforms.Compose([
        gluon.data.vision.transforms.Resize(resize), gluon.data.vision.transforms.ToTensor()])
    return gluon.data.ArrayDataset(np.array(images[..., None]), labels).transform_first(trans)


def load_data_fashion_mnist(batch_size: int, resize: int | None = None, *,
                            root: str | os.PathLike | None = None,
                            num_workers: int | None = None, pin_memory: bool = False,
                            num_train: int | None = None, num_test: int | None = None,
                            ) -> tuple[gluon.data.DataLoader, gluon.data.DataLoader]:
    """Load Fashion-MNIST into a training and a test ``DataLoader`` (as d2l).

    The files are found as described in :mod:`d2l_ext.fashion_mnist`, never by
    gluon's downloader. ``num_workers`` defaults to :func:`get_dataloader_workers`;
    ``num_train`` and ``num_test`` keep only the first examples, for quick runs.
    """
    if num_workers is None:
        num_workers = get_dataloader_workers()
    train_set = fashion_mnist_dataset(True, resize, root, num_train)
    test_set = fashion_mnist_dataset(False, resize, root, num_test)
    options = dict(num_workers=num_workers, pin_memory=pin_memory)
    return (gluon.data.DataLoader(train_set, batch_size, shuffle=True, **options),
            gluon.data.DataLoader(test_set, batch_size, shuffle=False, **options))


# ---------------------------------------------------------------- evaluation
def accuracy(y_hat: np.ndarray, y: np.ndarray) -> float:
    """The number of correct predictions."""
    if y_hat.ndim > 1 and y_hat.shape[1] > 1:
        y_hat = y_hat.argmax(axis=1)
    return float((y_hat.astype(y.dtype) == y).sum())


def evaluate_accuracy_gpu(net: nn.Block, data_iter, device: mx.Context | None = None) -> float:
    """The accuracy of ``net`` on ``data_iter``, computed on one device.

    ``device`` defaults to the first device of the first parameter.
    """
    if device is None:
        device = list(net.collect_params().values())[0].list_ctx()[0]
    metric = Accumulator(2)
    for X, y in data_iter:
        X, y = X.as_in_ctx(device), y.as_in_ctx(device)
        metric.add(accuracy(net(X), y), y.size)
    return metric[0] / metric[1]


def evaluate_accuracy_gpus(net: nn.Block, data_iter, split_f=split_batch) -> float:
    """The accuracy of ``net`` on ``data_iter``, each batch split over the net's devices."""
    devices = list(net.collect_params().values())[0].list_ctx()
    metric = Accumulator(2)
    for features, labels in data_iter:
        # a last batch smaller than the device count goes to as many devices as it has rows
        X_shards, y_shards = split_f(features, labels, devices[:labels.shape[0]])
        pred_shards = [net(X_shard) for X_shard in X_shards]  # run in parallel
        metric.add(sum(accuracy(p, y) for p, y in zip(pred_shards, y_shards)), labels.size)
    return metric[0] / metric[1]


# ---------------------------------------------------------------- training
def sgd(params, lr: float, batch_size: int) -> None:
    """Minibatch stochastic gradient descent on ``params`` (as d2l): each parameter moves by
    ``lr`` times its gradient divided by ``batch_size``."""
    for param in params:
        param[:] = param - lr * param.grad / batch_size


def default_kvstore(devices: Sequence[mx.Context]) -> str:
    """Where ``gluon.Trainer`` sums the gradients by default: ``"device"`` (on the GPUs)
    when every device is a GPU, else ``"local"`` (on the CPU)."""
    return "device" if all(d.device_type == "gpu" for d in devices) else "local"


def train(net: nn.Block, devices: Sequence[mx.Context], batch_size: int, lr: float,
          num_epochs: int = 10, *, warmup_epochs: float = 1.0,
          num_train: int | None = None, num_test: int | None = None,
          num_workers: int = 0, root: str | os.PathLike | None = None,
          seed: int = 0, verbose: bool = True, pin_memory: bool = False,
          hybridize: bool = False, kvstore: str | None = None) -> TrainResult:
    """Train ``net`` on Fashion-MNIST with SGD on one device or several.

    The parameters are (re)initialised on every device in ``devices``; each
    minibatch of ``batch_size`` examples is split across them and
    ``gluon.Trainer`` sums the gradients (kvstore ``device`` on GPUs, ``local``
    on CPU contexts). The learning rate rises linearly to ``lr`` over the first
    ``warmup_epochs`` epochs. Without GPUs, pass ``[cpu(0), cpu(1)]``: the code
    is the same, the speed is not.

    The defaults train as d2l's multi-GPU loop does (SGD at the given batch and rate, the
    test accuracy after every epoch), with three differences: Xavier initialisation (d2l's
    loop draws N(0, 0.01) weights), a warm-up over ``warmup_epochs=1.0`` (pass 0 for d2l's
    constant rate) and no loader processes (``num_workers=0``; d2l uses 4). Switches
    (the tuning-tips chapter): ``num_workers`` loader processes and ``pin_memory`` (page-locked
    batches,
    for copies to a GPU);
    ``hybridize=True``: ``net.hybridize(static_alloc=True, static_shape=True)``, MXNet's
    compiler (the network must be built of hybrid blocks, as :func:`resnet18` is);
    ``kvstore``: where the gradients are summed (``"device"``: on the GPUs, ``"local"``:
    on the CPU, ``"nccl"`` in builds with NCCL; default: ``"device"`` on GPUs, else
    ``"local"``).

    Returns per-epoch loss, accuracies, seconds and images per second; in a
    notebook the curves are drawn live.
    """
    run = Training(net, devices, batch_size, lr, num_epochs, warmup_epochs=warmup_epochs,
                   num_train=num_train, num_test=num_test, num_workers=num_workers, root=root,
                   seed=seed, pin_memory=pin_memory, hybridize=hybridize, kvstore=kvstore)
    progress = TrainProgress(TrainResult([str(d) for d in run.devices], batch_size, lr),
                             num_epochs, verbose)
    for epoch in range(num_epochs):
        run.start_epoch()
        npx.waitall()
        timer = Timer()
        for i, (features, labels) in enumerate(run.train_iter):
            run.step(features, labels)
            if (i + 1) % max(1, run.num_batches // 5) == 0 and i + 1 < run.num_batches:
                loss_sum, correct = run.sums()  # a barrier
                progress.batch(epoch + (i + 1) / run.num_batches, loss_sum / run.seen,
                               correct / run.seen)
        npx.waitall()
        seconds = timer.stop()
        loss_sum, correct = run.sums()
        progress.epoch(epoch + 1, float(loss_sum / run.seen), float(correct / run.seen),
                       run.test_accuracy(), seconds, run.seen / seconds)
    return progress.done()


class Training:
    """:func:`train`'s training, built from its switches: the network initialised on every
    device (hybridized if asked), the ``gluon.Trainer``, the loaders and the step. ``train``
    runs it epoch by epoch; the tuning-tips chapter's ladder runs several of them an epoch at a
    time, in
    turns, so that it times exactly the step that ``train`` runs."""

    def __init__(self, net: nn.Block, devices: Sequence[mx.Context], batch_size: int, lr: float,
                 num_epochs: int = 10, *, warmup_epochs: float = 1.0,
                 num_train: int | None = None, num_test: int | None = None,
                 num_workers: int = 0, root: str | os.PathLike | None = None, seed: int = 0,
                 pin_memory: bool = False, hybridize: bool = False,
                 kvstore: str | None = None) -> None:
        devices = [devices] if isinstance(devices, mx.Context) else list(devices)
        if not devices:
            raise ValueError("devices is empty; pass at least one device, e.g. "
                             "[d2l.try_gpu()].")
        check_train_args(batch_size=batch_size, lr=lr, num_epochs=num_epochs,
                         warmup_epochs=warmup_epochs, num_train=num_train, num_test=num_test,
                         num_workers=num_workers)
        if batch_size < len(devices):
            raise ValueError(f"batch_size {batch_size} is smaller than the {len(devices)} "
                             "devices.")
        if batch_size % len(devices):
            raise ValueError(f"batch_size {batch_size} is not a multiple of the {len(devices)} "
                             "devices: each device would get a different share of every "
                             f"batch; use e.g. {batch_size - batch_size % len(devices)}.")
        mx.random.seed(seed)
        numpy.random.seed(seed)
        net.initialize(init=init.Xavier(), ctx=devices, force_reinit=True)
        if hybridize:
            if not isinstance(net, gluon.HybridBlock):
                raise ValueError(f"hybridize=True needs a HybridBlock; {type(net).__name__} is "
                                 "a plain Block. Build the network from nn.HybridSequential "
                                 "and HybridBlocks (as d2l.resnet18 does).")
            net.hybridize(static_alloc=True, static_shape=True)
        self.net, self.devices, self.lr = net, devices, lr
        kvstore = default_kvstore(devices) if kvstore is None else kvstore
        self.trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": lr},
                                     kvstore=kvstore)
        self.train_iter, self.test_iter = load_data_fashion_mnist(
            batch_size, root=root, num_workers=num_workers, pin_memory=pin_memory,
            num_train=num_train, num_test=num_test)
        self.loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
        self.num_batches = len(self.train_iter)
        self.warmup_steps = max(1, round(warmup_epochs * self.num_batches))
        self.steps = 0
        self.start_epoch()

    def start_epoch(self) -> None:
        """Reset the running sums of loss and correct predictions (per device: no barrier
        per step)."""
        self._sums = [np.zeros(2, ctx=d) for d in self.devices]
        self.seen = 0

    def step(self, features: np.ndarray, labels: np.ndarray) -> None:
        """One training step: the batch split over the devices, forward, backward, the
        update, the running sums (no barrier)."""
        if labels.shape[0] < len(self.devices):
            return  # a last batch with fewer examples than devices: left out
        self.trainer.set_learning_rate(self.lr * min(1.0, (self.steps + 1) / self.warmup_steps))
        self.steps += 1
        X_shards, y_shards = split_batch(features, labels, self.devices)
        with autograd.record():
            preds = [self.net(X) for X in X_shards]
            losses = [self.loss_fn(p, y) for p, y in zip(preds, y_shards)]
        for loss in losses:
            loss.backward()
        self.trainer.step(labels.shape[0])
        for k, (p, y, loss) in enumerate(zip(preds, y_shards, losses)):
            hits = (p.argmax(axis=1).astype(y.dtype) == y).astype("float32").sum()
            self._sums[k] += np.stack([loss.sum(), hits])
        self.seen += labels.shape[0]

    def epoch(self) -> int:
        """One epoch of steps; the number of steps (no barrier: time it between two)."""
        self.start_epoch()
        done = 0
        for features, labels in self.train_iter:
            self.step(features, labels)
            done += 1
        return done

    def sums(self) -> tuple[float, float]:
        """The epoch's summed loss and correct predictions so far (a barrier)."""
        loss_sum, correct = sum(s.asnumpy() for s in self._sums)
        return float(loss_sum), float(correct)

    def test_accuracy(self) -> float:
        return evaluate_accuracy_gpus(self.net, self.test_iter)
