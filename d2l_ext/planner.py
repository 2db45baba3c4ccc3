"""A planner for splitting a transformer: memory per GPU and the time of a training step for
one way of combining data, tensor, sequence, pipeline, context and expert parallelism.

It is built from the book's own models, not fitted to runs:

* memory: the parameters, gradients and optimizer state per parameter of mixed precision
  with Adam under ZeRO (:func:`d2l_ext.memory_budget.zero_bytes_per_parameter`), and the
  activations Korthikanti et al. (2022) count per layer, divided as tensor, sequence and
  context parallelism divide them, times the micro-batches a pipeline stage holds at once
  (:func:`d2l_ext.pipeline.in_flight` of the simulated schedule);
* time: the model's FLOPs (:func:`d2l_ext.gpt_counts`' 6N plus attention) at a fraction of
  the device's peak, stretched by the pipeline's bubble (:func:`d2l_ext.pipeline.bubble`),
  plus the collectives that cannot hide, each an α–β ring on its link.

Every number it returns is an estimate; the chapter compares them with published runs and
shows the errors. Sizes are bytes and seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from d2l_ext import memory_budget, pipeline

RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer: ``layers`` blocks of width ``hidden`` with ``heads``
    attention heads (``kv_heads`` of them for keys and values: grouped-query attention), an
    MLP of width ``ffn`` (``"gelu"``: two matrices; ``"swiglu"``: three), a vocabulary of
    ``vocab`` tokens (``tied``: one matrix for the embedding and the output layer), and
    ``experts`` MLPs per layer of which each token uses ``top_k`` (1: a dense model)."""
    layers: int
    hidden: int
    heads: int
    vocab: int
    ffn: int = 0  # 0: four times the width
    kv_heads: int = 0  # 0: as many as the heads
    mlp: str = "gelu"
    tied: bool = False
    experts: int = 1
    top_k: int = 1
    dropout: bool = True
    flash: bool = False  # a fused attention that keeps no s × s matrix

    def __post_init__(self) -> None:
        if min(self.layers, self.hidden, self.heads, self.vocab) < 1:
            raise ValueError("layers, hidden, heads and vocab must be at least 1")
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if self.mlp not in ("gelu", "swiglu"):
            raise ValueError(f"mlp is 'gelu' or 'swiglu', not {self.mlp!r}")
        if not 1 <= self.top_k <= self.experts:
            raise ValueError(f"top_k must be between 1 and experts ({self.experts})")

    @property
    def width_ffn(self) -> int:
        return self.ffn or 4 * self.hidden

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    def attention_parameters(self) -> int:
        """Per layer: q and the output projection (h × h each), k and v (h × h·kv/heads)."""
        h = self.hidden
        return 2 * h * h + 2 * h * (h * self.kv // self.heads)

    def expert_parameters(self) -> int:
        """One MLP's weight matrices."""
        return (3 if self.mlp == "swiglu" else 2) * self.hidden * self.width_ffn

    def layer_parameters(self) -> int:
        """One block's weight matrices (norms and biases left out: a fraction of a percent)."""
        return self.attention_parameters() + self.experts * self.expert_parameters()

    def embedding_parameters(self) -> int:
        return (1 if self.tied else 2) * self.vocab * self.hidden

    def parameters(self) -> int:
        return self.layers * self.layer_parameters() + self.embedding_parameters()

    def active_parameters(self) -> int:
        """The weights one token multiplies: its ``top_k`` experts only, and one embedding
        matrix (the output layer's; looking a token up is no product)."""
        per_layer = self.attention_parameters() + self.top_k * self.expert_parameters()
        return self.layers * per_layer + self.vocab * self.hidden

    def flops_per_token(self, seq: int) -> float:
        """Training FLOPs per token: 6 per active weight, plus attention's 12·L·s·h (causal
        attention computes half of it; the convention counts all, as MFU does)."""
        return 6 * self.active_parameters() + 12 * self.layers * seq * self.hidden


@dataclass(frozen=True)
class Split:
    """How a step is split. ``dp`` data-parallel replicas (with ``zero`` 0–3), ``tp``
    tensor-parallel processes (``sp``: with sequence parallelism), ``pp`` pipeline stages
    running ``micro_batches`` micro-batches of ``micro_batch`` sequences by ``schedule``
    (``chunks`` model chunks per stage when interleaved), ``cp`` context-parallel processes
    and ``ep`` expert-parallel processes (taken from the data-parallel ones, as is usual);
    ``recompute``: ``"none"``, ``"selective"`` (attention's core) or ``"full"``."""
    dp: int = 1
    zero: int = 0
    tp: int = 1
    sp: bool = False
    pp: int = 1
    micro_batch: int = 1
    micro_batches: int = 1
    schedule: str = "1f1b"
    chunks: int = 1
    cp: int = 1
    ep: int = 1
    recompute: str = "none"

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "micro_batch", "micro_batches", "chunks", "cp", "ep"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.zero not in (0, 1, 2, 3):
            raise ValueError(f"zero is a stage from 0 to 3, not {self.zero}")
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"recompute is one of {', '.join(RECOMPUTE)}, not "
                             f"{self.recompute!r}")
        if self.dp % self.ep:
            raise ValueError(f"ep ({self.ep}) must divide dp ({self.dp}): the experts are split "
                             "over data-parallel processes")

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp


@dataclass(frozen=True)
class Hardware:
    """A GPU and its links: dense 16-bit peak (FLOP/s), memory (bytes), the bandwidth each
    GPU gets on the link inside a node and between nodes (bytes/s, one direction), a
    per-message latency α (s) and ``per_node`` GPUs per node."""
    name: str
    peak: float
    memory: float
    intra: float
    inter: float
    per_node: int = 8
    alpha: float = 10e-6


@dataclass
class Plan:
    """What :func:`plan` estimates, per GPU: memory by part (bytes) and step time by part
    (seconds)."""
    memory: dict[str, float] = field(default_factory=dict)
    time: dict[str, float] = field(default_factory=dict)

    @property
    def total_memory(self) -> float:
        return sum(self.memory.values())

    @property
    def step_time(self) -> float:
        return sum(self.time.values())


def activation_bytes(model: Model, split: Split, seq: int) -> float:
    """The bytes one layer keeps for one micro-batch on one GPU, 16-bit activations, counted
    as Korthikanti et al. (2022) count them: s·b·h·(34 + 5as/h) for their GPT (dropout, a
    GELU MLP of width 4h). Of the 34, 10 are not divided by tensor parallelism (the
    LayerNorms' inputs, the inputs of the attention's and the MLP's first products, the two
    dropout masks) unless sequence parallelism divides them too, and 24 are (attention's Q,
    K, V and projection input, 8; the MLP's inner activations, 16). Here the 16 follows the
    MLP's width and kind (SwiGLU keeps 3 inner tensors, GELU 2) and its ``top_k`` experts,
    the 8 the key and value heads; without dropout the masks (2 of the 10, and the as²
    mask and output) go; a fused attention (``flash``) keeps no 5as/h term, and neither does
    selective recomputation. Full recomputation keeps only the layer's input, 2·sbh.
    Context parallelism divides the sequence by ``cp``."""
    s, b, h, a, t = seq / split.cp, split.micro_batch, model.hidden, model.heads, split.tp
    if split.recompute == "full":
        return 2 * s * b * h / (t if split.sp else 1)
    r = model.kv / model.heads
    inner = (3 if model.mlp == "swiglu" else 2) * 2 * model.top_k * model.width_ffn / h
    split_part = (4 + 4 * r) + inner  # 8 + 16 for Korthikanti's GPT
    whole_part = 10 if model.dropout else 8
    if model.flash or split.recompute == "selective":
        attention = 0.0
    else:  # softmax output (2 bytes), and with dropout its mask (1) and output (2), per score
        attention = (5 if model.dropout else 2) * a * s / h
    return s * b * h * (whole_part / (t if split.sp else 1) + (split_part + attention) / t)


def _timeline(split: Split) -> tuple[list[pipeline.Interval], int]:
    """The simulated schedule of one step's micro-batches (backward twice the forward), and
    the chunks per stage it counts in."""
    chunks = split.chunks if split.schedule == "interleaved" else 1
    orders = pipeline.schedule(split.schedule, split.pp, split.micro_batches, chunks)
    costs = pipeline.Costs(1 / chunks, 2 / chunks)  # a chunk holds 1/chunks of the layers
    return pipeline.simulate(orders, costs, chunks=chunks), chunks


def in_flight(split: Split) -> int:
    """Micro-batches whose activations the busiest stage holds at once, from the simulated
    schedule (GPipe: all of them; 1F1B: up to the stages; interleaved: counted in chunks,
    returned in stage-equivalents, rounded up)."""
    if split.pp == 1:
        return 1
    timeline, chunks = _timeline(split)
    return math.ceil(max(pipeline.in_flight(timeline).values()) / chunks)


def plan(model: Model, split: Split, seq: int, hardware: Hardware | None = None,
         efficiency: float = 0.5) -> Plan:
    """Memory per GPU and (with ``hardware``) the step's time for ``split`` of ``model``
    training on sequences of ``seq`` tokens. ``efficiency`` is the share of the peak the
    matrix products reach (a published MFU is a fair guess)."""
    if model.heads % split.tp or model.kv % split.tp:
        raise ValueError(f"tp ({split.tp}) must divide the heads ({model.heads}) and the key "
                         f"and value heads ({model.kv})")
    if model.layers % (split.pp * split.chunks):
        raise ValueError(f"the layers ({model.layers}) must divide evenly among "
                         f"{split.pp * split.chunks} pipeline chunks")
    if model.experts % split.ep:
        raise ValueError(f"ep ({split.ep}) must divide the experts ({model.experts})")
    if seq % split.cp:
        raise ValueError(f"cp ({split.cp}) must divide the sequence ({seq})")
    out = Plan()
    layers = model.layers // split.pp
    dense = layers * model.attention_parameters()
    experts = layers * model.experts * model.expert_parameters()
    embeddings = model.embedding_parameters() / (1 if model.tied or split.pp == 1 else 2)
    per_gpu = (dense + embeddings) / split.tp + experts / (split.tp * split.ep)
    replicas = split.dp * split.cp  # context parallelism shares the weights like dp
    out.memory["weights, gradients, optimizer"] = per_gpu * memory_budget.zero_bytes_per_parameter(
        split.zero, replicas)
    out.memory["activations"] = (activation_bytes(model, split, seq) * layers
                                 * in_flight(split))
    if hardware is None:
        return out
    tokens = split.micro_batch * split.micro_batches * seq  # per data-parallel replica
    flops = model.flops_per_token(seq) * tokens / (split.tp * split.pp * split.cp)
    if split.recompute == "full":
        flops *= 4 / 3  # one more forward pass: 2 of the 6
    compute = flops / (hardware.peak * efficiency)
    if split.pp > 1:
        idle = pipeline.bubble(_timeline(split)[0])
        out.time["pipeline bubble"] = compute * idle / (1 - idle)
    out.time["compute"] = compute
    if split.tp > 1:  # 4 all-reduces (or their SP pairs) per layer, per micro-batch; exposed
        payload = split.micro_batch * seq / split.cp * model.hidden * 2
        ring = 2 * (split.tp - 1) / split.tp * payload
        link = hardware.intra if split.tp <= hardware.per_node else hardware.inter
        out.time["tensor-parallel collectives"] = (
            4 * layers * split.micro_batches * (hardware.alpha + ring / link))
    if replicas > 1:  # one gradient all-reduce (reduce-scatter + all-gather under ZeRO)
        nodes_spanned = split.gpus > hardware.per_node
        link = hardware.inter if nodes_spanned else hardware.intra
        grads = per_gpu * 2 * 2 * (replicas - 1) / replicas
        out.time["data-parallel gradients (if not hidden)"] = grads / link
    return out


def fits(model: Model, split: Split, seq: int, hardware: Hardware) -> bool:
    """Whether the plan's memory fits the GPU's."""
    return plan(model, split, seq).total_memory <= hardware.memory
