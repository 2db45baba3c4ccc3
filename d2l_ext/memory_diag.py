"""Where the memory of a step goes when it leaves the GPU, and how to read the allocator's
books when it runs out (the memory chapter's sections on offloading, allocator diagnostics,
CUDA graphs and the activations of model parallelism).

Counting needs no device: :func:`fsdp2_placement`, :func:`zero_offload_placement` and
:func:`transformer_layer_activations` are arithmetic on numbers of parameters and shapes.
:class:`SavedCensus` records what autograd saves (what an offloading hook would copy),
:func:`read_allocator` and :func:`diagnose` read the dictionary that
``torch.cuda.memory_stats()`` returns, and :func:`snapshot_segments` and
:func:`draw_snapshot` read and draw the dictionary that ``torch.cuda.memory._snapshot()``
returns. The last three take plain dictionaries, so they are tested without a GPU.
Sizes are bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from d2l_ext.memory_budget import fsdp2_moments

__all__ = ["AllocatorReading", "Placement", "SavedCensus", "SegmentView", "diagnose",
           "draw_snapshot", "fsdp2_placement", "read_allocator", "snapshot_segments",
           "transformer_layer_activations", "zero_offload_placement"]


# ------------------------------------------------------------------------------ offload
@dataclass(frozen=True)
class Placement:
    """Where one data-parallel process keeps its model state (activations aside), in bytes,
    and how many bytes cross the link between host and device in one training step."""

    label: str
    #: the largest amount on the GPU at any moment of the step
    device: float
    #: in the host's (CPU's) memory, for the whole step
    host: float
    #: copied host to device plus device to host, per step
    link: float


def fsdp2_placement(units: Sequence[float], k: int, offload: bool = False,
                    param_bytes: float = 2, reduce_bytes: float = 2) -> Placement:
    """FSDP2 (``fully_shard``) with Adam, float32 sharded parameters and
    ``MixedPrecisionPolicy(param_dtype)`` of ``param_bytes``, on ``k`` processes, for units of
    ``units`` parameters (forward order), as :func:`d2l_ext.memory_budget.fsdp2_moments`
    counts its moments.

    Without offloading, the largest moment is on the GPU and nothing crosses the link. With
    ``offload_policy=CPUOffloadPolicy()`` (PyTorch 2.13, ``_fsdp_param.py`` and
    ``_fsdp_collectives.py``), the float32 parameter shards, the float32 gradient shards and
    Adam's state live in the host's memory (16/k bytes per parameter) and the optimizer steps
    there; the GPU keeps the moment's unsharded buffers plus the running unit's shard as
    copied to the device before its all-gather, in float32 and cast to the compute type
    ((4 + ``param_bytes``)/k bytes per parameter of the unit).
    Each step copies every shard to the device twice (the forward's all-gather and, for every
    unit but the root with the default ``reshard_after_forward=None``, the backward's) and
    every float32 gradient shard back: 12/k bytes per parameter."""
    if k < 1:
        raise ValueError(f"k = {k}: at least one process.")
    moments = fsdp2_moments(units, k, param_bytes, reduce_bytes)
    total = float(sum(units))
    if not offload:
        return Placement("FSDP2", max(m.total for m in moments), 0.0, 0.0)
    order = list(units) + list(reversed(units))  # the unit each moment runs
    device = max(m.total - m.sharded + (4 + param_bytes) * u / k
                 for m, u in zip(moments, order))
    return Placement("FSDP2 + CPUOffloadPolicy", device, 16 * total / k, 12 * total / k)


def zero_offload_placement(parameters: float, k: int = 1) -> Placement:
    """ZeRO-Offload (Ren et al., 2021) on ``k`` data-parallel processes, by the paper's data
    flow: the GPU keeps the 16-bit parameters (2 bytes each) and computes the forward and
    backward passes; each process sends its share of the 16-bit gradients to the host, whose
    CPU keeps that share of the float32 master weights and Adam's two moments (12 bytes per
    parameter) and updates them, and returns the updated 16-bit parameters: 2 + 2 bytes per
    parameter of its share cross the link per step. The host keeps 12 + 2 bytes (state and
    the received gradients) per parameter of the share. Gradient buckets on the GPU, which
    are transient and sized by configuration, are left out."""
    if k < 1:
        raise ValueError(f"k = {k}: at least one process.")
    return Placement("ZeRO-Offload", 2 * parameters, 14 * parameters / k, 4 * parameters / k)


class SavedCensus:
    """Count every tensor that autograd asks to save while the block runs, as a
    ``saved_tensors_hooks`` pack hook sees it: one entry per save (a tensor that two
    operations save is counted twice, as a hook that copies each saved tensor copies it twice),
    with its bytes (``numel * element_size``: what a copy of it allocates; a sparse tensor's
    indices and values, a DTensor's local shard) and whether it shares storage with one of
    ``parameters`` (a weight that a matrix product saves for its backward pass, often as a
    transposed view). ``parameters`` are read when the census is made: under FSDP2
    (``fully_shard``) they are shards, and the unsharded weights that a later forward pass
    gathers and saves are not recognised as parameters.

    ::

        with SavedCensus(net.parameters()) as census:
            loss = loss_fn(net(X), y)
        census.nbytes, census.parameter_nbytes
    """

    def __init__(self, parameters: Iterable[Any] = ()) -> None:
        self._parameter_storages = {key for p in parameters for key in _storage_keys(p)}
        self.entries: list[tuple[int, bool]] = []
        self._hooks: Any = None

    def __enter__(self) -> SavedCensus:
        import torch

        def pack(t: torch.Tensor) -> torch.Tensor:
            self.entries.append((_copy_nbytes(t),
                                 not _storage_keys(t).isdisjoint(self._parameter_storages)))
            return t

        self._hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        hooks, self._hooks = self._hooks, None
        hooks.__exit__(*exc)

    @property
    def nbytes(self) -> int:
        """Bytes of all saves: what a hook that copies every saved tensor copies."""
        return sum(n for n, _ in self.entries)

    @property
    def parameter_nbytes(self) -> int:
        """Bytes of the saves that are parameters or views of them."""
        return sum(n for n, is_param in self.entries if is_param)


def _storage_keys(t: Any) -> set[tuple]:
    """The storages behind a tensor, as hashable keys (those of
    :func:`d2l_ext.memory.tensor_bytes`: a sparse tensor's indices and values, a DTensor's
    local shard, a jagged nested tensor's values and offsets; meta and fake tensors by their
    storage objects)."""
    from d2l_ext.memory import _storages

    return {key for key, _ in _storages(t)}


def _copy_nbytes(t: Any) -> int:
    """The bytes a copy of ``t`` allocates: ``numel * element_size`` of each plain tensor
    behind it (a sparse tensor's indices and values, without the rest of their storages; a
    DTensor's local shard; a jagged nested tensor's values and offsets)."""
    from d2l_ext.memory import _dense_parts

    return sum(part.numel() * part.element_size() for part in _dense_parts(t))


# ------------------------------------------------------------------ allocator diagnostics
@dataclass(frozen=True)
class AllocatorReading:
    """The numbers of ``torch.cuda.memory_stats()`` that say whether memory is short or in
    pieces (bytes unless named a count)."""

    #: held by live tensors, each block rounded up ("allocated_bytes.all.current")
    allocated: int
    #: what the tensors asked for, before rounding ("requested_bytes.all.current")
    requested: int
    #: obtained from the driver and held by the allocator ("reserved_bytes.all.current")
    reserved: int
    #: free pieces of segments that are partly in use: cached, but ``empty_cache`` cannot
    #: return them ("inactive_split_bytes.all.current", "Non-releasable memory")
    non_releasable: int
    #: segments obtained from the driver ("segment.all.current")
    segments: int
    #: failed device allocations after which the allocator freed its cache and tried again
    #: ("num_alloc_retries"; each one synchronizes the device)
    retries: int
    #: out-of-memory errors raised ("num_ooms")
    ooms: int
    #: reserved by private pools such as CUDA graphs' ("reserved_bytes_by_private_pools.*",
    #: 0 where this PyTorch does not report it)
    private_pools: int

    @property
    def unallocated(self) -> int:
        """Reserved but not allocated: the cache (the out-of-memory message's figure)."""
        return self.reserved - self.allocated

    @property
    def rounding(self) -> int:
        """Bytes the allocator's rounding added to the tensors' requests."""
        return self.allocated - self.requested


def read_allocator(stats: Mapping[str, Any]) -> AllocatorReading:
    """Pick :class:`AllocatorReading`'s numbers out of the flat dictionary that
    ``torch.cuda.memory_stats()`` (or ``torch.accelerator.memory_stats()``) returns. A missing
    key reads 0 (``memory_stats`` returns an empty dictionary before the first allocation)."""
    def get(key: str) -> int:
        return int(stats.get(key, 0))

    private = sum(int(v) for key, v in stats.items()
                  if key.startswith("reserved_bytes_by_private_pools.")
                  and key.endswith(".all.current"))
    return AllocatorReading(
        allocated=get("allocated_bytes.all.current"),
        requested=get("requested_bytes.all.current"),
        reserved=get("reserved_bytes.all.current"),
        non_releasable=get("inactive_split_bytes.all.current"),
        segments=get("segment.all.current"), retries=get("num_alloc_retries"),
        ooms=get("num_ooms"), private_pools=private)


def diagnose(reading: AllocatorReading, fragmented: float = 0.2) -> list[str]:
    """What a reading says, as codes for the page to put into words:

    * ``"retries"``: the allocator ran out of free device memory, or reached the memory
      fraction set for the process, and flushed its cache at least once (memory is near
      full, and each flush stalls the device);
    * ``"ooms"``: an out-of-memory error was raised;
    * ``"fragmented"``: more than ``fragmented`` of the reserved bytes are free pieces of
      partly used segments (where ``expandable_segments`` or ``max_split_size_mb`` help).
      PyTorch leaves expandable segments out of this count (``inactive_split_bytes``), so
      with ``expandable_segments:True`` this code never appears: compare ``reserved``
      with ``allocated`` there;
    * ``"private pools"``: CUDA graphs or other private pools hold memory that ordinary
      allocations cannot use;
    * ``"tensors"``: none of these: the tensors themselves fill what is reserved."""
    if not 0 < fragmented < 1:
        raise ValueError("fragmented is a fraction between 0 and 1.")
    codes = []
    if reading.retries:
        codes.append("retries")
    if reading.ooms:
        codes.append("ooms")
    if reading.reserved and reading.non_releasable > fragmented * reading.reserved:
        codes.append("fragmented")
    if reading.private_pools:
        codes.append("private pools")
    return codes or ["tensors"]


@dataclass(frozen=True)
class SegmentView:
    """One segment of a memory snapshot: its size and its blocks in address order, each
    ``(size, state)`` with state "active_allocated", "active_awaiting_free" or "inactive"."""

    address: int
    total: int
    large: bool
    blocks: list[tuple[int, str]] = field(default_factory=list)

    @property
    def allocated(self) -> int:
        return sum(size for size, state in self.blocks if state == "active_allocated")

    @property
    def free(self) -> int:
        return sum(size for size, state in self.blocks if state == "inactive")


def snapshot_segments(snapshot: Mapping[str, Any]) -> list[SegmentView]:
    """The segments of a snapshot that ``torch.cuda.memory._snapshot()`` returned (or
    ``pickle.load`` read from ``_dump_snapshot``'s file), in address order. Raises if a
    segment's blocks do not add up to its size (not a caching allocator's snapshot)."""
    views = []
    for seg in snapshot.get("segments", []):
        blocks = [(int(b["size"]), str(b["state"]))
                  for b in sorted(seg["blocks"], key=lambda b: b["address"])]
        total = int(seg["total_size"])
        if sum(size for size, _ in blocks) != total:
            raise ValueError(f"segment at {seg['address']:#x}: its blocks add up to "
                             f"{sum(s for s, _ in blocks):,} bytes, not {total:,}.")
        views.append(SegmentView(int(seg["address"]), total,
                                 seg.get("segment_type", "large") == "large", blocks))
    return sorted(views, key=lambda v: v.address)


#: colours of the block states in :func:`draw_snapshot`
STATE_COLOURS = {"active_allocated": "tab:blue", "active_awaiting_free": "tab:orange",
                 "inactive": "0.85"}


def draw_snapshot(ax: Any, snapshot: Mapping[str, Any], unit: float = 2**20,
                  min_size: int = 0, largest: int | None = None) -> list[SegmentView]:
    """Draw each segment of ``snapshot`` (at least ``min_size`` bytes; only the ``largest``
    largest if given) as one horizontal bar made of its blocks, in address order, coloured by
    state (:data:`STATE_COLOURS`), lengths in ``unit`` bytes; return the segments drawn.
    Labels are the caller's (two languages)."""
    drawn = [s for s in snapshot_segments(snapshot) if s.total >= min_size]
    if largest is not None:
        keep = sorted(drawn, key=lambda s: s.total, reverse=True)[:largest]
        drawn = [s for s in drawn if s in keep]
    for row, seg in enumerate(drawn):
        start = 0
        for size, state in seg.blocks:
            ax.barh(row, size / unit, left=start / unit, height=0.7,
                    color=STATE_COLOURS.get(state, "tab:red"), edgecolor="white",
                    linewidth=0.5)
            start += size
    ax.set_yticks(range(len(drawn)))
    ax.set_yticklabels([f"{s.total / unit:,.0f}" for s in drawn])
    ax.invert_yaxis()
    return drawn


# ------------------------------------------------------------ activations of parallelism
def transformer_layer_activations(s: int, b: int, h: int, a: int, t: int = 1,
                                  sequence_parallel: bool = False,
                                  recompute: str = "none") -> float:
    """Bytes of activations that one transformer layer keeps for its backward pass, per
    tensor-parallel process, with 16-bit activations, by Korthikanti et al. (2022), Table 2:
    sequence length ``s``, micro-batch ``b``, hidden size ``h``, ``a`` attention heads,
    tensor parallelism over ``t`` processes:

    * no parallelism: ``s b h (34 + 5 a s / h)``;
    * tensor parallelism: ``s b h (10 + 24/t + 5 a s / (h t))``: the layer norms' and
      dropouts' inputs (``10 s b h``) are still replicated;
    * tensor and sequence parallelism: ``s b h / t (34 + 5 a s / h)``: everything divided;
    * ``recompute="selective"`` (the attention's ``5 a s / h`` part recomputed) drops that
      term; ``recompute="full"`` keeps only each layer's input, ``2 s b h`` (the table's
      figure, whatever ``t``).

    Pipeline parallelism does not change a layer's activations; it changes how many layers
    (and micro-batches) a process holds."""
    if min(s, b, h, a, t) < 1:
        raise ValueError("sizes and t must be positive.")
    if recompute not in ("none", "selective", "full"):
        raise ValueError(f"recompute is 'none', 'selective' or 'full', not {recompute!r}.")
    sbh = s * b * h
    if recompute == "full":
        return 2 * sbh
    attention = 0 if recompute == "selective" else 5 * a * s / h
    if sequence_parallel:
        return sbh / t * (34 + attention)
    return sbh * (10 + 24 / t + attention / t)
