"""Stand-ins for ``torch.nn.parallel``'s four data-parallel primitives that take any device.

PyTorch's ``replicate``, ``scatter``, ``parallel_apply`` and ``gather`` drive GPUs only. On a
CPU, ``replicate`` and ``scatter`` raise ``ValueError: Expected a non cpu device``;
``parallel_apply`` raises ``RuntimeError`` when the machine has no accelerator (and
``ValueError: Expected a cuda device`` when given CPU devices); ``gather`` refuses CPU tensors
with ``AssertionError: Gather function not implemented for CPU tensors``.

The functions here have torch's signatures (the same parameter names and defaults as in
PyTorch 2.13) and the same meaning, on any devices, so that a DataParallel built from them
also runs on a laptop:

* :func:`replicate` gives one copy of the module per device, built as torch builds its
  replicas: every submodule is copied shallowly and holds *differentiable copies* of the
  parameters, so each replica has its own tensors (every replica after the first, even on the
  device the module is on) and gradients flow back, summed, into the module's parameters;
* :func:`scatter` splits tensors along a dimension (inside tuples, lists and dicts too) and
  moves the parts to their devices;
* :func:`parallel_apply` runs the replicas in one thread each, with the caller's grad mode
  and autocast state and, on an accelerator, its current device and stream;
* :func:`gather` concatenates the outputs on one device (differentiably).

They show what the primitives do, not speed: CPU "devices" share the same cores.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Sequence
from typing import Any, TypeVar, Union

import torch
from torch import nn

__all__ = ["gather", "parallel_apply", "replicate", "scatter"]

Device = Union[torch.device, str, int]
M = TypeVar("M", bound=nn.Module)


def _device(d: Device) -> torch.device:
    """torch's convention: an int is a CUDA device index, -1 and "cpu" the CPU."""
    if isinstance(d, int):
        return torch.device("cpu") if d == -1 else torch.device("cuda", d)
    return torch.device(d)


# ---------------------------------------------------------------- replicate
def _copy_for(tensor: torch.Tensor, device: torch.device, own: bool,
              differentiable: bool) -> torch.Tensor:
    """``tensor`` for a replica on ``device``: a new tensor if ``own`` or on another device,
    else the tensor's own memory; with autograd history back to ``tensor`` if
    ``differentiable``. Never a Parameter, so that replicas have no parameters of their own."""
    source = tensor if differentiable else tensor.detach()
    if own or tensor.device != device:
        return source.to(device, copy=True)
    return tensor.view_as(tensor) if differentiable else source


def replicate(network: M, devices: Sequence[Device], detach: bool = False) -> list[M]:
    """One copy of ``network`` per device, as ``torch.nn.parallel.replicate`` makes them.

    Each replica is a shallow copy of every submodule (``Module._replicate_for_data_parallel``,
    which modules such as RNNs specialise) whose parameters are copies of the network's,
    made with autograd recording unless ``detach``: a replica has no parameters of its own,
    and ``backward`` accumulates the gradients of all replicas in the network's parameters.
    Every replica after the first gets its own tensors, also on the device the network is on
    (so two CPU stand-ins compute with distinct tensors, as two GPUs do); the first replica,
    on the network's device, shares the network's memory. Buffers are copied without
    history (unless they require grad); the first replica uses the network's own buffers, so
    that in-place updates such as BatchNorm's running statistics reach the network from it
    alone, as with torch's replicas. A parameter shared by several submodules stays shared
    within each replica.
    """
    devices = [_device(d) for d in devices]
    modules = list(network.modules())
    position = {module: i for i, module in enumerate(modules)}
    params = list(network.parameters())
    buffers = list(network.buffers())
    replicas = []
    for j, device in enumerate(devices):
        own = j > 0
        param_copy = {p: _copy_for(p, device, own, not detach) for p in params}
        buffer_copy = {b: b if not own and b.device == device
                       else _copy_for(b, device, own, b.requires_grad and not detach)
                       for b in buffers}
        copies = [module._replicate_for_data_parallel() for module in modules]
        for module, copy in zip(modules, copies):
            for key, child in module._modules.items():
                copy._modules[key] = None if child is None else copies[position[child]]
            for key, param in module._parameters.items():
                if param is None:
                    copy._parameters[key] = None
                else:
                    setattr(copy, key, param_copy[param])  # a plain attribute, not a Parameter
            for key, buf in module._buffers.items():
                copy._buffers[key] = None if buf is None else buffer_copy[buf]
        replicas.append(copies[0])
    return replicas


# ---------------------------------------------------------------- scatter
def scatter(inputs: Any, target_gpus: Sequence[Device], dim: int = 0) -> Any:
    """Split ``inputs`` into ``len(target_gpus)`` nearly equal parts along ``dim`` and move
    part *i* to device *i* (``target_gpus`` keeps torch's name; any device is accepted).

    As in torch: a tensor gives a tuple of parts (``Tensor.chunk``: a batch smaller than the
    number of devices gives fewer parts); a tuple, list or dict gives a list with one
    tuple, list or dict per device, its tensors scattered and the number of parts that of
    the shortest; any other object is repeated once per device.
    """
    if not target_gpus:
        raise ValueError("scatter needs at least one device")
    devices = [_device(d) for d in target_gpus]

    def scatter_map(obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            return tuple(part.to(d) for part, d in zip(obj.chunk(len(devices), dim), devices))
        if isinstance(obj, tuple) and hasattr(obj, "_fields") and len(obj) > 0:  # namedtuple
            return [type(obj)(*parts) for parts in zip(*map(scatter_map, obj))]
        if isinstance(obj, tuple) and len(obj) > 0:
            return list(zip(*map(scatter_map, obj)))
        if isinstance(obj, list) and len(obj) > 0:
            return [list(parts) for parts in zip(*map(scatter_map, obj))]
        if isinstance(obj, dict) and len(obj) > 0:
            return [type(obj)(parts) for parts in zip(*map(scatter_map, obj.items()))]
        return [obj for _ in devices]

    return scatter_map(inputs)


# ---------------------------------------------------------------- parallel_apply
def _first_tensor(obj: Any) -> torch.Tensor | None:
    if isinstance(obj, torch.Tensor):
        return obj
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        for item in obj:
            found = _first_tensor(item)
            if found is not None:
                return found
    return None


def _autocast_state(device_type: str) -> tuple[bool, torch.dtype]:
    """Whether autocast is on for ``device_type`` in this thread, and its dtype."""
    try:
        return torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type)
    except TypeError:  # PyTorch < 2.4: one function per device type
        if device_type == "cpu":
            return torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype()
        if device_type == "cuda":
            return torch.is_autocast_enabled(), torch.get_autocast_gpu_dtype()
        return False, torch.float32


def _current_stream(device: torch.device | None) -> Any:
    if device is None or device.type == "cpu":
        return None
    if device.type == "cuda":
        return torch.cuda.current_stream(device)
    return torch.accelerator.current_stream(device)


def _on_device(stack: contextlib.ExitStack, device: torch.device | None, stream: Any) -> None:
    """Make ``device`` (an accelerator) and ``stream`` current in this thread."""
    if device is None or device.type == "cpu":
        return
    if device.type == "cuda":
        stack.enter_context(torch.cuda.device(device))
        stack.enter_context(torch.cuda.stream(stream))
    else:
        stack.enter_context(torch.accelerator.device_index(device.index))
        stack.enter_context(stream)


def parallel_apply(modules: Sequence[nn.Module], inputs: Sequence[Any],
                   kwargs_tup: Sequence[dict[str, Any]] | None = None,
                   devices: Sequence[Device | None] | None = None) -> list[Any]:
    """Call ``modules[i](*inputs[i], **kwargs_tup[i])`` in one thread per module (the module
    in the caller's thread when there is only one); return the outputs in order.

    As in torch: an input that is not a tuple or list is passed as the single argument;
    ``devices[i]`` defaults to the device of the first tensor in ``inputs[i]``. Grad mode,
    autocast and the current device and stream are per thread in PyTorch, so each thread
    takes the caller's: grad mode, the autocast state (enabled and dtype) of the CPU and of
    every device type among the devices, and on an accelerator the caller's current stream
    of its device. An exception in any thread is raised here.
    """
    n = len(modules)
    if len(inputs) != n:
        raise ValueError(f"{n} modules for {len(inputs)} inputs: pass one input per module "
                         "(slice the replicas to the number of scattered parts)")
    if kwargs_tup is None:
        kwargs_tup = ({},) * n
    elif len(kwargs_tup) != n:
        raise ValueError(f"{n} modules for {len(kwargs_tup)} kwargs: pass one dict per module")
    if devices is None:
        devices = [None] * n
    elif len(devices) != n:
        raise ValueError(f"{n} modules for {len(devices)} devices: pass one device per module")
    resolved = []
    for d, x in zip(devices, inputs):
        if d is None:
            t = _first_tensor(x)
            resolved.append(None if t is None else t.device)
        else:
            resolved.append(_device(d))
    streams = [_current_stream(d) for d in resolved]
    grad_enabled = torch.is_grad_enabled()
    device_types = sorted({"cpu"} | {d.type for d in resolved if d is not None})
    autocasts = [(t, *_autocast_state(t)) for t in device_types]
    cache_enabled = torch.is_autocast_cache_enabled()

    def call(module: nn.Module, args: Any, kwargs: dict[str, Any],
             device: torch.device | None, stream: Any) -> Any:
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.set_grad_enabled(grad_enabled))
            for device_type, enabled, dtype in autocasts:
                if enabled:
                    stack.enter_context(torch.autocast(device_type, dtype=dtype,
                                                       cache_enabled=cache_enabled))
            _on_device(stack, device, stream)
            if not isinstance(args, (list, tuple)):
                args = (args,)
            return module(*args, **kwargs)

    jobs = list(zip(modules, inputs, kwargs_tup, resolved, streams))
    if n == 1:
        return [call(*jobs[0])]
    results: list[Any] = [None] * n
    errors: list[Exception | None] = [None] * n

    def worker(i: int) -> None:
        try:
            results[i] = call(*jobs[i])
        except Exception as err:
            errors[i] = err

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i, err in enumerate(errors):
        if err is not None:  # the same type, as torch re-raises it, saying which replica
            message = f"Caught {type(err).__name__} in replica {i} on {resolved[i]}: {err}"
            try:
                wrapped = type(err)(message)
            except Exception:
                raise RuntimeError(message) from err
            raise wrapped from err
    return results


# ---------------------------------------------------------------- gather
def gather(outputs: Sequence[Any], target_device: Device, dim: int = 0) -> Any:
    """Concatenate ``outputs`` (one per replica) along ``dim`` on ``target_device``;
    gradients flow back to the replicas.

    As in torch: tensors are concatenated, dicts, tuples, lists and namedtuples gathered
    element by element, ``None`` stays ``None``; 0-dimensional tensors gathered along
    dimension 0 become a vector, with a warning. ``-1`` and ``"cpu"`` name the CPU.
    """
    if not outputs:
        raise TypeError("gather takes a non-empty list of outputs (one per replica)")
    target = _device(target_device)

    def gather_map(parts: Sequence[Any]) -> Any:
        first = parts[0]
        if isinstance(first, torch.Tensor):
            if dim == 0 and all(p.dim() == 0 for p in parts):
                warnings.warn("Was asked to gather along dimension 0, but all input tensors "
                              "were scalars; will instead unsqueeze and return a vector.",
                              stacklevel=3)
                parts = [p.view(1) for p in parts]
            return torch.cat([p.to(target) for p in parts], dim)
        if first is None:
            return None
        if isinstance(first, dict):
            if not all(len(p) == len(first) for p in parts):
                raise ValueError("All dicts must have the same number of keys")
            return type(first)((k, gather_map([p[k] for p in parts])) for k in first)
        if isinstance(first, tuple) and hasattr(first, "_fields"):  # namedtuple
            return type(first)._make(map(gather_map, zip(*parts)))
        if isinstance(first, (list, tuple)):
            return type(first)(map(gather_map, zip(*parts)))
        raise TypeError(f"gather cannot combine outputs of type {type(first).__name__}: "
                        "return tensors (or dicts, tuples and lists of tensors)")

    return gather_map(list(outputs))
