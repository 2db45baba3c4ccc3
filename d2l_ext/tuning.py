"""The switches behind ``d2l_ext.torch.train``'s fast path (PyTorch only).

* :class:`DeviceLoader`: the whole uint8 dataset on the device, shuffled and sliced there;
* :func:`autocast` and :func:`grad_scaler`: mixed precision (``amp="bf16"`` or ``"fp16"``);
* :func:`compile_model`: ``torch.compile`` with a mode (``"reduce-overhead"``: CUDA graphs);
* :func:`backend_flags`: ``cudnn.benchmark`` and TF32 matmuls, restored afterwards;
* :func:`lr_lambda`: warm-up, then constant, linear or cosine decay;
* :class:`LAMB`: layer-wise adaptive moments for large batches.

What needs a CUDA GPU, and what happens on a CPU instead:

=====================  ========================================================
``pin_memory``         a warning; nothing is pinned (there is no device to copy to)
``cudnn_benchmark``    a warning; no effect (cuDNN is NVIDIA's library)
``tf32``               a warning; no effect (TensorFloat-32 is a GPU format)
``compile=            a warning; compiled as ``"default"`` (CUDA graphs need CUDA)
"reduce-overhead"``
``sync_bn``            a warning; each process keeps its own BatchNorm statistics
                       (``nn.SyncBatchNorm`` refuses CPU tensors)
=====================  ========================================================

``amp="bf16"``, ``amp="fp16"`` (with its gradient scaler), ``channels_last``,
``compile`` and ``fused`` optimizers all run on a CPU as well.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch import nn

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
COMPILE_MODES = ("default", "max-autotune", "max-autotune-no-cudagraphs", "reduce-overhead")
#: The modes in which Inductor records CUDA graphs (``triton.cudagraphs``) on a GPU.
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
SCHEDULES = ("constant", "linear", "cosine")


def _choice(name: str, value, allowed) -> None:
    if value is not None and value not in allowed:
        options = ", ".join(repr(a) for a in (None, *allowed))
        raise ValueError(f"{name}={value!r} is not one of {options}.")


def check_options(amp: str | None, compile: str | None, schedule: str) -> None:
    """Raise a ``ValueError`` that lists the choices for a misspelt switch."""
    _choice("amp", amp, AMP_DTYPES)
    _choice("compile", compile, COMPILE_MODES)
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule={schedule!r} is not one of "
                         + ", ".join(repr(s) for s in SCHEDULES) + ".")


def cuda_only(name: str, device: torch.device, what: str = "has no effect") -> bool:
    """``True`` on a CUDA device; elsewhere warn that ``name`` ``what`` and return ``False``."""
    if device.type == "cuda":
        return True
    warnings.warn(f"{name} needs a CUDA GPU; on {device} it {what}.", stacklevel=3)
    return False


# ---------------------------------------------------------------- data on the device
class DeviceLoader:
    """Minibatches sliced from a dataset that lives on ``device`` as uint8.

    The images ``(n, H, W)`` are kept as bytes (Fashion-MNIST's 60,000 training
    images are 47 MB) and turned into float ``(b, 1, H, W)`` in [0, 1] a batch at
    a time, on the device: no worker processes, no host-to-device copies per step.

    Shuffling follows ``torch.utils.data.DistributedSampler``: each epoch a
    permutation is drawn from a generator seeded with ``seed + epoch`` (call
    :meth:`set_epoch`), padded with its first indices to a multiple of
    ``world_size``, and rank ``rank`` takes every ``world_size``-th index from
    ``rank`` on. With one rank every example comes exactly once per epoch; with
    several the ranks' indices are exactly those of ``DistributedSampler``.
    Without ``shuffle`` the order is ``rank, rank + world_size, ...`` (no padding),
    as the test loaders in :func:`d2l_ext.torch.train` use. With ``drop_last`` the last
    batch is left out when it is smaller than ``batch_size`` (as ``DataLoader``'s
    ``drop_last``), so that every batch has the same shape.

    Each batch is four small kernels on the device: gather the images, convert them to
    float, scale them to [0, 1], gather the labels (plus a copy for ``channels_last``).
    """

    def __init__(self, images: np.ndarray | torch.Tensor, labels: np.ndarray | torch.Tensor,
                 batch_size: int, device: torch.device | str, *, shuffle: bool = True,
                 rank: int = 0, world_size: int = 1, seed: int = 0,
                 memory_format: torch.memory_format = torch.contiguous_format,
                 drop_last: bool = False) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}.")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in range(world_size={world_size}).")
        self.device = torch.device(device)
        self.images = _tensor(images).to(self.device, torch.uint8)
        self.labels = _tensor(labels).to(self.device, torch.int64)
        if len(self.images) != len(self.labels):
            raise ValueError(f"{len(self.images)} images but {len(self.labels)} labels.")
        self.batch_size, self.shuffle = batch_size, shuffle
        self.rank, self.world_size, self.seed = rank, world_size, seed
        self.memory_format = memory_format
        self.drop_last = drop_last
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Draw a different permutation for ``epoch`` (as ``DistributedSampler``)."""
        self.epoch = epoch

    def indices(self) -> torch.Tensor:
        """This rank's example indices for the current epoch, on the CPU."""
        n = len(self.labels)
        if not self.shuffle:
            return torch.arange(self.rank, n, self.world_size)
        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)
        order = torch.randperm(n, generator=g)
        total = math.ceil(n / self.world_size) * self.world_size
        if total > n:
            order = torch.cat([order, order[:total - n]])
        return order[self.rank:total:self.world_size]

    def __len__(self) -> int:
        n = len(self.labels)
        per_rank = (math.ceil(n / self.world_size) if self.shuffle
                    else len(range(self.rank, n, self.world_size)))
        if self.drop_last:
            return per_rank // self.batch_size
        return math.ceil(per_rank / self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order = self.indices()
        if self.drop_last:
            order = order[:len(order) - len(order) % self.batch_size]
        order = order.to(self.device, non_blocking=True)
        for start in range(0, len(order), self.batch_size):  # (split would yield an empty one)
            batch = order[start:start + self.batch_size]
            X = self.images[batch].unsqueeze(1).float().div_(255)
            yield X.contiguous(memory_format=self.memory_format), self.labels[batch]


def _tensor(array: np.ndarray | torch.Tensor) -> torch.Tensor:
    # a copy of a numpy array: Fashion-MNIST's arrays are read-only, tensors are not
    return array if isinstance(array, torch.Tensor) else torch.from_numpy(np.array(array))


# ---------------------------------------------------------------- precision and compilation
def autocast(device: torch.device, amp: str | None) -> contextlib.AbstractContextManager:
    """``torch.autocast`` to ``amp``'s dtype on ``device``; a no-op for ``amp=None``."""
    if amp is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=AMP_DTYPES[amp])


def grad_scaler(device: torch.device, amp: str | None) -> torch.amp.GradScaler:
    """A gradient scaler, enabled for fp16 only: bf16 has float32's range and needs none."""
    return torch.amp.GradScaler(device.type, enabled=amp == "fp16")


def compile_model(model: nn.Module, mode: str | None, device: torch.device) -> nn.Module:
    """``torch.compile(model, mode=mode)``; ``model`` itself for ``mode=None``."""
    if mode is None:
        return model
    if mode == "reduce-overhead" and not cuda_only(
            'compile="reduce-overhead"', device, 'compiles as compile="default"'):
        mode = "default"
    return torch.compile(model, mode=mode, dynamic=False)  # static shapes: never a symbolic batch


def new_tf32_api() -> bool:
    """Whether this PyTorch sets TF32 per backend and operator (``fp32_precision``, 2.9+).

    There, ``torch.backends.cuda.matmul.fp32_precision = "tf32"`` is the new switch for CUDA
    matmuls. Mixing it with the old API is a trap: the old getter,
    ``torch.get_float32_matmul_precision()``, returns the value the old setter stored, and
    raises while a new switch holds TF32 that this value does not say (CUDA's matmuls
    ``"tf32"`` with the old value still ``"highest"``). Inductor still calls that getter
    (under ``mode="max-autotune"``, for example). ``torch.set_float32_matmul_precision("high")``
    sets the old value and the new switches of both matmul backends (CUDA, oneDNN) at once.
    """
    return hasattr(torch.backends.cuda.matmul, "fp32_precision")


def matmul_precision() -> str:
    """The float32 precision of CUDA matrix products as this PyTorch spells it: the new
    API's ``"ieee"``, ``"tf32"`` or ``"none"`` (inherit), else ``"highest"``/``"high"``."""
    if new_tf32_api():
        return torch.backends.cuda.matmul.fp32_precision
    return torch.get_float32_matmul_precision()


def _matmul_state() -> tuple:
    """Every matmul precision setting that ``set_float32_matmul_precision`` changes: the old
    value (``None`` if the old getter refuses the current mixed state) and, on PyTorch 2.9+,
    the new switches of CUDA's and oneDNN's matmuls."""
    try:
        legacy = torch.get_float32_matmul_precision()
    except RuntimeError:
        legacy = None
    if new_tf32_api():
        return (legacy, torch.backends.cuda.matmul.fp32_precision,
                torch.backends.mkldnn.matmul.fp32_precision)
    return (legacy,)


def _restore_matmul_state(state: tuple) -> None:
    legacy, *new = state
    if legacy is not None:
        torch.set_float32_matmul_precision(legacy)
    if new:
        torch.backends.cuda.matmul.fp32_precision, torch.backends.mkldnn.matmul.fp32_precision \
            = new


@contextlib.contextmanager
def backend_flags(device: torch.device, cudnn_benchmark: bool, tf32: bool) -> Iterator[None]:
    """Set ``cudnn.benchmark`` and TF32 matmuls for a block; restore them afterwards.

    Both are process-wide settings, so a run that turns them on must not leave them
    on for the next one. (cuDNN convolutions already use TF32 by default; ``tf32``
    adds matrix multiplications, with ``torch.set_float32_matmul_precision("high")``, which
    keeps the old and the new switches consistent, so that the old getter, which Inductor
    still reads, keeps working; see :func:`new_tf32_api`.)
    """
    benchmark, precision = torch.backends.cudnn.benchmark, _matmul_state()
    if cudnn_benchmark and cuda_only("cudnn_benchmark=True", device):
        torch.backends.cudnn.benchmark = True
    if tf32 and cuda_only("tf32=True", device):
        torch.set_float32_matmul_precision("high")
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = benchmark
        _restore_matmul_state(precision)


# ---------------------------------------------------------------- learning-rate schedules
def lr_lambda(schedule: str, warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    """The factor on the learning rate at each step, for ``torch.optim.lr_scheduler.LambdaLR``.

    It rises linearly to 1 over ``warmup_steps`` steps (the first step trains with
    ``1 / warmup_steps``), then stays there (``"constant"``) or falls towards 0, linearly
    (``"linear"``) or along a half cosine (``"cosine"``), reaching 0 at step ``total_steps``,
    one past the last: every one of the ``total_steps`` steps trains with a positive rate.
    """
    warmup_steps = max(1, warmup_steps)
    decay_steps = max(1, total_steps - warmup_steps)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        if schedule == "constant":
            return 1.0
        done = min(1.0, (step - warmup_steps) / decay_steps)
        if schedule == "linear":
            return 1.0 - done
        return 0.5 * (1.0 + math.cos(math.pi * done))

    return factor


# ---------------------------------------------------------------- LAMB
class LAMB(torch.optim.Optimizer):
    """LAMB (You et al., 2020, "Large Batch Optimization for Deep Learning").

    Adam's update ``u = m_hat / (sqrt(v_hat) + eps) + weight_decay * w``, scaled
    per parameter tensor by the trust ratio ``||w|| / ||u||`` (1 where either norm
    is 0), so that every layer moves by a similar fraction of its own size
    however large the batch and learning rate are.
    """

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0) -> None:
        if lr <= 0:
            raise ValueError(f"lr must be positive, got {lr}.")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["m"] = torch.zeros_like(p)
                    state["v"] = torch.zeros_like(p)
                state["step"] += 1
                m, v, t = state["m"], state["v"], state["step"]
                m.lerp_(p.grad, 1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                update = (m / (1 - beta1 ** t)) / ((v / (1 - beta2 ** t)).sqrt() + group["eps"])
                if group["weight_decay"]:
                    update.add_(p, alpha=group["weight_decay"])
                w_norm, u_norm = p.norm(), update.norm()
                trust = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm,
                                    torch.ones_like(w_norm))
                p.sub_(group["lr"] * trust * update)
        return loss
