"""Memory budgets counted from shapes: bytes per parameter of training recipes, ZeRO's
stages, what FSDP2 holds at each moment of a step, the state of optimizers that keep less
than Adam, and a leak meter (the memory chapter's later sections).

Counting needs no device: everything here except :func:`growth` is arithmetic on numbers
and shapes, so it sizes models that no machine at hand could allocate. Sizes are bytes;
:data:`GB` is 10⁹ bytes, the unit of the ZeRO paper (a GPU sold as "80GB" holds more:
``nvidia-smi`` reports 81,559 MiB, 85.5·10⁹ bytes, for an H100 80GB HBM3).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields

__all__ = ["FSDP_TRACKER_CATEGORIES", "GB", "RECIPES", "FsdpMoment", "Recipe",
           "kvstore_server_numbers",
           "eight_bit_state_bytes", "fits", "fsdp2_moments", "fsdp_tracked", "growth",
           "lora_parameters", "optimizer_state_counted", "snapshot_bytes",
           "zero_bytes_per_parameter", "zero_gb"]

GB = 10**9


@dataclass(frozen=True)
class Recipe:
    """Bytes per parameter that a training recipe keeps on one device between the backward
    pass and the optimizer's step (when the most of it exists)."""

    #: the weights the forward pass reads
    weights: float
    #: the gradients the backward pass writes, in the weights' type
    gradients: float
    #: a float32 master copy of the weights, updated by the optimizer (0: none)
    master: float
    #: float32 gradients, accumulated over micro-batches or cast for the optimizer (0: none)
    accumulator: float
    #: the optimizer's state (Adam: two moments)
    optimizer: float

    @property
    def total(self) -> float:
        """All bytes per parameter."""
        return sum(getattr(self, f.name) for f in fields(self))


#: Adam under common recipes. "mixed" is the ZeRO paper's 2 + 2 + K with K = 12 (float32
#: master copy and two moments); keeping float32 gradients too costs 18 bytes (the 16-bit
#: gradients freed once cast) to 20 (both kept).
RECIPES = {
    "float32": Recipe(4, 4, 0, 0, 8),
    "bfloat16": Recipe(2, 2, 0, 0, 4),
    "mixed": Recipe(2, 2, 4, 0, 8),
    "mixed, float32 gradients": Recipe(2, 0, 4, 4, 8),
    "mixed, 16-bit and float32 gradients": Recipe(2, 2, 4, 4, 8),
}


def zero_bytes_per_parameter(stage: int, k: int, weights: float = 2, gradients: float = 2,
                             optimizer: float = 12) -> float:
    """Bytes per parameter that each of ``k`` data-parallel processes keeps under ZeRO
    ``stage`` (0: none, plain data parallelism; 1: optimizer state sharded; 2: and the
    gradients; 3: and the weights). The defaults are the ZeRO paper's mixed precision with
    Adam: 2 + 2 + K, K = 12 (float32 master weights, momentum and variance)."""
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO has stages 0 to 3, not {stage}.")
    if k < 1:
        raise ValueError(f"k = {k}: at least one process.")
    shards = [optimizer, gradients, weights][:stage]
    kept = [weights, gradients, optimizer][:3 - stage]
    return sum(kept) + sum(shards) / k


def kvstore_server_numbers(sizes: Sequence[int], servers: int,
                           bound: int = 1_000_000) -> list[int]:
    """How many numbers of the arrays ``sizes`` (keys 0, 1, ... in this order) each of
    ``servers`` parameter servers of MXNet's distributed kvstore holds, as
    ``KVStoreDist::EncodeDefaultKey`` (MXNet 1.9, ``src/kvstore/kvstore_dist.h``) places them:
    an array of fewer than ``bound`` numbers (``MXNET_KVSTORE_BIGARRAY_BOUND``) goes whole to
    server ``key * 9973 % servers``; a larger one is cut into one slice per server, slice
    ``i`` ending at ``round(size / servers * (i + 1))``."""
    if servers < 1:
        raise ValueError(f"servers = {servers}: at least one server.")
    held = [0] * servers
    for key, size in enumerate(sizes):
        if size < bound:
            held[key * 9973 % servers] += size
        else:
            ends = [math.floor(size / servers * i + 0.5) for i in range(servers + 1)]  # C's round
            for i in range(servers):
                held[i] += ends[i + 1] - ends[i]
    return held


def zero_gb(parameters: float, k: int, stage: int, **bytes_per_part: float) -> float:
    """GB (10⁹ bytes) of model state per process: ``parameters`` times
    :func:`zero_bytes_per_parameter`. The ZeRO paper's example, 7.5 billion parameters on 64
    processes, gives 120, 31.4, 16.6 and 1.9 GB for stages 0 to 3."""
    return parameters * zero_bytes_per_parameter(stage, k, **bytes_per_part) / GB


@dataclass(frozen=True)
class FsdpMoment:
    """What one FSDP2 process holds at the largest point of one unit's forward or backward
    pass (bytes, activations and temporaries aside)."""

    label: str
    #: its shards of the float32 weights and of Adam's state, and the float32 gradient shards
    #: of the units whose backward pass is done: 16/k bytes per parameter at most
    sharded: float
    #: the unit's parameters, unsharded, in the compute type
    gathered: float
    #: all-gather output buffers: forward, the unit's own and the previous unit's (freed once
    #: the unit's parameters are copied out); backward, the prefetched previous unit's
    all_gather: float
    #: the unit's unsharded gradients, in the param type (the compute type)
    gradients: float
    #: the reduce-scatter input of the unit that ran backward before it, still in flight,
    #: in the reduce type
    reduce_scatter: float

    @property
    def total(self) -> float:
        return (self.sharded + self.gathered + self.all_gather + self.gradients
                + self.reduce_scatter)


#: The FSDPMemTracker categories that :class:`FsdpMoment`'s fields count.
FSDP_TRACKER_CATEGORIES = {
    "sharded": ("Sharded Param", "OptState", "Sharded Grad"), "gathered": ("Unsharded Param",),
    "all_gather": ("All Gather",), "gradients": ("Unsharded Grad",),
    "reduce_scatter": ("Reduce Scatter",)}


def fsdp2_moments(units: Sequence[float], k: int, param_bytes: float = 2,
                  reduce_bytes: float = 2) -> list[FsdpMoment]:
    """What each of ``k`` FSDP2 processes holds (activations and temporaries aside) at the
    largest point of each unit of ``units`` (its parameter numbers, in forward order) in the
    forward pass and then in the backward pass, with Adam, float32 sharded parameters and
    ``MixedPrecisionPolicy(param_dtype)`` of ``param_bytes`` and a reduce type of
    ``reduce_bytes`` (by default the param type). Following ``fully_shard`` in PyTorch 2.13:

    * forward, unit i: its parameters copied out of its all-gather buffer, which is kept, and
      the previous unit's buffer, freed only after this copy-out;
    * backward, unit i (before its reduce-scatter): its parameters, the previous unit's
      all-gather buffer (prefetched), its unsharded gradients (in the param type: autograd
      writes them), and the reduce-scatter input of the unit that ran backward before it
      (one buffer in flight, the default; the gradients cast to the reduce type); the
      float32 gradient shards of the units already done (4/k bytes per parameter each).

    The sharded state is 4 + 8 bytes (weights, Adam) per parameter divided by ``k``.
    PyTorch's ``FSDPMemTracker`` (``torch.distributed._tools.fsdp2_mem_tracker``) reports the
    same bytes at its "Peak Forward" and "Before Post-Backward" snapshots (see
    :data:`FSDP_TRACKER_CATEGORIES`)."""
    total = sum(units)
    state = 12 * total / k
    n = len(units)
    moments = []
    for i, u in enumerate(units):
        previous = units[i - 1] if i > 0 else 0
        moments.append(FsdpMoment(f"forward {i + 1}", state, param_bytes * u,
                                  param_bytes * (u + previous), 0, 0))
    for i in reversed(range(n)):
        previous = units[i - 1] if i > 0 else 0
        done = sum(units[i + 1:])  # their backward passes are over: gradient shards exist
        in_flight = units[i + 1] if i + 1 < n else 0
        moments.append(FsdpMoment(f"backward {i + 1}", state + 4 * done / k,
                                  param_bytes * units[i], param_bytes * previous,
                                  param_bytes * units[i], reduce_bytes * in_flight))
    return moments


def fsdp_tracked(tracker, module, state: str) -> dict[str, int]:
    """The bytes that PyTorch's ``FSDPMemTracker`` recorded for ``module`` at its snapshot
    ``state`` ("Peak Forward", "Before Post-Backward", ...: the last one taken), summed into
    :class:`FsdpMoment`'s fields (:data:`FSDP_TRACKER_CATEGORIES`)."""
    stats = tracker.memory_tracking[module]
    found = [snaps for key, snaps in stats.snapshots.items()
             if str(getattr(key, "value", key)) == state and snaps]
    if not found:
        raise ValueError(f"the tracker has no {state!r} snapshot of this module.")
    got = snapshot_bytes(found[0][-1])
    return {field: sum(got.get(c, 0) for c in categories)
            for field, categories in FSDP_TRACKER_CATEGORIES.items()}


# ---------------------------------------------------------------------- optimizer state
def eight_bit_state_bytes(numel: int, states: int = 2, block: int = 256,
                          min_size: int = 4096) -> int:
    """Bytes of a block-wise 8-bit optimizer's state for a tensor of ``numel`` numbers
    (Dettmers et al., 2022) as bitsandbytes keeps it (``Optimizer2State.init_state``): one
    byte per number per state, plus one float32 scale (``absmax``) per block of ``block``
    numbers per state (bitsandbytes: 256; the paper's blocks hold 2,048); a tensor of fewer
    than ``min_size`` numbers (bitsandbytes' ``min_8bit_size``, 4,096) keeps its states in
    float32 (4 bytes per number per state). ``min_size=0`` counts every tensor in 8 bits."""
    if numel < min_size:
        return states * 4 * numel
    return states * (numel + 4 * math.ceil(numel / block))


def optimizer_state_counted(name: str, shapes: Iterable[Sequence[int]], nbytes: int = 4,
                            device: str = "cpu", capturable: bool = False) -> int:
    """Bytes of state that ``torch.optim``'s optimizer ``name`` keeps on ``device`` after
    its first step for parameters of ``shapes`` (element size ``nbytes``):

    * ``"sgd"``: none; ``"sgd momentum"``: a velocity per number;
    * ``"adam"`` (and AdamW): two moments per number and a step counter per tensor;
    * ``"adafactor"``: for a tensor of two or more dimensions, the row and column means of
      the squared gradient (``shape[:-1]`` and ``shape[:-2] + shape[-1:]``), else a full
      second moment; a step counter per tensor; no first moment;
    * ``"muon"``: a momentum buffer per number (two-dimensional tensors only);
    * ``"adam 8-bit"``: :func:`eight_bit_state_bytes` (bitsandbytes, whose step counter is
      a Python number).

    A step counter is a float32 scalar (4 bytes) kept on the host: it counts when
    ``device`` is a CPU, and on an accelerator only for Adam with ``capturable=True`` (or
    ``fused=True``), which keeps it on the device; Adafactor always keeps it on the host."""
    on_device = str(device).split(":")[0] == "cpu"
    total = 0
    for shape in shapes:
        numel = math.prod(shape)
        if name == "sgd":
            continue
        if name == "sgd momentum":
            total += numel * nbytes
        elif name in ("adam", "adamw"):
            total += 2 * numel * nbytes + (4 if on_device or capturable else 0)
        elif name == "adafactor":
            if len(shape) >= 2:
                total += (math.prod(shape[:-1]) + math.prod(shape[:-2]) * shape[-1]) * nbytes
            else:
                total += numel * nbytes
            total += 4 if on_device else 0
        elif name == "muon":
            if len(shape) != 2:
                raise ValueError(f"Muon updates two-dimensional tensors, not {tuple(shape)}.")
            total += numel * nbytes
        elif name == "adam 8-bit":
            total += eight_bit_state_bytes(numel)
        else:
            raise ValueError(f"no count for optimizer {name!r}.")
    return total


def lora_parameters(shapes: Iterable[Sequence[int]], rank: int) -> int:
    """Trainable numbers of low-rank adapters (LoRA, Hu et al., 2021) of rank ``rank`` on
    weight matrices of ``shapes`` (out, in): ``rank * (out + in)`` each."""
    return sum(rank * (shape[0] + shape[1]) for shape in shapes)


def fits(budget: float, fixed: float, per_example: float) -> int:
    """The largest batch whose memory, ``fixed`` bytes plus ``per_example`` bytes per
    example, stays within ``budget`` bytes (0 if not even the fixed part fits)."""
    if fixed > budget:
        return 0
    if per_example <= 0:
        raise ValueError("per_example must be positive.")
    return int((budget - fixed) // per_example)


def snapshot_bytes(snapshot: dict) -> dict[str, int]:
    """Bytes by category of a snapshot of PyTorch's ``MemTracker``
    (``torch.distributed._tools.mem_tracker``: ``get_tracker_snapshot()``), summed over its
    devices, keyed by the categories' names ("Parameter", "Gradient", "Activation", "Temp",
    "Optstate", "Buffer", "Other") and "Total"."""
    out: dict[str, int] = {}
    for categories in snapshot.values():
        for key, nbytes in categories.items():
            name = str(getattr(key, "value", key))
            out[name] = out.get(name, 0) + nbytes
    return out


# ---------------------------------------------------------------------- leaks
def growth(step: Callable[[], object], iterations: int, device, after: Callable[[], object]
           | None = None) -> list[int]:
    """Run ``step()`` ``iterations`` times under a :class:`d2l_ext.memory.Tracker` on
    ``device`` and return the bytes allocated since the start after each iteration (a list
    that grows by the same amount each time is a leak). ``after()``, if given, runs after
    the last iteration and is read as one more entry (e.g. ``gc.collect``). On a CPU the
    tracker counts the allocations of the thread that runs ``step``; tensors that other
    threads allocate are not seen (:mod:`d2l_ext.memory`)."""
    from d2l_ext import memory  # torch is needed only here

    with memory.Tracker(device) as tracker:
        for i in range(iterations):
            step()
            tracker.mark(f"iteration {i + 1}")
        if after is not None:
            after()
            tracker.mark("after")
    return [r.allocated for r in tracker.readings]
