"""What the tuning chapter's pages share: the sizes per device, the training step they time,
and the book's GPU run of a page as the prose cites it.

Each page of the chapter (``tuning-tips``, ``tuning-tips-switches``, ``tuning-tips-ladder``)
runs in a kernel of its own; defining these here once keeps the pages alike.

* :func:`sizes` -- the data, batch and ladder sizes for a CPU, a GPU or a smoke run;
* :func:`torch_training`, :func:`torch_random_batch` -- ResNet-18, SGD and the step (PyTorch);
* :func:`mxnet_net`, :func:`mxnet_training`, :func:`mxnet_random_batch` -- the same in MXNet;
* :class:`KeptRun` -- figures of a page's GPU record by their short names;
* :func:`signed` -- a number with its sign, a negative one with a true minus sign.

The module imports no framework at import time: each function imports its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from d2l_ext.catalogue import say
from d2l_ext.i18n import Text, label
from d2l_ext.utils import signed  # noqa: F401 (the pages call tuning_setup.signed)


@dataclass(frozen=True)
class Sizes:
    """The sizes of one kind of run.

    ``num_train``/``num_test``: images used (``None``: all); ``batch_size``: the ladder's
    batch, with ``lr`` d2l's rate 0.1 scaled from 256 to it; ``batches``: the batch sizes at
    which one step is timed; ``target``: the test accuracy the ladder races to, from
    ``seeds`` seeds for at most ``max_epochs`` epochs; ``rounds`` of ``steps`` steps per rung;
    ``scales``: the batch multiples of the ladder's large-batch rungs.
    """

    num_train: int | None
    num_test: int | None
    batch_size: int
    batches: list[int] = field(hash=False)
    target: float
    rounds: int
    steps: int
    seeds: int
    max_epochs: int
    scales: tuple[int, ...]

    @property
    def lr(self) -> float:
        """d2l's learning rate for a batch of 256, scaled with the batch."""
        return 0.1 * self.batch_size / 256


def sizes(device_type: str, smoke: bool = False) -> Sizes:
    """The sizes for a device of type ``device_type`` (``"cpu"``, ``"cuda"``, ...; anything
    but ``"cpu"`` counts as a GPU), or a tiny run for tests if ``smoke``."""
    if smoke:
        return Sizes(64, 64, 8, [2, 4, 8], 0.2, rounds=2, steps=2, seeds=1, max_epochs=1,
                     scales=(4,))
    if device_type != "cpu":
        return Sizes(None, None, 256, [16, 32, 64, 128, 256, 512, 1024], 0.90, rounds=5,
                     steps=30, seeds=2, max_epochs=8, scales=(4, 8))
    return Sizes(1_024, 512, 32, [1, 2, 4, 8, 16, 32], 0.5, rounds=5, steps=4, seeds=2,
                 max_epochs=4, scales=(4,))


# ---------------------------------------------------------------------------- PyTorch
@dataclass
class TorchTraining:
    """ResNet-18, its SGD optimizer and the loss; :meth:`step` is one training step."""

    net: Any
    optimizer: Any
    loss_fn: Any

    def step(self, X, y, net=None, optimizer=None) -> None:
        """One step on ``(X, y)``, of this network, or of ``net`` with its ``optimizer``."""
        net = self.net if net is None else net
        optimizer = self.optimizer if optimizer is None else optimizer
        loss = self.loss_fn(net(X), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


def torch_training(device, lr: float) -> TorchTraining:
    """The multi-GPU chapter's ResNet-18 with d2l's initialisation, on ``device``, trained
    by SGD at rate ``lr`` with the cross-entropy loss."""
    import torch
    from torch import nn

    from d2l_ext import ladder

    net = ladder.make_net().to(device)
    return TorchTraining(net, torch.optim.SGD(net.parameters(), lr=lr), nn.CrossEntropyLoss())


def torch_random_batch(b: int, device, size: int = 28):
    """``b`` random one-channel images of ``size`` x ``size`` pixels and labels 0-9."""
    import torch

    return (torch.rand(b, 1, size, size, device=device),
            torch.randint(0, 10, (b,), device=device))


# ---------------------------------------------------------------------------- MXNet
def mxnet_net(device):
    """The multi-GPU chapter's ResNet-18 with d2l's initialisation, on ``device``; the same
    weights on every call.

    Gluon draws a layer's weights at its first forward pass when their shape is not given
    (deferred initialisation), from the random stream as it is then; so one forward pass on
    an image of the chapter's shape finishes the initialisation here, right after seeding.
    """
    from mxnet import init, np, npx

    from d2l_ext import mxnet as d2l

    npx.random.seed(0)
    net = d2l.resnet18(10)
    net.initialize(init=init.Normal(sigma=0.01), ctx=device)
    net(np.zeros((1, 1, 28, 28), ctx=device))
    return net


@dataclass
class MXNetTraining:
    """ResNet-18, its SGD trainer and the loss; :meth:`step` is one training step."""

    net: Any
    trainer: Any
    loss_fn: Any

    def step(self, X, y, net=None, trainer=None) -> None:
        """One step on ``(X, y)``, of this network, or of ``net`` with its ``trainer``."""
        from mxnet import autograd

        net = self.net if net is None else net
        trainer = self.trainer if trainer is None else trainer
        with autograd.record():
            loss = self.loss_fn(net(X), y)
        loss.backward()
        trainer.step(X.shape[0])


def mxnet_training(device, lr: float) -> MXNetTraining:
    """:func:`mxnet_net`, trained by SGD at rate ``lr`` with the cross-entropy loss."""
    from mxnet import gluon

    net = mxnet_net(device)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": lr})
    return MXNetTraining(net, trainer, gluon.loss.SoftmaxCrossEntropyLoss())


def mxnet_random_batch(b: int, device, size: int = 28):
    """``b`` random one-channel images of ``size`` x ``size`` pixels and labels 0-9."""
    from mxnet import np

    return (np.random.uniform(size=(b, 1, size, size), ctx=device),
            np.random.randint(0, 10, size=(b,), ctx=device))


# ---------------------------------------------------------------------------- GPU record
class KeptRun:
    """The figures of a page's GPU record (``d2l.gpu_runs.load``), by short names.

    ``names`` maps a short name to the figure's label (a :class:`~d2l_ext.i18n.Text`, whose
    English text the record keys by). ``record`` may be ``None``: the book keeps no GPU run
    of the page yet, and every figure is missing.
    """

    def __init__(self, record, names: Mapping[str, Text]) -> None:
        self.record = record
        self.names = names

    def get(self, key: str) -> Any:
        """The figure ``key`` of the record, or ``None``."""
        if self.record is None or key not in self.names:
            return None
        try:
            return self.record.value(self.names[key].en)
        except KeyError:
            return None

    def all(self, *keys: str) -> list | None:
        """The figures ``keys``, or ``None`` if the record lacks one of them."""
        values = [self.get(key) for key in keys]
        return None if None in values else values

    def where(self) -> Text:
        """The record's run as the prose cites it: its machine and its date."""
        if self.record is None:
            raise ValueError("the book keeps no GPU run of this page: check KeptRun.get or "
                             "KeptRun.all before citing where it ran")
        run = self.record.run
        return say("tuning-tips/gpus-gpu-date", gpus=run["gpus"], gpu=run["gpu"],
                   date=run["date"])



# ---------------------------------------------------------------- the learning-rate figure
#: The schedules :func:`plot_lr` names in its legend: (English, Chinese).
SCHEDULES = {"constant": ("constant", "恒定"), "linear": ("linear", "线性"),
             "cosine": ("cosine", "余弦"), "gluon cosine": ("cosine (Gluon)", "余弦（Gluon）")}


def plot_lr(rates: Mapping[str, Sequence[float]], ax=None):
    """The learning rate against the step, one line per schedule of ``rates`` (a name of
    :data:`SCHEDULES`, its legend text in the reader's language; any other name as it is);
    returns the axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5, 2.5))
    for name, values in rates.items():
        en, zh = SCHEDULES.get(name, (name, name))
        ax.plot(list(values), label=label(en=en, zh=zh))
    ax.set_xlabel(label(en="step", zh="步"))
    ax.set_ylabel(label(en="learning rate", zh="学习率"))
    ax.legend()
    return ax
