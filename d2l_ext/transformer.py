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

from d2l_ext.gpt_counts import (  # noqa: F401 - re-exported: the counts beside the model
    EXTRA_TERMS,
    FORMULA_TERMS,
    GPTConfig,
    activation_bytes_per_layer,
    attention_traffic,
    formula_terms,
    matmul_weights,
    parameter_count,
    training_flops_per_token,
)
from d2l_ext.memory import _storages

Attention = Literal["naive", "tiled", "sdpa"]


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
    layer that shares the token embedding's weights, initialized as GPT-2's (weights normal
    with standard deviation 0.02, biases zero). ``forward`` returns the logits, and the mean
    cross-entropy too when targets are given."""

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
        for module in self.modules():  # GPT-2's initialization: small weights, zero biases
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

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


@dataclass(frozen=True)
class Saved:
    """One tensor an autograd node saved for the backward pass: the node's name (e.g.
    ``GeluBackward0``), the attribute (``_saved_self``), its shape and type, and the bytes
    of its storage that no earlier node had saved already (0 for a view of one); ``step``:
    the node's place among the graph's nodes in the order the forward pass made them."""

    node: str
    attr: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    nbytes: int
    step: int = 0


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
    for step, node in enumerate(sorted(nodes, key=lambda n: n._sequence_nr())):
        attrs = sorted(a for a in dir(node) if a.startswith("_saved_"))
        if hasattr(node, "saved_tensors"):  # an autograd.Function's ctx.save_for_backward
            attrs.append("saved_tensors")
        for attr in attrs:
            value = getattr(node, attr)
            for t in value if isinstance(value, (list, tuple)) else (value,):
                if not isinstance(t, torch.Tensor):
                    continue
                new = 0
                for key, nbytes in _storages(t):
                    if key not in counted:
                        counted.add(key)
                        new += nbytes
                found.append(Saved(node.name(), attr, tuple(t.shape), t.dtype, new, step))
    return found


def saved_terms(saved: Iterable[Saved]) -> dict[str, int]:
    """The bytes of :func:`saved_by_node`'s tensors of one :class:`Block`, by the formula's
    term (:data:`FORMULA_TERMS`) or by what the formula leaves out (:data:`EXTRA_TERMS`).

    A tensor is put in a term by the node that saved it: a LayerNorm's input and its mean
    and reciprocal deviation; a linear layer's input (``mat1``, or ``self`` for a layer
    without bias; under autocast its ``mat2`` is a copy of the weight in the lower
    precision; what an ``autograd.Function`` named ``...Linear`` saved); the attention
    products' operands (the probabilities' product with V saves the probabilities, which
    after dropout are the dropout's output); a dropout's mask (a multiplication by a scaled
    mask on a CPU, ``native_dropout``'s boolean mask on a GPU), 4-D inside attention; the
    fused attention's inputs, output and log-sum-exp."""
    terms = dict.fromkeys([*FORMULA_TERMS, *EXTRA_TERMS], 0)

    def add(term: str, t: Saved) -> None:
        terms[term] += t.nbytes

    saved = list(saved)
    bmm_steps = sorted({t.step for t in saved if t.node.startswith("BmmBackward")})

    for t in saved:
        node, attr = t.node.rstrip("0123456789"), t.attr
        if node == "NativeLayerNormBackward":
            add("LayerNorm inputs" if attr == "_saved_input" else "LayerNorm statistics", t)
        elif node.endswith("LinearBackward"):  # a linear layer written as an autograd.Function
            add("linear-layer inputs", t)
        elif node in ("AddmmBackward", "MmBackward"):
            add("linear-layer inputs" if attr in ("_saved_mat1", "_saved_self")
                else "weight copies (autocast)", t)
        elif node == "BmmBackward":  # q·kᵀ, then probabilities·v, in every layer
            second = bmm_steps.index(t.step) % 2 == 1
            add("attention dropout output" if second and attr == "_saved_self"
                else "Q, K and V", t)
        elif node in ("SoftmaxBackward", "SafeSoftmaxBackward"):  # the latter: SDPA's math path
            add("softmax output", t)
        elif node in ("MulBackward", "NativeDropoutBackward") and attr in ("_saved_other",
                                                                           "_saved_result1"):
            add("attention dropout mask" if len(t.shape) == 4 else
                "dropout masks after attention and MLP", t)
        elif node == "GeluBackward":
            add("GELU input", t)
        elif node == "MaskedFillBackward":
            add("causal mask", t)
        elif "Attention" in node:
            add("Q, K and V" if attr in ("_saved_query", "_saved_key", "_saved_value")
                else "fused attention's output and statistics", t)
        else:
            add("other", t)
    return terms


def recomputed_time(forward, keep: Iterable, seq: int, device="cpu",
                    steps: int = 3) -> dict[str, float]:
    """Where a forward pass's time goes, for a recomputation policy that saves the outputs
    of the operators ``keep`` (``torch.ops.aten.addmm.default``, ...) and recomputes the rest.

    Runs ``forward()`` once unmeasured and ``steps`` times under ``torch.profiler``, without
    autograd, and sums the operators' self time (CPU time on a CPU, their kernels' time on a
    GPU) per call, in seconds: ``kept`` (the operators of ``keep``), ``products`` (batched
    products, ``aten::bmm``: attention's QKᵀ and PV), ``square`` (the other operators with an
    input of shape (batch, heads, ``seq``, ``seq``): mask, softmax, dropout of the scores;
    activations of shape (batch, seq, d) never count, even where d equals seq) and ``rest``
    (building the mask included); and
    ``total``. What the policy recomputes is ``total - kept``."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    if steps < 1:
        raise ValueError(f"steps must be at least 1, not {steps}")
    device = torch.device(device)
    kept_names = {str(op._schema.name) if hasattr(op, "_schema") else str(op) for op in keep}
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with torch.no_grad():
        forward()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        with profile(activities=activities, record_shapes=True) as prof:
            for _ in range(steps):
                forward()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
    found = dict.fromkeys(("kept", "products", "square", "rest"), 0.0)
    for event in prof.events():
        if event.device_type != DeviceType.CPU or event.is_async:
            continue
        us = (event.self_device_time_total if device.type == "cuda"
              else event.self_cpu_time_total)
        if event.name in kept_names:
            kind = "kept"
        elif event.name == "aten::bmm":
            kind = "products"
        elif any(len(shape) >= 4 and tuple(shape[-2:]) == (seq, seq)
                 for shape in event.input_shapes or () if isinstance(shape, list)):
            kind = "square"
        else:
            kind = "rest"
        found[kind] += us / 1e6 / steps
    found["total"] = sum(found.values())
    return found
