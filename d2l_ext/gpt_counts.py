"""The closed-form counts of a GPT: parameters, training FLOPs, activation bytes, attention
traffic. Framework-free, so that both tabs of the chapter on transformers (and a machine
without torch) count with the same code; :mod:`d2l_ext.transformer` (PyTorch) and
:mod:`d2l_ext.transformer_mxnet` build the model these counts describe.

The model is a pre-norm GPT as in GPT-2: LayerNorm before attention and before a 4x MLP,
the output layer tied to the token embedding. Training FLOPs count matrix products only:
six per weight per token, plus the attention term 12·L·s·d that weights do not cover.
Activation bytes follow Korthikanti et al. (2022).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from d2l_ext.utils import whole_numbers


@dataclass(frozen=True)
class GPTConfig:
    """The sizes of a GPT: vocabulary, sequence length, width, heads, layers."""

    vocab: int = 256
    seq: int = 128
    d: int = 128
    heads: int = 4
    layers: int = 2
    dropout: float = 0.0

    def __post_init__(self) -> None:
        for name in ("vocab", "seq", "d", "heads", "layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"GPTConfig.{name} must be at least 1, got {getattr(self, name)}")
        if self.d % self.heads:
            raise ValueError(f"the width d={self.d} must be a multiple of heads={self.heads}: "
                             "each head gets d / heads features")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


def parameter_count(cfg: GPTConfig, embeddings: bool = True) -> int:
    """The GPT's parameters: 12·d² + 13·d per block (weights and biases of the four linear
    layers, two LayerNorms), 2·d for the final LayerNorm and, with ``embeddings``,
    (vocab + seq)·d for the embeddings (the output layer shares the token embedding)."""
    d = cfg.d
    count = cfg.layers * (12 * d * d + 13 * d) + 2 * d
    return count + ((cfg.vocab + cfg.seq) * d if embeddings else 0)


def matmul_weights(cfg: GPTConfig) -> int:
    """The weights that multiply every token once per pass: the blocks' four linear layers
    (12·d² per block) and the output layer (vocab·d)."""
    return 12 * cfg.layers * cfg.d ** 2 + cfg.vocab * cfg.d


def training_flops_per_token(cfg: GPTConfig, seq: int | None = None) -> int:
    """FLOPs of one training step per token, counting matrix products only: 6 per weight
    that multiplies the token (2 forward, 4 backward) plus 12·L·s·d for the two attention
    products (q·kᵀ and scores·v), counted over the whole s×s square as dense kernels do."""
    s = cfg.seq if seq is None else seq
    return 6 * matmul_weights(cfg) + 12 * cfg.layers * s * cfg.d


def activation_bytes_per_layer(s: int, b: int, h: int, a: int) -> float:
    """Korthikanti et al. (2022), eq. (1): the bytes one transformer layer keeps for its
    backward pass, with 16-bit activations, 1-byte dropout masks and no recomputation:
    s·b·h·(34 + 5·a·s/h), for sequence length s, batch b, width h and a heads."""
    return s * b * h * (34 + 5 * a * s / h)


def attention_traffic(s: int, d: int, block_q: int | None = None, item: int = 2) -> int:
    """Bytes one head's attention forward moves to and from memory for sequence length s
    and head width d (``item`` bytes per number).

    Naive (``block_q=None``): read q and k, write the s×s scores, read them and write the
    probabilities, read those and v, write the output. Tiled: read each query block once,
    all of k and v once per query block, write the output once; the scores stay on chip.
    """
    s, d, item = whole_numbers(s=s, d=d, item=item)
    if block_q is None:
        return item * (2 * s * d + s * s + 2 * s * s + s * s + s * d + s * d)
    (block_q,) = whole_numbers(block_q=block_q)
    return item * (s * d + math.ceil(s / block_q) * 2 * s * d + s * d)


def causal_attention_traffic(s: int, d: int, block_q: int, block_k: int, item: int = 2) -> int:
    """Bytes one head's tiled *causal* attention forward moves (:func:`attention_traffic`
    counts the non-causal case): each query block is read once and the output written
    once, but a query block ending at query e reads only the key blocks that start before
    e, whole: min(s, ⌈e / block_k⌉·block_k) rows of k and as many of v (the key blocks
    wholly after the query block are skipped)."""
    s, d, item, block_q, block_k = whole_numbers(s=s, d=d, item=item, block_q=block_q,
                                                 block_k=block_k)
    rows = sum(min(s, math.ceil(min(s, i + block_q) / block_k) * block_k)
               for i in range(0, s, block_q))
    return item * (s * d + 2 * rows * d + s * d)


#: Korthikanti et al.'s (2022) terms of a layer's activations with 16-bit activations and
#: 1-byte dropout masks, as (coefficient of s·b·h, coefficient of a·s²·b) bytes; they add up
#: to s·b·h·34 + a·s²·b·5 (:func:`activation_bytes_per_layer`).
FORMULA_TERMS = {
    "LayerNorm inputs": (4, 0),
    "linear-layer inputs": (14, 0),  # QKV 2, the attention's projection 2, MLP in 2, out 8
    "Q, K and V": (6, 0),
    "GELU input": (8, 0),
    "dropout masks after attention and MLP": (2, 0),
    "softmax output": (0, 2),
    "attention dropout mask": (0, 1),
    "attention dropout output": (0, 2),
}
#: What PyTorch saves that the formula leaves out (see :func:`saved_terms`).
EXTRA_TERMS = ("LayerNorm statistics", "causal mask", "fused attention's output and statistics",
               "weight copies (autocast)", "other")


def formula_terms(s: int, b: int, h: int, a: int) -> dict[str, float]:
    """:data:`FORMULA_TERMS` in bytes for sequence length s, batch b, width h and a heads."""
    return {term: s * b * h * x + a * s * s * b * y for term, (x, y) in FORMULA_TERMS.items()}


#: The terms' names in the reader's language (:func:`d2l_ext.i18n.message`).
TERM_NAMES = {
    "LayerNorm inputs": ("LayerNorm inputs", "层规范化的输入"),
    "linear-layer inputs": ("linear-layer inputs", "线性层的输入"),
    "Q, K and V": ("Q, K and V", "Q、K 和 V"),
    "GELU input": ("GELU input", "GELU 的输入"),
    "dropout masks after attention and MLP": ("dropout masks after attention and MLP",
                                              "注意力和 MLP 之后的暂退掩码"),
    "softmax output": ("softmax output", "softmax 的输出"),
    "attention dropout mask": ("attention dropout mask", "注意力暂退的掩码"),
    "attention dropout output": ("attention dropout output", "注意力暂退的输出"),
    "LayerNorm statistics": ("LayerNorm statistics (not in the formula)",
                             "层规范化的统计量（公式未计）"),
    "causal mask": ("causal mask (not in the formula)", "因果掩码（公式未计）"),
    "fused attention's output and statistics": (
        "fused attention's output and statistics", "融合注意力的输出与统计量"),
    "weight copies (autocast)": ("bf16 copies of the weights (autocast; not activations)",
                                 "权重的 bf16 副本（自动混合精度；不是激活）"),
    "other": ("other", "其他"),
}


def term_name(term: str):
    """A term of :data:`FORMULA_TERMS` or :data:`EXTRA_TERMS` named in the reader's language."""
    from d2l_ext.i18n import message

    if term not in TERM_NAMES:
        raise KeyError(f"unknown term {term!r}; one of {', '.join(TERM_NAMES)}")
    en, zh = TERM_NAMES[term]
    return message(en=en, zh=zh)
