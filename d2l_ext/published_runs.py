"""Published training runs to check :mod:`d2l_ext.planner` against: each with its model, its
split, what was measured and where it was published.

torchtitan's Llama 3.1 benchmarks (the torchtitan team, December 2024, 8 to 512 H100 GPUs of
96 GB HBM2e at 500 W, 400 Gb/s per GPU between nodes; torch of 2024-12-23, torchtitan
9dec370): tokens per second per GPU read at the 90th step, and the peak memory the caching
allocator reserved on the busiest GPU (``reserved_bytes.all.peak``), in GiB. Their
configurations train sequences of 8,192 tokens unless the table says otherwise, with
FSDP2 (float32 weights, gradients and Adam state sharded: ZeRO-3), bfloat16 products and
fused (flash) attention. Their "selective" recomputation saves the output of every other
matrix product and of attention (``selective_ac_option = "op"``), which keeps less than
Korthikanti et al.'s selective recomputation (:func:`op_rule_activation_bytes`). They reduce
gradients in float32, where the planner counts 16-bit gradients. Their context parallelism
exchanges keys and values by an all-gather by default, not a ring.
"""

from __future__ import annotations

from dataclasses import dataclass

from d2l_ext import planner
from d2l_ext.i18n import message

TORCHTITAN = ("https://github.com/pytorch/torchtitan/blob/main/benchmarks/"
              "llama3_h100_202412_torchtitan.md")
KORTHIKANTI = "https://arxiv.org/abs/2205.05198"

LLAMA31_8B = planner.Model(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336,
                           mlp="swiglu", vocab=128256, dropout=False, flash=True)
LLAMA31_70B = planner.Model(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672,
                            mlp="swiglu", vocab=128256, dropout=False, flash=True)


@dataclass(frozen=True)
class Run:
    """One published measurement: ``memory_gib`` the peak per GPU, ``tokens_per_second`` per
    GPU; ``float8``: the linear layers ran in FP8 (their peak is not the bf16 one)."""
    name: str
    model: planner.Model
    split: planner.Split
    seq: int
    memory_gib: float
    tokens_per_second: float
    float8: bool
    table: str
    source: str = TORCHTITAN

    @property
    def label(self):
        """The run's name in the reader's language (Chinese commas in Chinese)."""
        return message(en=self.name, zh=self.name.replace(", ", "，"))


def _fsdp(dp: int, batch: int, recompute: str, cp: int = 1, tp: int = 1) -> planner.Split:
    return planner.Split(dp=dp, zero=3, tp=tp, sp=tp > 1, cp=cp, micro_batch=batch,
                         recompute=recompute)


RUNS = [
    Run("8B, FSDP 8", LLAMA31_8B, _fsdp(8, 2, "selective"), 8192, 82.4, 5762, False, "1"),
    Run("8B, FSDP 128", LLAMA31_8B, _fsdp(128, 2, "selective"), 8192, 67.0, 5605, False, "3"),
    Run("8B, FSDP 8, CP 1", LLAMA31_8B, _fsdp(8, 1, "full"), 32768, 83.9, 3890, True, "2"),
    Run("8B, FSDP 4, CP 2", LLAMA31_8B, _fsdp(4, 1, "full", cp=2), 65536, 84.2, 2540, True, "2"),
    Run("8B, FSDP 2, CP 4", LLAMA31_8B, _fsdp(2, 1, "full", cp=4), 131072, 84.0, 1071, True,
        "2"),
    Run("8B, FSDP 1, CP 8", LLAMA31_8B, _fsdp(1, 1, "full", cp=8), 262144, 84.5, 548, True,
        "2"),
    Run("70B, FSDP 32, TP 8", LLAMA31_70B, _fsdp(32, 16, "full", tp=8), 8192, 71.9, 829, True,
        "4"),
]

#: The Ultra-Scale Playbook's activation-memory plots (Tazi et al., 2025;
#: huggingface.co/spaces/nanotron/ultrascale-playbook, assets/data/benchmarks/
#: tp_memoryusage, tp_sp_memoryusage, cp_8Bmemoryusage): a GPT-like model of the given
#: layers, width and heads, its split and sequence length, and the GiB of activations the
#: plot shows. They count 34·s·b·h bytes per layer, as a fused attention keeps.
PLAYBOOK_ACTIVATIONS = [
    ((80, 8192, 64), dict(), 4096, 85.0),
    ((80, 8192, 64), dict(tp=8), 4096, 32.5),
    ((80, 8192, 64), dict(tp=16), 16384, 115.0),
    ((80, 8192, 64), dict(tp=8, sp=True), 4096, 10.625),
    ((80, 8192, 64), dict(tp=16, sp=True), 1024, 1.328125),
    ((32, 4096, 32), dict(tp=2), 4096, 11.0),
    ((32, 4096, 32), dict(tp=2, cp=4), 16384, 11.0),
]
PLAYBOOK = "https://huggingface.co/spaces/nanotron/ultrascale-playbook"


def playbook_activations_gib(shape: tuple[int, int, int], split: dict, seq: int) -> float:
    """The planner's activations for one of the Playbook's plotted points, in GiB."""
    layers, hidden, heads = shape
    model = planner.Model(layers=layers, hidden=hidden, heads=heads, vocab=128256, flash=True)
    return planner.plan(model, planner.Split(**split), seq).memory["activations"] / 2**30


#: Korthikanti et al. (2022), abstract: a 530-billion-parameter GPT on 2,240 A100 GPUs
#: reached a model FLOPs utilization of 54.2% with sequence parallelism and selective
#: recomputation, and 42.1% with full recomputation.
KORTHIKANTI_530B_MFU = {"selective": 0.542, "full": 0.421}
#: That GPT's shape (105 layers of width 20,480 with 128 heads, 2,048-token sequences, GPT-2's
#: vocabulary padded to 51,200, tied embeddings, as in the paper's table of configurations)
#: and the abstract's 2,240 GPUs: tensor 8 and pipeline 35 as in that table, with the
#: interleaved schedule of 3 chunks per stage the paper used, and data parallelism 8
#: (no ZeRO) at one sequence per micro-batch, 2,240 sequences per step.
GPT_530B = planner.Model(layers=105, hidden=20480, heads=128, vocab=51200, tied=True)
GPT_530B_SPLIT = planner.Split(dp=8, tp=8, sp=True, pp=35, micro_batches=280,
                               schedule="interleaved", chunks=3, recompute="selective")

#: torchtitan's Table 1: Llama 3.1 8B at 8,192 tokens with FSDP and torch.compile ran
#: 6,667 tokens per second per GPU in bfloat16 and 8,532 with Float8 linear layers.
FLOAT8_STEP_GAIN = 8532 / 6667


def op_rule_activation_bytes(model: planner.Model, split: planner.Split, seq: int) -> float:
    """What torchtitan's "op" recomputation keeps per layer and micro-batch: the block's
    input and the outputs of the first, third, fifth and seventh of its matrix products
    (wq, wv, w1, w2 in Llama's order wq, wk, wv, wo, w1, w3, w2) and of attention, in 16
    bits, 2·s·b·(4h + h·kv/heads + ffn) bytes (the runs it is used for have no tensor
    parallelism)."""
    if split.tp > 1:
        raise ValueError("op_rule_activation_bytes counts a layer without tensor parallelism")
    h, s = model.hidden, seq / split.cp
    return 2 * s * split.micro_batch * (4 * h + h * model.kv // model.heads + model.width_ffn)


def memory_with_op_rule(run: Run) -> float:
    """The planner's peak memory for ``run`` with the activations torchtitan's "op" rule
    keeps in place of Korthikanti et al.'s selective recomputation (runs with full
    recomputation keep the same under both)."""
    estimate = planner.plan(run.model, run.split, run.seq)
    if run.split.recompute != "selective":
        return estimate.total_memory
    kept = (op_rule_activation_bytes(run.model, run.split, run.seq)
            * (run.model.layers // run.split.pp) * planner.in_flight(run.split))
    return estimate.total_memory - estimate.memory["activations"] + kept


def float8_time_per_token(model: planner.Model, seq: int) -> float:
    """A token's arithmetic in units of bfloat16 FLOPs, with the linear layers' 6·N sped up by
    the factor that gives torchtitan's Table 1 gain at 8,192 tokens (attention's 12·L·s·h
    unchanged)."""
    linear = 6 * model.active_parameters()
    attention_at = 12 * model.layers * 8192 * model.hidden
    speedup = linear / ((linear + attention_at) / FLOAT8_STEP_GAIN - attention_at)
    return linear / speedup + 12 * model.layers * seq * model.hidden


def calibrated_efficiency(run: Run, hardware: planner.Hardware) -> float:
    """The ``efficiency`` at which :func:`d2l_ext.planner.plan` predicts the run's measured
    tokens per second per GPU (found by bisection: a faster product shortens the step)."""
    def predicted(efficiency: float) -> float:
        estimate = planner.plan(run.model, run.split, run.seq, hardware, efficiency)
        return planner.tokens_per_gpu_second(run.split, run.seq, estimate)

    low, high = 1e-3, 1.0
    if predicted(high) < run.tokens_per_second:
        raise ValueError(f"{run.name}: even at the full peak the planner predicts fewer tokens "
                         "per second than were measured; check the hardware")
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if predicted(middle) < run.tokens_per_second else (low, middle)
    return (low + high) / 2
