"""A planner for splitting a transformer: memory per GPU and the time of a training step for
one way of combining data, tensor, sequence, pipeline, context and expert parallelism.

It is built from the book's own models, not fitted to runs:

* memory: the parameters, gradients and optimizer state per parameter of mixed precision
  with Adam under ZeRO (:func:`d2l_ext.memory_budget.zero_bytes_per_parameter`), and the
  activations Korthikanti et al. (2022) count per layer, divided as tensor, sequence and
  context parallelism divide them, times the micro-batches a pipeline stage holds at once
  (:func:`d2l_ext.pipeline.in_flight` of the simulated schedule), and the loss's float32
  tensors at their peak (:func:`logits_bytes`);
* time: the model's FLOPs (:func:`d2l_ext.gpt_counts`' 6N plus attention) at a fraction of
  the device's peak, stretched by the pipeline's bubble (:func:`d2l_ext.pipeline.bubble`),
  plus the collectives that cannot hide, each an α–β ring on its link: the tensor-parallel
  ones wait on every layer's result; context parallelism's ring and the data-parallel
  collectives hide behind the arithmetic they overlap where they are shorter than it
  (:func:`context_parallel_exposed`, :func:`data_parallel_exposed`).

Every number it returns is an estimate; the chapter compares them with published runs and
shows the errors. Sizes are bytes and seconds.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace

from d2l_ext import datasheets, memory_budget, pipeline
from d2l_ext.utils import is_whole

RECOMPUTE = ("none", "selective", "full")
#: The schedules whose bubble and in-flight micro-batches the planner takes from the
#: simulator with a backward pass twice the forward (zero-bubble ones split the backward).
SCHEDULES = ("1f1b", "gpipe", "interleaved")


def _as_python_ints(obj: object, names: tuple[str, ...]) -> None:
    """Store the named fields of a frozen dataclass as Python ints, so that a NumPy integer
    (which the checks accept) cannot overflow in the counts made from it."""
    for name in names:
        object.__setattr__(obj, name, int(getattr(obj, name)))


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
        for name in ("layers", "hidden", "heads", "vocab", "experts", "top_k"):
            if not is_whole(getattr(self, name)) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, not "
                                 f"{getattr(self, name)}")
        for name in ("ffn", "kv_heads"):
            if not is_whole(getattr(self, name)) or getattr(self, name) < 0:
                raise ValueError(f"{name} must be a whole number, 0 or more (0: the default), "
                                 f"not {getattr(self, name)}")
        _as_python_ints(self, ("layers", "hidden", "heads", "vocab", "experts", "top_k", "ffn",
                               "kv_heads"))
        if self.heads % self.kv:
            raise ValueError(f"the key and value heads ({self.kv}) must divide the heads "
                             f"({self.heads})")
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
            if not is_whole(getattr(self, name)) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, not "
                                 f"{getattr(self, name)}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"the planner models the schedules {', '.join(SCHEDULES)}, not "
                             f"{self.schedule!r}")
        if not is_whole(self.zero) or self.zero not in (0, 1, 2, 3):
            raise ValueError(f"zero is a stage from 0 to 3, not {self.zero}")
        _as_python_ints(self, ("dp", "tp", "pp", "micro_batch", "micro_batches", "chunks", "cp",
                               "ep", "zero"))
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

    def __post_init__(self) -> None:
        if not (all(x > 0 for x in (self.peak, self.memory, self.intra, self.inter))
                and self.alpha >= 0):
            raise ValueError(f"{self.name}: peak, memory and both links must be above 0, and "
                             "alpha 0 or more")
        if not is_whole(self.per_node) or self.per_node < 1:
            raise ValueError(f"{self.name}: per_node must be a whole number of at least 1")
        _as_python_ints(self, ("per_node",))


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
    Context parallelism divides the sequence by ``cp``: each process keeps its s/cp
    queries' scores against all s keys. The MLP's inner tensors are counted as a fused
    SwiGLU keeps them (three; eager PyTorch keeps a fourth, the gate's activation)."""
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
        attention = (5 if model.dropout else 2) * a * seq / h
    return s * b * h * (whole_part / (t if split.sp else 1) + (split_part + attention) / t)


@functools.lru_cache(maxsize=256)
def _pipeline(schedule: str, stages: int, micro_batches: int, chunks: int) -> tuple[float, int]:
    """The idle share and the micro-batches the busiest stage holds at once, from the
    simulated schedule (backward twice the forward; a chunk holds 1/chunks of the layers)."""
    chunks = chunks if schedule == "interleaved" else 1
    orders = pipeline.schedule(schedule, stages, micro_batches, chunks)
    timeline = pipeline.simulate(orders, pipeline.Costs(1 / chunks, 2 / chunks), chunks=chunks)
    return (pipeline.bubble(timeline),
            math.ceil(max(pipeline.in_flight(timeline).values()) / chunks))


def in_flight(split: Split) -> int:
    """Micro-batches whose activations the busiest stage holds at once, from the simulated
    schedule (GPipe: all of them; 1F1B: up to the stages; interleaved: counted in chunks,
    returned in stage-equivalents, rounded up)."""
    if split.pp == 1:
        return 1
    return _pipeline(split.schedule, split.pp, split.micro_batches, split.chunks)[1]


def bubble(split: Split) -> float:
    """The share of a step a pipeline stage sits idle, from the simulated schedule."""
    if split.pp == 1:
        return 0.0
    return _pipeline(split.schedule, split.pp, split.micro_batches, split.chunks)[0]


def _check(model: Model, split: Split, seq: int, efficiency: float) -> None:
    if model.heads % split.tp or model.kv % split.tp:
        raise ValueError(f"tp ({split.tp}) must divide the heads ({model.heads}) and the key "
                         f"and value heads ({model.kv})")
    chunks = split.pp * (split.chunks if split.schedule == "interleaved" else 1)
    if model.layers % chunks:
        raise ValueError(f"the layers ({model.layers}) must divide evenly among "
                         f"{chunks} pipeline chunks")
    if model.experts % split.ep:
        raise ValueError(f"ep ({split.ep}) must divide the experts ({model.experts})")
    if not is_whole(seq) or seq < 1:
        raise ValueError(f"the sequence must be a whole number of tokens, at least 1, not {seq}")
    if seq % split.cp:
        raise ValueError(f"cp ({split.cp}) must divide the sequence ({seq})")
    if not 0 < efficiency <= 1:
        raise ValueError(f"efficiency is the share of the peak the products reach: above 0 "
                         f"and at most 1, not {efficiency}")


def plan(model: Model, split: Split, seq: int, hardware: Hardware | None = None,
         efficiency: float = 0.5) -> Plan:
    """Memory per GPU and (with ``hardware``) the step's time for ``split`` of ``model``
    training on sequences of ``seq`` tokens. ``efficiency`` is the share of the peak the
    matrix products reach (a published MFU is a fair guess).

    The memory is the peak: what is kept, plus the loss's float32 logits at the end of the
    forward pass or, under full recomputation, the layer being rebuilt if that is larger
    (the two never coexist). The time adds to the arithmetic the pipeline's bubble and the
    messages that cannot hide; left out are the pipeline's sends between stages and the
    experts' all-to-alls."""
    _check(model, split, seq, efficiency)
    seq = int(seq)
    out = Plan()
    layers = model.layers // split.pp
    embeddings = model.embedding_parameters() / (1 if model.tied or split.pp == 1 else 2)
    dense = (layers * model.attention_parameters() + embeddings) / split.tp
    experts = layers * model.experts * model.expert_parameters() / (split.tp * split.ep)
    replicas = split.dp * split.cp  # context parallelism shares the weights like dp
    out.memory["weights, gradients, optimizer"] = (
        dense * memory_budget.zero_bytes_per_parameter(split.zero, replicas)
        + experts * memory_budget.zero_bytes_per_parameter(split.zero, replicas // split.ep))
    out.memory["activations"] = (activation_bytes(model, split, seq) * layers
                                 * in_flight(split))
    loss = out.memory["loss (float32 logits)"] = logits_bytes(model, split, seq)
    if split.recompute == "full":
        rebuilt = activation_bytes(model, replace(split, recompute="none"), seq)
        out.memory["recomputed layer, beyond the loss"] = max(0.0, rebuilt - loss)
    if hardware is None:
        return out
    full = split.recompute == "full"
    tokens = split.micro_batch * split.micro_batches * seq  # per data-parallel replica
    flops = model.flops_per_token(seq) * tokens / (split.tp * split.pp * split.cp)
    compute = flops * (4 / 3 if full else 1) / (hardware.peak * efficiency)  # +1 forward
    if split.pp > 1:
        idle = bubble(split)
        out.time["pipeline bubble"] = compute * idle / (1 - idle)
    out.time["compute"] = compute
    if split.tp > 1:
        out.time["tensor-parallel collectives"] = (
            layers * split.micro_batches * tensor_parallel_seconds(model, split, seq, hardware))
    if split.cp > 1:
        out.time["context-parallel ring (exposed)"] = (
            layers * split.micro_batches * context_parallel_exposed(model, split, seq, hardware,
                                                                    efficiency))
    if replicas > 1:
        out.time["data-parallel collectives (exposed)"] = data_parallel_exposed(
            dense, experts, split, hardware, compute, layers)
    return out


def tensor_parallel_seconds(model: Model, split: Split, seq: int, hardware: Hardware) -> float:
    """Seconds per layer and micro-batch of tensor parallelism's collectives, which the next
    product waits for: two all-reduces in the forward pass and two in the backward pass
    (with sequence parallelism, as many all-gather and reduce-scatter pairs, the same bytes),
    two more where full recomputation replays the forward pass; each a ring over ``tp``
    processes, 2(t − 1) messages of α plus 2(t − 1)/t of the activations over the link."""
    t = split.tp
    payload = split.micro_batch * seq / split.cp * model.hidden * 2
    link = hardware.intra if t <= hardware.per_node else hardware.inter
    one = 2 * (t - 1) * hardware.alpha + 2 * (t - 1) / t * payload / link
    return (6 if split.recompute == "full" else 4) * one


def context_parallel_exposed(model: Model, split: Split, seq: int, hardware: Hardware,
                             efficiency: float) -> float:
    """Seconds per layer and micro-batch that a ring of ``cp`` processes waits for keys and
    values: the forward pass sends its shard of them ``cp`` − 1 times, the backward pass
    sends them again with their gradients (three sends in all, four where full recomputation
    replays the forward pass); the sends hide behind the layer's attention products, 12·s·h
    FLOPs per token (a third more when replayed), where those take longer. Ranks are laid
    out tensor-parallel first, then context-parallel, so the ring stays in a node while
    tp·cp fits in one."""
    replay = 4 / 3 if split.recompute == "full" else 1
    attention = (replay * 12 * seq * model.hidden * split.micro_batch * seq / split.cp
                 / split.tp / (hardware.peak * efficiency))
    return max(0.0, context_parallel_sends(model, split, seq, hardware) - attention)


def context_parallel_sends(model: Model, split: Split, seq: int, hardware: Hardware) -> float:
    """Seconds per layer and micro-batch of a context-parallel ring's sends of keys and
    values, overlapped or not (see :func:`context_parallel_exposed`)."""
    replay = 4 / 3 if split.recompute == "full" else 1
    kv_bytes = (2 * split.micro_batch * seq / split.cp * model.hidden * model.kv / model.heads
                * 2 / split.tp)
    link = hardware.intra if split.cp * split.tp <= hardware.per_node else hardware.inter
    return 3 * replay * (split.cp - 1) * (hardware.alpha + kv_bytes / link)


def data_parallel_exposed(dense: float, experts: float, split: Split, hardware: Hardware,
                          compute: float, layers: int) -> float:
    """Seconds of the data-parallel collectives that outlast the arithmetic they overlap,
    for ``dense`` and ``experts`` 16-bit weights per GPU (the experts shared by dp·cp/ep
    replicas, the rest by dp·cp) and a step of ``compute`` seconds over ``layers`` layers.

    Each collective is a ring over k replicas: a reduce-scatter or an all-gather sends
    (k − 1)/k of the bytes in k − 1 messages of α. ZeRO 0 and 1: the step's gradients cross
    once (an all-reduce's bytes: a reduce-scatter and an all-gather), behind the last
    micro-batch's backward pass. ZeRO-2: every micro-batch reduce-scatters its gradients
    behind its own backward pass; the all-gather of the updated weights comes once, with the
    last. ZeRO-3: every micro-batch gathers each layer's weights for the forward pass and
    again for the backward pass and reduce-scatters its gradients, behind its own
    arithmetic. Ranks are laid out tensor-parallel first, then context-parallel, then
    data-parallel: the replicas share a node while tp·cp·dp fits in one."""
    link = (hardware.intra if split.tp * split.cp * split.dp <= hardware.per_node
            else hardware.inter)
    k = split.dp * split.cp
    groups = ([(dense + experts, k)] if split.ep == 1  # one group, one collective
              else [(dense, k), (experts, k // split.ep)])

    def half(messages: int) -> float:  # a reduce-scatter or an all-gather of every group
        return sum(messages * (n - 1) * hardware.alpha + w * 2 * (n - 1) / n / link
                   for w, n in groups if n > 1 and w)

    m = split.micro_batches
    backward = compute * 2 / 3 / m  # one micro-batch's backward pass
    if split.zero == 3:
        return m * max(0.0, 3 * half(layers) - compute / m)
    if split.zero == 2:
        return (m - 1) * max(0.0, half(1) - backward) + max(0.0, 2 * half(1) - backward)
    return max(0.0, 2 * half(1) - backward)


def logits_bytes(model: Model, split: Split, seq: int) -> float:
    """The loss's peak, at the start of the backward pass, for PyTorch's cross-entropy on a
    float32 copy of the logits: the log-softmax output it keeps, its gradient and the
    gradient of the logits, three float32 tensors of s·b·V numbers, 12 bytes a logit (the
    float32 copy is freed by then; the forward pass peaks at 10: the 16-bit logits, their
    float32 copy and the log-softmax output). With tensor parallelism the loss runs on
    vocabulary shards (PyTorch's ``loss_parallel``, on by default in torchtitan), whose
    backward pass holds a fourth float32 tensor: 16 bytes a logit, over t. Korthikanti et
    al. count the 4 bytes the loss keeps. The sequence is divided by ``cp``. The loss lives
    on the last stage; with pipeline parallelism counting it on the busiest stage overstates
    it."""
    per_logit = 16 if split.tp > 1 else 12
    return per_logit * seq / split.cp * split.micro_batch * model.vocab / split.tp


def tokens_per_gpu_second(split: Split, seq: int, estimate: Plan) -> float:
    """Training throughput per GPU of a plan made with hardware: the tokens of one step of
    every replica, over all the GPUs, over the step time."""
    tokens = split.micro_batch * split.micro_batches * seq * split.dp
    return tokens / split.gpus / estimate.step_time


def _hardware(sheet: str, memory: float, inter_gbit: float) -> Hardware:
    ds = datasheets.SHEETS[sheet]
    return Hardware(sheet, peak=ds.bf16, memory=memory, intra=ds.nvlink / 2,
                    inter=inter_gbit * 1e9 / 8)


#: GPUs in eight-GPU nodes: the bf16 dense peak and NVLink (one direction, half the
#: datasheet's two) from :mod:`d2l_ext.datasheets`; between nodes one network port per GPU,
#: 400 Gb/s for H100 and H200 nodes (ConnectX-7), 200 Gb/s for A100 nodes (HDR InfiniBand).
HARDWARE = {
    "H100 SXM": _hardware("H100 SXM", 80e9, 400),
    "H200 SXM": _hardware("H200 SXM", 141e9, 400),
    "A100 SXM 80GB": _hardware("A100 SXM 80GB", 80e9, 200),
}


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def search(model: Model, gpus: int, seq: int, batch: int, hardware: Hardware,
           efficiency: float = 0.5, max_cp: int = 8,
           headroom: float = 0.0) -> list[tuple[Split, Plan]]:
    """Every split of ``gpus`` GPUs that trains ``batch`` sequences of ``seq`` tokens per step
    and fits in the GPU's memory less a share ``headroom`` of it, fastest first: tensor
    parallelism inside a node (with sequence parallelism), pipeline stages by 1F1B on
    micro-batches of one sequence, up to ``max_cp`` context-parallel processes, data
    parallelism under ZeRO-1 or ZeRO-3 for the rest, and each kind of recomputation (for a
    model with a fused attention, selective recomputation keeps what none does, so it is left
    out). Every product is taken to run at ``efficiency``, however small the split makes
    it. Expert parallelism is not searched (ep = 1): its all-to-alls are not in the planner's
    time."""
    if not (is_whole(gpus) and is_whole(batch)) or gpus < 1 or batch < 1:
        raise ValueError(f"gpus ({gpus}) and batch ({batch}) must be whole numbers, at least 1")
    gpus, batch = int(gpus), int(batch)
    if not 0 <= headroom < 1:
        raise ValueError(f"headroom is a share of the memory, from 0 to below 1, not {headroom}")
    found = []
    for tp in _divisors(gpus):
        if tp > hardware.per_node or model.heads % tp or model.kv % tp:
            continue
        for pp in _divisors(gpus // tp):
            if model.layers % pp:
                continue
            for cp in _divisors(gpus // (tp * pp)):
                dp = gpus // (tp * pp * cp)
                if cp > max_cp or seq % cp or batch % dp:
                    continue
                for zero in (1, 3) if dp * cp > 1 else (0,):
                    for recompute in RECOMPUTE:
                        if recompute == "selective" and model.flash:
                            continue  # a fused attention keeps no scores: as "none"
                        split = Split(dp=dp, zero=zero, tp=tp, sp=tp > 1, pp=pp, cp=cp,
                                      micro_batches=batch // dp, recompute=recompute)
                        estimate = plan(model, split, seq, hardware, efficiency)
                        if estimate.total_memory <= hardware.memory * (1 - headroom):
                            found.append((split, estimate))
    return sorted(found, key=lambda found: found[1].step_time)


def fits(model: Model, split: Split, seq: int, hardware: Hardware) -> bool:
    """Whether the plan's memory fits the GPU's."""
    return plan(model, split, seq).total_memory <= hardware.memory
