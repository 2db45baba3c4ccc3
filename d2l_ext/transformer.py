"""A small GPT written plainly, and the counts the chapter on transformers holds it against.

The model is pre-norm (LayerNorm before attention and before the MLP), with causal
self-attention and a 4x MLP, its output layer tied to the token embedding, as in GPT-2. The
counts are closed formulas of the configuration: parameters, training FLOPs per token
(six per weight per token, plus the attention term 12·L·s·d that weights do not cover),
and the activation bytes per layer of Korthikanti et al. (2022). Attention comes three
ways: ``naive`` (the s×s scores kept), ``tiled`` (online softmax over key blocks, never more
than one block of scores, the FlashAttention idea) and ``sdpa`` (PyTorch's fused function).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn
from torch.nn import functional as F

from d2l_ext.memory import _storages

Attention = Literal["naive", "tiled", "sdpa"]


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


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    causal: bool = True, dropout: float = 0.0) -> torch.Tensor:
    """Softmax(q kᵀ / √d) v over the last two dimensions, keeping the whole score matrix;
    with ``dropout``, the probabilities are dropped out (in training) before multiplying v."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:  # as scaled_dot_product_attention(is_causal=True): query i sees keys 0..i
        s_q, s_k = scores.shape[-2:]
        mask = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~mask, float("-inf"))
    return F.dropout(scores.softmax(dim=-1), dropout) @ v


def tiled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
                    block_q: int = 64, block_k: int = 64) -> torch.Tensor:
    """The same attention, one (block_q × block_k) tile of scores at a time.

    For each block of queries, a running maximum ``m``, a running sum of exponentials ``l``
    and an unnormalised output ``acc`` are updated key block by key block (the online
    softmax); the output is ``acc / l``. With ``causal``, key blocks wholly after the query
    block are skipped. Sums are kept in float32 whatever the inputs' type.
    """
    if block_q < 1 or block_k < 1:
        raise ValueError(f"block sizes must be at least 1, got {block_q} and {block_k}")
    s_q, s_k, scale = q.shape[-2], k.shape[-2], 1 / math.sqrt(q.shape[-1])
    out = torch.empty_like(q)
    for i in range(0, s_q, block_q):
        qi = q[..., i:i + block_q, :].float() * scale
        rows = qi.shape[-2]
        m = torch.full((*qi.shape[:-1], 1), float("-inf"), device=q.device)
        l = torch.zeros_like(m)
        acc = torch.zeros(*qi.shape[:-1], v.shape[-1], device=q.device)
        last = min(s_k, i + rows) if causal else s_k
        for j in range(0, last, block_k):
            kj, vj = k[..., j:j + block_k, :].float(), v[..., j:j + block_k, :].float()
            scores = qi @ kj.transpose(-2, -1)
            if causal:
                query = torch.arange(i, i + rows, device=q.device)[:, None]
                key = torch.arange(j, j + kj.shape[-2], device=q.device)[None, :]
                scores = scores.masked_fill(key > query, float("-inf"))
            m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
            p = torch.exp(scores - m_new)
            correction = torch.exp(m - m_new)
            l = l * correction + p.sum(dim=-1, keepdim=True)
            acc = acc * correction + p @ vj
            m = m_new
        out[..., i:i + rows, :] = (acc / l).to(q.dtype)
    return out


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, how: Attention = "sdpa",
              causal: bool = True, dropout: float = 0.0) -> torch.Tensor:
    """Causal attention computed ``naive``, ``tiled`` or by ``sdpa``, with ``dropout`` on the
    probabilities (``tiled`` has none: it refuses a nonzero one)."""
    if how == "naive":
        return naive_attention(q, k, v, causal, dropout)
    if how == "tiled":
        if dropout:
            raise ValueError("tiled_attention has no dropout: use 'naive' or 'sdpa', or "
                             "GPTConfig(dropout=0) (or call model.eval())")
        return tiled_attention(q, k, v, causal)
    if how == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, dropout_p=dropout)
    raise ValueError(f"attention is computed 'naive', 'tiled' or 'sdpa', not {how!r}")


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention: one linear layer makes q, k and v, one projects back."""

    def __init__(self, cfg: GPTConfig, how: Attention = "sdpa") -> None:
        super().__init__()
        self.heads, self.how = cfg.heads, how
        self.qkv = nn.Linear(cfg.d, 3 * cfg.d)
        self.proj = nn.Linear(cfg.d, cfg.d)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2)
                   for t in self.qkv(x).split(d, dim=-1))
        p = self.dropout.p if self.training else 0.0
        y = attention(q, k, v, self.how, dropout=p).transpose(1, 2).reshape(b, s, d)
        return self.dropout(self.proj(y))


class MLP(nn.Module):
    """Linear d → 4d, GELU, linear 4d → d."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.fc = nn.Linear(cfg.d, 4 * cfg.d)
        self.proj = nn.Linear(4 * cfg.d, cfg.d)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    """A pre-norm transformer block: x + attention(norm(x)), then + MLP(norm(·))."""

    def __init__(self, cfg: GPTConfig, how: Attention = "sdpa") -> None:
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(cfg.d), CausalSelfAttention(cfg, how)
        self.ln2, self.mlp = nn.LayerNorm(cfg.d), MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Token and position embeddings, ``layers`` blocks, a final LayerNorm and an output
    layer that shares the token embedding's weights. ``forward`` returns the logits, and the
    mean cross-entropy too when targets are given."""

    def __init__(self, cfg: GPTConfig, how: Attention = "sdpa") -> None:
        super().__init__()
        self.cfg = cfg
        self.tokens = nn.Embedding(cfg.vocab, cfg.d)
        self.positions = nn.Embedding(cfg.seq, cfg.d)
        self.dropout = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, how) for _ in range(cfg.layers))
        self.ln = nn.LayerNorm(cfg.d)
        self.head = nn.Linear(cfg.d, cfg.vocab, bias=False)
        self.head.weight = self.tokens.weight

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        s = idx.shape[1]
        if s > self.cfg.seq:
            raise ValueError(f"a sequence of {s} tokens is longer than the model's "
                             f"seq={self.cfg.seq}: cut it or build the model with a larger seq")
        x = self.dropout(self.tokens(idx) + self.positions(torch.arange(s, device=idx.device)))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())


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
    if block_q is None:
        return item * (2 * s * d + s * s + 2 * s * s + s * s + s * d + s * d)
    if block_q < 1:
        raise ValueError(f"block_q must be at least 1, got {block_q}")
    return item * (s * d + math.ceil(s / block_q) * 2 * s * d + s * d)


@dataclass(frozen=True)
class Saved:
    """One tensor an autograd node saved for the backward pass: the node's name (e.g.
    ``GeluBackward0``), the attribute (``_saved_self``), its shape and type, and the bytes
    of its storage that no earlier node had saved already (0 for a view of one)."""

    node: str
    attr: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    nbytes: int


def saved_by_node(output: torch.Tensor,
                  exclude: Iterable[torch.Tensor | nn.Module] = ()) -> list[Saved]:
    """The tensors saved for the backward pass by each node of ``output``'s autograd graph,
    in the order the forward pass created the nodes; each storage counts once, at the first
    node that saved it, and the storages of ``exclude`` (tensors, or modules for their
    parameters and buffers) count nothing. Sum ``nbytes`` for what the graph keeps alive."""
    tensors = [t for x in exclude for t in
               ((*x.parameters(), *x.buffers()) if isinstance(x, nn.Module) else (x,))]
    counted = {key for t in tensors for key, _ in _storages(t)}
    nodes, seen, stack = [], set(), [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        nodes.append(node)
        stack.extend(child for child, _ in node.next_functions)
    found = []
    for node in sorted(nodes, key=lambda n: n._sequence_nr()):
        for attr in sorted(a for a in dir(node) if a.startswith("_saved_")):
            value = getattr(node, attr)
            for t in value if isinstance(value, (list, tuple)) else (value,):
                if not isinstance(t, torch.Tensor):
                    continue
                new = 0
                for key, nbytes in _storages(t):
                    if key not in counted:
                        counted.add(key)
                        new += nbytes
                found.append(Saved(node.name(), attr, tuple(t.shape), t.dtype, new))
    return found
