"""What MXNet 1.9.1's autograd keeps for one recorded GPT block (d2l_ext.transformer_mxnet),
term by term: each operator's gradient inputs, read from its FGradient registration, add up
to the storage counter's reading, byte for byte (the transformers page's reconciliation).
Runs in a fresh process: the counter must start before the first array."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

HELD_SCRIPT = textwrap.dedent("""
    import json
    from d2l_ext import mxnet_memory
    counter = mxnet_memory.StorageCounter()  # before any array
    from mxnet import autograd, init, np
    from d2l_ext import transformer_mxnet as txm

    def held(s, b, d, heads, part):
        block = txm.Block(d, heads, how="naive")
        block.initialize(init.Normal(0.02))
        x = np.random.normal(size=(b, s, d))
        x.attach_grad()
        forward = {"block": block, "attention": lambda t: t + block.attn(block.ln1(t)),
                   "mlp": lambda t: t + block.out(block.gelu(block.fc(block.ln2(t))))}[part]
        forward(x)  # as the page: parameters and temporary space exist before the reading
        before = counter.current()
        with autograd.record():
            out = forward(x)
        kept = counter.current() - before - out.size * 4
        out.backward()
        return kept

    sizes = [(64, 2, 64, 4), (32, 3, 48, 3)]
    print("RESULT" + json.dumps({f"{part} {size}": [list(size), held(*size, part)]
                                 for size in sizes for part in ("block", "attention", "mlp")}))
""")


def expected(part, s, b, h, a):
    """What MXNet 1.9.1 keeps, in bytes, by the FGradient of each recorded operator."""
    sbh = s * b * h
    stats = 2 * s * b * 4  # one LayerNorm's mean and std, float32 (not in the formula)
    attention = (4 * sbh            # LayerNorm 1's output: the QKV layer's input
                 + 3 * 4 * sbh      # q, swapaxes(k) and v: the two matmuls' inputs
                 + 4 * a * s * s * b  # the softmax's output
                 + s * s            # the causal condition, s×s booleans, kept by where
                 + 4 * sbh          # the projection's input
                 + 4 * sbh          # the projection's output: the residual add keeps it
                 + stats)
    mlp = (4 * sbh                  # LayerNorm 2's output: the first MLP layer's input
           + 16 * sbh + 16 * sbh    # GELU's input and output (the output is the last layer's input)
           + 4 * sbh                # the MLP's output: the residual add keeps it
           + stats)
    if part == "attention":
        return attention
    if part == "mlp":
        return mlp
    return attention + mlp + 4 * sbh  # the first add's output: LayerNorm 2's input


@pytest.fixture(scope="module")
def held():
    import numpy

    if tuple(int(p) for p in numpy.__version__.split(".")[:2]) >= (1, 24):
        pytest.skip("MXNet 1.9.1 needs numpy < 1.24")
    if importlib.util.find_spec("mxnet") is None:
        pytest.skip("MXNet is not installed")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # one copy of MXNet's temporary space: with the default four, used in turn, a copy can
    # grow during the recorded pass and count as held
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "MXNET_CPU_TEMP_COPY": "1"}
    done = subprocess.run([sys.executable, "-c", HELD_SCRIPT], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT"):])


def test_the_recorded_block_keeps_what_its_operators_gradients_need(held):
    from d2l_ext import gpt_counts

    for key, (size, nbytes) in held.items():
        part = key.split()[0]
        assert nbytes == expected(part, *size), key
        if part == "block":
            s, b, h, a = size
            formula = gpt_counts.formula_terms(s, b, h, a)
            float32_no_dropout = 2 * sum(v for t, v in formula.items() if "dropout" not in t)
            # the formula, less the block's input (it existed before the reading), plus the two
            # sublayers' outputs the residual adds keep, the causal condition and LN statistics
            assert nbytes == (float32_no_dropout - 4 * s * b * h + 8 * s * b * h + s * s
                              + 2 * 2 * s * b * 4)
