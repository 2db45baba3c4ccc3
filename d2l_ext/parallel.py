"""Stand-ins for ``torch.nn.parallel``'s four data-parallel primitives that take CPU devices.

PyTorch's ``replicate``, ``scatter``, ``parallel_apply`` and ``gather`` accept only GPUs
(on a CPU they raise ``ValueError: Expected a non cpu device``). These functions have the
same signatures and the same meaning for the common case (one tensor in, one tensor out),
for any devices, so that a DataParallel built from them runs on a laptop as well:

* :func:`replicate` gives one replica per device whose parameters are *differentiable
  copies* of the module's, so gradients of the replicas' outputs flow back into the module;
* :func:`scatter` splits a batch along its first dimension and moves the parts;
* :func:`parallel_apply` runs the replicas in threads, one per replica;
* :func:`gather` concatenates the outputs on one device (differentiably).

They show what the primitives do, not speed: CPU "devices" share the same cores.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from torch import nn

__all__ = ["gather", "parallel_apply", "replicate", "scatter"]

Device = torch.device | str | int


def _device(d: Device) -> torch.device:
    return torch.device("cuda", d) if isinstance(d, int) else torch.device(d)


class Replica(nn.Module):
    """A module's forward pass with its parameters and buffers copied to ``device``.

    The copies are made once, when the replica is built, and keep their autograd history:
    like the replicas of ``torch.nn.parallel.replicate``, a replica has no parameters of its
    own, and ``backward`` accumulates gradients in the original module's parameters.
    Buffers that the forward pass updates in place (BatchNorm's running statistics) are
    updated in the original only where the copy is the original tensor (same device).
    """

    def __init__(self, module: nn.Module, device: Device) -> None:
        super().__init__()
        object.__setattr__(self, "original", module)  # not a submodule: no own parameters
        self.device = _device(device)
        self.tensors = {name: t.to(self.device) for name, t in itertools.chain(
            module.named_parameters(), module.named_buffers())}

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return torch.func.functional_call(self.original, self.tensors, args, kwargs)


def replicate(module: nn.Module, devices: Sequence[Device]) -> list[Replica]:
    """One replica of ``module`` per device (see :class:`Replica`)."""
    return [Replica(module, d) for d in devices]


def scatter(inputs: torch.Tensor, devices: Sequence[Device], dim: int = 0,
            ) -> tuple[torch.Tensor, ...]:
    """Split ``inputs`` into ``len(devices)`` nearly equal parts along ``dim`` and move part
    *i* to device *i*. A batch smaller than the number of devices gives fewer parts."""
    if not isinstance(inputs, torch.Tensor):
        raise TypeError(f"scatter takes one tensor, not {type(inputs).__name__}: scatter each "
                        "tensor of a tuple or dict separately")
    if not devices:
        raise ValueError("scatter needs at least one device")
    parts = inputs.chunk(len(devices), dim)
    return tuple(part.to(_device(d)) for part, d in zip(parts, devices))


def parallel_apply(modules: Sequence[nn.Module], inputs: Sequence[Any],
                   devices: Sequence[Device] | None = None) -> list[Any]:
    """Call ``modules[i](*inputs[i])`` in one thread per module; return the outputs in order.

    A non-tuple input is passed as the single argument. Grad mode is thread-local in
    PyTorch, so each thread takes the caller's. An exception in any thread is raised here.
    ``devices`` is accepted for torch's signature and not needed: the replicas know theirs.
    """
    if len(modules) != len(inputs):
        raise ValueError(f"{len(modules)} modules for {len(inputs)} inputs: pass one input "
                         "per module (slice the replicas to the number of scattered parts)")
    grad_enabled = torch.is_grad_enabled()

    def call(module: nn.Module, args: Any) -> Any:
        with torch.set_grad_enabled(grad_enabled):
            return module(*args) if isinstance(args, tuple) else module(args)

    with ThreadPoolExecutor(max_workers=max(1, len(modules))) as pool:
        futures = [pool.submit(call, m, x) for m, x in zip(modules, inputs)]
        return [f.result() for f in futures]


def gather(outputs: Sequence[torch.Tensor], target_device: Device, dim: int = 0,
           ) -> torch.Tensor:
    """Concatenate ``outputs`` along ``dim`` on ``target_device`` (gradients flow back)."""
    if not outputs or not all(isinstance(o, torch.Tensor) for o in outputs):
        raise TypeError("gather takes a non-empty list of tensors (one output per replica)")
    target = _device(target_device)
    return torch.cat([o.to(target) for o in outputs], dim)
