"""d2l_ext.transformer: the GPT, its counts, and attention computed three ways."""

from __future__ import annotations

import threading

import pytest
import torch
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

from d2l_ext import gpt_counts
from d2l_ext import transformer as tf
from d2l_ext.memory import SavedTensors


def qkv(b=2, h=3, s=37, d=16, s_k=None, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    s_k = s if s_k is None else s_k
    return (torch.randn(b, h, s, d, generator=g).to(dtype),
            torch.randn(b, h, s_k, d, generator=g).to(dtype),
            torch.randn(b, h, s_k, d, generator=g).to(dtype))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("blocks", [(64, 64), (1, 1), (5, 7), (16, 3), (100, 100)])
def test_tiled_equals_naive_and_sdpa(causal, blocks):
    q, k, v = qkv()
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(tf.naive_attention(q, k, v, causal), expected)
    torch.testing.assert_close(tf.tiled_attention(q, k, v, causal, *blocks), expected)


@pytest.mark.parametrize("s_k", [5, 50])
def test_causal_masks_agree_with_sdpa_when_lengths_differ(s_k):
    q, k, v = qkv(s=20, s_k=s_k)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(tf.naive_attention(q, k, v), expected)
    torch.testing.assert_close(tf.tiled_attention(q, k, v, block_q=6, block_k=4), expected)


def test_tiled_bfloat16_keeps_float32_sums():
    q, k, v = qkv(s=200, dtype=torch.bfloat16)
    out = tf.tiled_attention(q, k, v, block_q=32, block_k=32)
    assert out.dtype == torch.bfloat16
    reference = tf.naive_attention(q.float(), k.float(), v.float())
    assert (out.float() - reference).abs().max() < 2e-2


def test_tiled_attention_has_gradients_equal_to_naive():
    q, k, v = (t.requires_grad_() for t in qkv(s=19))
    tf.tiled_attention(q, k, v, block_q=4, block_k=8).square().sum().backward()
    tiled = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    tf.naive_attention(q, k, v).square().sum().backward()
    for got, want in zip(tiled, (q.grad, k.grad, v.grad)):
        torch.testing.assert_close(got, want)


def test_attention_refuses_unknown_ways_and_blocks():
    q, k, v = qkv(s=4)
    with pytest.raises(ValueError, match="'naive', 'tiled' or 'sdpa'"):
        tf.attention(q, k, v, "flash")
    with pytest.raises(ValueError, match="at least 1"):
        tf.tiled_attention(q, k, v, block_q=0)


@pytest.mark.parametrize("cfg", [tf.GPTConfig(), tf.GPTConfig(vocab=11, seq=7, d=12, heads=3,
                                                                layers=3)])
def test_parameter_count_matches_the_module(cfg):
    model = tf.GPT(cfg)
    assert sum(p.numel() for p in model.parameters()) == tf.parameter_count(cfg)
    embeddings = model.tokens.weight.numel() + model.positions.weight.numel()
    assert tf.parameter_count(cfg, embeddings=False) == tf.parameter_count(cfg) - embeddings


def counted_flops(model, idx):
    with FlopCounterMode(display=False) as counter:
        _, loss = model(idx, idx)
        loss.backward()
    return counter.get_total_flops()


def test_training_flops_match_pytorchs_counter():
    cfg = tf.GPTConfig(vocab=50, seq=24, d=32, heads=4, layers=2)
    idx = torch.randint(0, cfg.vocab, (3, cfg.seq))
    flops = counted_flops(tf.GPT(cfg, "naive"), idx)
    assert flops == 3 * cfg.seq * tf.training_flops_per_token(cfg)


def test_pytorchs_counter_misses_sdpa_on_a_cpu():
    """The CPU kernel of scaled_dot_product_attention has no entry in the counter's registry
    (torch/utils/flop_counter.py), so the attention term is missing from its total."""
    cfg = tf.GPTConfig(vocab=50, seq=24, d=32, heads=4, layers=2)
    idx = torch.randint(0, cfg.vocab, (3, cfg.seq))
    flops = counted_flops(tf.GPT(cfg, "sdpa"), idx)
    attention_term = 12 * cfg.layers * cfg.seq * cfg.d
    assert flops == 3 * cfg.seq * (tf.training_flops_per_token(cfg) - attention_term)


def test_the_three_attentions_give_the_same_model_output():
    cfg = tf.GPTConfig(vocab=20, seq=33, d=24, heads=2, layers=2)
    torch.manual_seed(0)
    models = {how: tf.GPT(cfg, how) for how in ("naive", "tiled", "sdpa")}
    state = models["sdpa"].state_dict()
    for m in models.values():
        m.load_state_dict(state)
    idx = torch.randint(0, cfg.vocab, (2, 30))
    out = {how: m(idx) for how, m in models.items()}
    torch.testing.assert_close(out["naive"], out["sdpa"])
    torch.testing.assert_close(out["tiled"], out["sdpa"])


def test_the_model_refuses_long_sequences_and_bad_configs():
    model = tf.GPT(tf.GPTConfig(seq=8, d=8, heads=2, layers=1, vocab=5))
    with pytest.raises(ValueError, match="longer than the model's seq=8"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="multiple of heads"):
        tf.GPTConfig(d=10, heads=3)
    with pytest.raises(ValueError, match="at least 1"):
        tf.GPTConfig(layers=0)
    with pytest.raises(ValueError, match="dropout"):
        tf.GPTConfig(dropout=1.0)


def test_korthikanti_formula_and_its_parts():
    s, b, h, a = 2048, 1, 4096, 32
    # 34·s·b·h from the layer's linear parts, 5·a·s²·b from attention's scores and masks
    assert tf.activation_bytes_per_layer(s, b, h, a) == 34 * s * b * h + 5 * a * s * s * b
    assert tf.activation_bytes_per_layer(2 * s, b, h, a) > 2 * tf.activation_bytes_per_layer(
        s, b, h, a)


def test_attention_traffic_tiled_is_linear_in_s_for_a_fixed_block_count():
    d = 64
    naive = [tf.attention_traffic(s, d) for s in (512, 1024)]
    assert naive[1] > 3.7 * naive[0]  # the s² terms dominate
    # one query block: q, k, v read once, the output written once
    assert tf.attention_traffic(512, d, block_q=512) == 2 * 4 * 512 * d
    assert tf.attention_traffic(512, d, block_q=64) < naive[0]
    with pytest.raises(ValueError):
        tf.attention_traffic(512, d, block_q=0)
    for bad in ({"s": -5, "d": d}, {"s": 512, "d": 0}, {"s": 512, "d": d, "item": 0}):
        with pytest.raises(ValueError, match="must be at least 1"):
            tf.attention_traffic(**bad)
        with pytest.raises(ValueError, match="must be at least 1"):
            gpt_counts.causal_attention_traffic(**bad, block_q=64, block_k=64)
    for bad in ({"s": 2.5, "d": d}, {"s": float("nan"), "d": d},
                {"s": 512, "d": d, "block_q": 1e9}):
        with pytest.raises(TypeError, match="whole number"):
            tf.attention_traffic(**bad)


def test_tiled_attention_in_threads():
    q, k, v = qkv(s=40)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    results = [None] * 4

    def work(i):
        results[i] = tf.tiled_attention(q, k, v, block_q=8 + i, block_k=5 + i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        torch.testing.assert_close(r, expected)


def saved_both_ways(block, x):
    with SavedTensors(exclude=[block, x]) as hooks:
        y = block(x)
    return tf.saved_by_node(y, exclude=[block, x]), hooks


@pytest.mark.parametrize("how", ["naive", "sdpa"])
@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_saved_by_node_agrees_with_the_saved_tensor_hooks(how, dropout):
    cfg = tf.GPTConfig(seq=16, d=32, heads=4, layers=1, dropout=dropout)
    block = tf.Block(cfg, how)
    x = torch.randn(2, 16, 32, requires_grad=True)
    saved, hooks = saved_both_ways(block, x)
    # 0-d tensors (a Python number in a division) are saved without passing the hooks
    assert sum(s.nbytes for s in saved if s.shape) == hooks.nbytes
    assert all(s.nbytes == 0 for s in saved if s.attr in ("_saved_weight", "_saved_bias"))
    assert not any(s.node == "NativeLayerNormBackward0" and s.attr == "_saved_input"
                   and s.nbytes for s in saved[:5])  # the block's input x is excluded


def test_saved_by_node_counts_a_storage_once_and_halves_in_bfloat16():
    cfg = tf.GPTConfig(seq=16, d=32, heads=4, layers=1)
    block = tf.Block(cfg, "naive")
    x = torch.randn(2, 16, 32, requires_grad=True)
    saved32, _ = saved_both_ways(block, x)
    # the second product saves the softmax's result again: a view of a counted storage
    softmax = [s for s in saved32 if s.node == "SoftmaxBackward0"][0]
    again = [s for s in saved32 if s.node == "BmmBackward0" and s.shape[-1] == 16]
    assert softmax.nbytes == 2 * 4 * 16 * 16 * 4 and again and again[-1].nbytes == 0
    block16, x16 = block.to(torch.bfloat16), x.detach().bfloat16().requires_grad_()
    saved16, _ = saved_both_ways(block16, x16)
    float_bytes = sum(s.nbytes for s in saved32 if s.dtype == torch.float32)
    assert sum(s.nbytes for s in saved16 if s.dtype == torch.bfloat16) == float_bytes // 2


def test_dropout_saves_its_masks_and_tiled_refuses_it():
    cfg = tf.GPTConfig(seq=16, d=32, heads=4, layers=1, dropout=0.1)
    x = torch.randn(2, 16, 32, requires_grad=True)
    with_dropout, _ = saved_both_ways(tf.Block(cfg, "naive"), x)
    without, _ = saved_both_ways(tf.Block(cfg, "naive").eval(), x)
    masks = sum(s.nbytes for s in with_dropout) - sum(s.nbytes for s in without)
    # two masks the size of the block's output (after each residual branch); on the
    # attention probabilities, a mask and the dropped-out probabilities the product saves
    assert masks == (2 * (2 * 16 * 32) + 2 * (2 * 4 * 16 * 16)) * 4
    with pytest.raises(ValueError, match="no dropout"):
        tf.Block(cfg, "tiled")(x)
    tf.Block(cfg, "tiled").eval()(x)  # no dropout in evaluation


def _block_terms(dtype=None, dropout=0.0, s=32, b=2, h=32, a=4, how="naive"):
    torch.manual_seed(0)
    block = tf.Block(tf.GPTConfig(seq=s, d=h, heads=a, layers=1, dropout=dropout), how=how)
    x = torch.randn(b, s, h, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype is not None):
        with SavedTensors(exclude=[block]) as saved:
            out = block(x)
    return tf.saved_terms(tf.saved_by_node(out, exclude=[block])), saved.nbytes


def test_saved_terms_in_float32_are_twice_the_16_bit_formula():
    s, b, h, a = 32, 2, 32, 4
    terms, hooked = _block_terms(s=s, b=b, h=h, a=a)
    formula = tf.formula_terms(s, b, h, a)
    for term in ("LayerNorm inputs", "linear-layer inputs", "Q, K and V", "GELU input",
                 "softmax output"):
        assert terms[term] == 2 * formula[term], term
    assert terms["attention dropout mask"] == terms["attention dropout output"] == 0
    assert terms["causal mask"] == s * s  # booleans, one matrix for every head and sequence
    assert terms["LayerNorm statistics"] == 2 * 2 * s * b * 4  # mean and rstd, two norms
    # the only difference: the wrapped Python number √d of the division, which autograd saves
    # without calling the hooks (torch/csrc/autograd/saved_variable.cpp)
    assert sum(terms.values()) - hooked == terms["other"] == 8


def test_saved_terms_put_cpu_dropout_masks_and_autocast_copies_where_they_belong():
    s, b, h, a = 32, 2, 32, 4
    terms, hooked = _block_terms(torch.bfloat16, 0.1, s, b, h, a)
    formula = tf.formula_terms(s, b, h, a)
    # a CPU's dropout multiplies by a scaled mask of the activations' type: 2 bytes, not 1
    assert terms["attention dropout mask"] == 2 * formula["attention dropout mask"]
    assert terms["dropout masks after attention and MLP"] == 2 * formula[
        "dropout masks after attention and MLP"]
    assert terms["attention dropout output"] == formula["attention dropout output"]
    assert terms["LayerNorm inputs"] == 2 * formula["LayerNorm inputs"]  # float32 residuals
    assert terms["weight copies (autocast)"] == 12 * h * h * 2  # the four weights in bf16
    assert sum(terms.values()) - hooked == terms["other"] == 8


def test_saved_terms_of_the_fused_attention_have_no_quadratic_term():
    terms, hooked = _block_terms(s=64, how="sdpa")
    assert terms["softmax output"] == terms["causal mask"] == 0
    assert terms["fused attention's output and statistics"] > 0
    assert sum(terms.values()) == hooked


def test_saved_terms_file_the_math_paths_safe_softmax_under_softmax():
    """With dropout on a CPU, scaled_dot_product_attention takes its math path, whose softmax
    node is SafeSoftmaxBackward: its output is the softmax's, not "other"."""
    terms, _ = _block_terms(dropout=0.1, s=32, how="sdpa")
    assert terms["softmax output"] > 0 and terms["other"] < 100


def test_recomputed_time_sorts_a_forward_pass_by_what_a_policy_keeps():
    """Linear layers' products are kept; a softmax over s × s scores is ``square``; a batched
    product is ``products``; what is left is ``rest``; the kinds add up to the total."""
    from d2l_ext import transformer as tx

    torch.manual_seed(0)
    s, d = 48, 16
    x, w = torch.randn(3, s, d), torch.randn(d, d)

    def forward():
        h = torch.nn.functional.linear(x, w, torch.zeros(d))  # addmm on a 2-D view
        scores = torch.bmm(h, h.transpose(1, 2)).view(3, 1, s, s)  # (batch, heads, s, s)
        return torch.bmm(scores.softmax(-1).view(3, s, s), h) + 1.0

    shares = tx.recomputed_time(forward, {torch.ops.aten.addmm.default,
                                          torch.ops.aten.mm.default}, s, steps=2)
    assert set(shares) == {"kept", "products", "square", "rest", "total"}
    assert shares["kept"] > 0 and shares["products"] > 0 and shares["square"] > 0
    assert shares["rest"] > 0
    assert shares["total"] == pytest.approx(sum(v for k, v in shares.items() if k != "total"))
    wide = torch.randn(2, s, s)  # activations as wide as the sequence is long: not scores
    assert tx.recomputed_time(lambda: wide + wide, (), s, steps=1)["square"] == 0
    nothing_kept = tx.recomputed_time(forward, (), s, steps=1)
    assert nothing_kept["kept"] == 0
    with pytest.raises(ValueError, match="at least 1"):
        tx.recomputed_time(forward, (), s, steps=0)
