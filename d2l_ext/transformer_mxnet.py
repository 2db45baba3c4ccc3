"""The transformer block and attention of :mod:`d2l_ext.transformer`, in MXNet's ``np``.

The block is the same pre-norm block (LayerNorm, causal self-attention, LayerNorm, 4x MLP
with GELU), so :mod:`d2l_ext.gpt_counts` counts it too. Attention comes
two ways: ``naive`` (the s×s scores kept) and ``tiled`` (online softmax over key blocks);
MXNet has no fused attention function to compare with.
"""

from __future__ import annotations

import math

from mxnet import np, npx
from mxnet.gluon import nn

npx.set_np()


def _causal(scores, rows, cols, row0: int = 0, col0: int = 0):
    """``scores`` with the entries of keys after their query (top-left aligned) at -inf."""
    query = np.arange(row0, row0 + rows, ctx=scores.ctx).reshape(-1, 1)
    key = np.arange(col0, col0 + cols, ctx=scores.ctx).reshape(1, -1)
    return np.where(key > query, np.full(scores.shape, -np.inf, ctx=scores.ctx), scores)


def naive_attention(q, k, v, causal: bool = True):
    """Softmax(q kᵀ / √d) v over the last two axes, keeping the whole score matrix."""
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        scores = _causal(scores, q.shape[-2], k.shape[-2])
    return np.matmul(npx.softmax(scores, axis=-1), v)


def tiled_attention(q, k, v, causal: bool = True, block_q: int = 64, block_k: int = 64):
    """The same attention, one (block_q × block_k) tile of scores at a time, with a running
    maximum, a running sum of exponentials and an unnormalised output per query block (the
    online softmax); key blocks wholly after a query block are skipped when ``causal``."""
    if block_q < 1 or block_k < 1:
        raise ValueError(f"block sizes must be at least 1, got {block_q} and {block_k}")
    s_q, s_k, scale = q.shape[-2], k.shape[-2], 1 / math.sqrt(q.shape[-1])
    blocks = []
    for i in range(0, s_q, block_q):
        qi = q[..., i:i + block_q, :] * scale
        rows = qi.shape[-2]
        m = np.full((*qi.shape[:-1], 1), -np.inf, ctx=q.ctx)
        l = np.zeros_like(m)
        acc = np.zeros((*qi.shape[:-1], v.shape[-1]), ctx=q.ctx)
        last = min(s_k, i + rows) if causal else s_k
        for j in range(0, last, block_k):
            kj, vj = k[..., j:j + block_k, :], v[..., j:j + block_k, :]
            scores = np.matmul(qi, np.swapaxes(kj, -1, -2))
            if causal:
                scores = _causal(scores, rows, kj.shape[-2], i, j)
            m_new = np.maximum(m, scores.max(axis=-1, keepdims=True))
            p = np.exp(scores - m_new)
            correction = np.exp(m - m_new)
            l = l * correction + p.sum(axis=-1, keepdims=True)
            acc = acc * correction + np.matmul(p, vj)
            m = m_new
        blocks.append(acc / l)
    return np.concatenate(blocks, axis=-2)


class CausalSelfAttention(nn.Block):
    """Multi-head causal self-attention: one dense layer makes q, k and v, one projects back."""

    def __init__(self, d: int, heads: int, how: str = "naive") -> None:
        super().__init__()
        if d % heads:
            raise ValueError(f"the width d={d} must be a multiple of heads={heads}")
        if how not in ("naive", "tiled"):
            raise ValueError(f"attention is computed 'naive' or 'tiled' here, not {how!r}")
        self.heads, self.how = heads, how
        self.qkv = nn.Dense(3 * d, flatten=False, in_units=d)
        self.proj = nn.Dense(d, flatten=False, in_units=d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = (t.reshape(b, s, self.heads, d // self.heads).transpose(0, 2, 1, 3)
                   for t in np.split(self.qkv(x), 3, axis=-1))
        attend = naive_attention if self.how == "naive" else tiled_attention
        return self.proj(attend(q, k, v).transpose(0, 2, 1, 3).reshape(b, s, d))


class Block(nn.Block):
    """A pre-norm transformer block: x + attention(norm(x)), then + MLP(norm(·))."""

    def __init__(self, d: int, heads: int, how: str = "naive") -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(in_channels=d)
        self.attn = CausalSelfAttention(d, heads, how)
        self.ln2 = nn.LayerNorm(in_channels=d)
        self.fc = nn.Dense(4 * d, flatten=False, in_units=d)
        self.gelu = nn.GELU()
        self.out = nn.Dense(d, flatten=False, in_units=4 * d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(self.gelu(self.fc(self.ln2(x))))


class GPT(nn.Block):
    """Token and position embeddings, ``layers`` blocks, a final LayerNorm and an output
    layer that reuses the token embedding's weights (as :class:`d2l_ext.transformer.GPT`):
    ``forward(idx)`` returns the logits, shape (batch, seq, vocab)."""

    def __init__(self, vocab: int, seq: int, d: int, heads: int, layers: int,
                 how: str = "naive") -> None:
        super().__init__()
        for name, value in (("vocab", vocab), ("seq", seq), ("layers", layers)):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        self.seq = seq
        self.tokens = nn.Embedding(vocab, d)
        self.positions = nn.Embedding(seq, d)
        self.blocks = nn.Sequential()
        for _ in range(layers):
            self.blocks.add(Block(d, heads, how))
        self.ln = nn.LayerNorm(in_channels=d)

    def forward(self, idx):
        s = idx.shape[1]
        if s > self.seq:
            raise ValueError(f"a sequence of {s} tokens is longer than the model's "
                             f"seq={self.seq}: cut it or build the model with a larger seq")
        x = self.tokens(idx) + self.positions(np.arange(s, ctx=idx.ctx))
        x = self.ln(self.blocks(x))
        return np.dot(x, self.tokens.weight.data(idx.ctx).T)  # the tied output layer
