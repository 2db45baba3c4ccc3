"""The host-device-sync chapter's toy segmentation problem (PyTorch): a small all-convolutional
network, random
images with per-pixel labels, and one masked cross-entropy written four ways, from the
version full of host-device synchronisations to the one without.

The loss ignores the pixels labelled ``ignore_value`` and those of the *background* class
(the last one), and is zeroed when the labels of the batch, counted after that and with
the ignore value counted as a label, take fewer than two distinct values. The four variants
compute the same value and the same gradient (a test checks); they differ in how, and in
how many times per training step (forward and backward) they make the host wait for the
device:

=================  ====================================  =========================  =====
variant            background -> ignored, label count    cross-entropy              syncs
=================  ====================================  =========================  =====
``"original"``     ``torch.nonzero`` + index assignment; boolean masks, then plain  6
                   ``torch.unique``, a Python ``if``     cross-entropy
``"where"``        ``torch.where``; otherwise as above   as above                   4
``"sort"``         ``torch.where``; sort and count the   as above                   3
                   steps; ``torch.where`` on the loss
``"ignore_index"`` as ``"sort"``                         ``cross_entropy(``         0
                                                         ``ignore_index=...)``
=================  ====================================  =========================  =====

The counts are those of a CUDA or ROCm GPU, and of the operators that a CPU profile shows in
their place. On another accelerator (Apple's MPS, Intel's XPU) the index assignment of
``"original"`` makes its number on the device and waits for nothing, so ``"original"``
synchronises 5 times there.

What synchronises on a GPU is every operation whose result's size the host must learn from
the device: ``torch.nonzero``, ``torch.unique``, and each boolean index ``t[mask]`` (computed
with a ``nonzero`` of the mask), once in the forward pass for the scores and once for the
labels, and once more in the backward pass, where the scores' gradient is written back
through the mask. And, on a CUDA or ROCm GPU, one more that learns nothing: the index
assignment ``target[indices] = ignore_value`` of ``"original"``. For a CUDA tensor, Python's
``__setitem__`` wraps the number in a one-element CPU tensor (``THPVariable_setitem``), and
``index_put_`` copies it to the device with a blocking copy (``_index_put_impl_``; the copy is
``memcpy_and_sync``, a ``cudaMemcpyAsync`` then a ``cudaStreamSynchronize``). With a single
boolean mask instead, ``index_put_`` becomes ``masked_fill_`` with the number read on the host,
and nothing waits; on another accelerator the number is made on the device, and nothing is
copied. ``torch.where``, as in the other variants, never waits. The Python ``if``
adds none of its own: it tests ``unique(...).numel()``, a host integer, and the wait has
already happened inside ``unique``. In order, a step of ``"original"`` synchronises in
``nonzero``, the index assignment, ``unique``, the two boolean indexes and the backward pass,
as the host-device-sync chapter writes it; the fixes remove them from the front (``torch.where``
takes both the
``nonzero`` and the assignment), so the first wait of a step moves from ``nonzero`` to
``unique`` to the boolean index. The book's GPU run (an NVIDIA H100, PyTorch 2.11, 2026-11-24)
counted the same: 6, 4, 3 and 0 warnings per step under
``torch.cuda.set_sync_debug_mode("warn")``
(``d2l_ext/data/gpu_runs/host-device-sync-measuring.json``), and 30
``cudaStreamSynchronize`` calls in 5 profiled steps of ``"original"``
(``d2l_ext/data/gpu_runs/host-device-sync.json``).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

VARIANTS = ("original", "where", "sort", "ignore_index")


class SegmentationNet(nn.Module):
    """An input convolution, ``num_hidden`` 3x3 convolutions with ReLU, an output convolution:
    ``(n, 3, H, W)`` images in, ``(n, num_classes, H, W)`` per-pixel scores out."""

    def __init__(self, num_hidden: int = 10, num_classes: int = 10, width: int = 10) -> None:
        super().__init__()
        layers = [nn.Conv2d(3, width, 3, padding=1), nn.ReLU()]
        for _ in range(num_hidden):
            layers += [nn.Conv2d(width, width, 3, padding=1), nn.ReLU()]
        layers.append(nn.Conv2d(width, num_classes, 3, padding=1))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def random_batch(batch_size: int, size: int = 256, num_classes: int = 10,
                 ignore_value: int = -1, seed: int = 0,
                 device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Random images ``(b, 3, size, size)`` and labels in ``{ignore_value} ∪ range(num_classes)``,
    drawn from a fixed seed (no download)."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(batch_size, 3, size, size, generator=g)
    labels = torch.randint(0, num_classes + 1, (batch_size, size, size), generator=g) - 1
    labels[labels == -1] = ignore_value
    return images.to(device), labels.to(device)


class MaskedCrossEntropy(nn.Module):
    """The masked cross-entropy of the host-device-sync chapter, as ``variant`` (see
    :data:`VARIANTS`)."""

    def __init__(self, variant: str = "original", ignore_value: int = -1,
                 num_classes: int = 10) -> None:
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"variant={variant!r}; choose one of {', '.join(VARIANTS)}.")
        self.variant, self.ignore_value, self.num_classes = variant, ignore_value, num_classes

    def forward(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        background = self.num_classes - 1
        if self.variant == "original":
            target = target.clone()  # the caller's labels stay as they were
            target[torch.nonzero(target == background, as_tuple=True)] = self.ignore_value
        else:
            target = torch.where(target == background, self.ignore_value, target)
        if self.variant in ("original", "where"):
            num_labels = torch.unique(target).numel()  # unique waits; numel() is a host int
            loss = self.boolean_mask_loss(pred, target)
            return 0.0 * loss if num_labels < 2 else loss
        labels = torch.sort(target.flatten()).values
        num_labels = torch.count_nonzero(labels[1:] != labels[:-1]) + 1
        if self.variant == "sort":
            loss = self.boolean_mask_loss(pred, target)
        else:
            loss = F.cross_entropy(pred, target, ignore_index=self.ignore_value)
        return torch.where(num_labels < 2, 0.0 * loss, loss)

    def boolean_mask_loss(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Cross-entropy over the pixels whose label is not ``ignore_value``, picked out with
        boolean masks (whose result's size the host must learn from the device: three waits
        per step, two here and one in the backward pass)."""
        mask = target != self.ignore_value
        scores = pred.permute(0, 2, 3, 1)[mask]  # (pixels kept, num_classes)
        return F.cross_entropy(scores, target[mask])
