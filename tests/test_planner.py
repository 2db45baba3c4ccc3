"""The planner (d2l_ext.planner): parameter counts of published models, Korthikanti et al.'s
activation formulas for every combination of tensor, sequence parallelism and recomputation,
ZeRO's bytes per parameter, the pipeline's in-flight micro-batches from the simulator, the
step time's parts, and clear refusals of splits that cannot run."""

import pytest

from d2l_ext import gpt_counts, memory_budget, planner

GPT3 = planner.Model(layers=96, hidden=12288, heads=96, vocab=50257, tied=True)
LLAMA3_8B = planner.Model(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336,
                          mlp="swiglu", vocab=128256)
LLAMA3_70B = planner.Model(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672,
                           mlp="swiglu", vocab=128256)
H100 = planner.Hardware("H100 SXM", peak=989.5e12, memory=80e9, intra=450e9, inter=50e9)


def test_parameter_counts_match_the_published_models():
    assert GPT3.parameters() / 1e9 == pytest.approx(174.6, abs=0.1)  # "175B"
    assert LLAMA3_8B.parameters() / 1e9 == pytest.approx(8.03, abs=0.01)
    assert LLAMA3_70B.parameters() / 1e9 == pytest.approx(70.55, abs=0.05)


@pytest.mark.parametrize("t", [1, 2, 8])
def test_activations_follow_korthikanti_table_2(t):
    """s·b·h·(10 + 24/t + 5as/(ht)) with TP; /t for all with SP; no attention term with
    selective recomputation; 2sbh (over t with SP) with full recomputation."""
    s, b, h, a = 2048, 1, 12288, 96
    m = planner.Model(layers=1, hidden=h, heads=a, vocab=8)
    sbh, att = s * b * h, 5 * a * s / h

    def act(**split):
        return planner.activation_bytes(m, planner.Split(tp=t, micro_batch=b, **split), s)

    assert act() == pytest.approx(sbh * (10 + 24 / t + att / t))
    assert act(sp=True) == pytest.approx(sbh / t * (34 + att))
    assert act(recompute="selective") == pytest.approx(sbh * (10 + 24 / t))
    assert act(sp=True, recompute="selective") == pytest.approx(sbh * 34 / t)
    assert act(recompute="full") == pytest.approx(2 * sbh)
    assert act(sp=True, recompute="full") == pytest.approx(2 * sbh / t)
    if t == 1:  # the book's own formula, from the transformers chapter
        assert act() == pytest.approx(gpt_counts.activation_bytes_per_layer(s, b, h, a))


def test_context_parallelism_divides_the_sequence_and_its_square():
    m = planner.Model(layers=1, hidden=1024, heads=16, vocab=8)
    whole = planner.activation_bytes(m, planner.Split(), 8192)
    halves = planner.activation_bytes(m, planner.Split(cp=2), 8192)
    sbh, att = 8192 * 1024, 5 * 16 * 8192 / 1024
    assert whole == pytest.approx(sbh * (34 + att))
    assert halves == pytest.approx(sbh / 2 * (34 + att / 2))


def test_flash_attention_no_dropout_and_swiglu_change_the_terms():
    s, h = 4096, 4096
    plain = planner.Model(layers=1, hidden=h, heads=32, vocab=8, dropout=False, flash=True)
    assert planner.activation_bytes(plain, planner.Split(), s) == pytest.approx(s * h * 32)
    llama = planner.Model(layers=1, hidden=h, heads=32, kv_heads=8, ffn=14336, mlp="swiglu",
                          vocab=8, dropout=False, flash=True)
    inner = 3 * 2 * 14336 / h  # gate, up and the down projection's input, 2 bytes each
    assert planner.activation_bytes(llama, planner.Split(), s) == pytest.approx(
        s * h * (8 + 4 + 4 * 8 / 32 + inner))


def test_weights_gradients_and_adam_take_16_bytes_split_by_zero():
    m = planner.Model(layers=4, hidden=512, heads=8, vocab=1000)
    n = m.parameters()
    assert planner.plan(m, planner.Split(), 128).memory["weights, gradients, optimizer"] == \
        pytest.approx(16 * n)
    for stage in (1, 2, 3):
        got = planner.plan(m, planner.Split(dp=8, zero=stage), 128).memory[
            "weights, gradients, optimizer"]
        assert got == pytest.approx(n * memory_budget.zero_bytes_per_parameter(stage, 8))
    tp = planner.plan(m, planner.Split(tp=4), 128).memory["weights, gradients, optimizer"]
    assert tp == pytest.approx(16 * n / 4)


@pytest.mark.parametrize("pp, m", [(2, 4), (4, 8), (4, 16)])
def test_a_stage_holds_what_its_schedule_keeps_in_flight(pp, m):
    model = planner.Model(layers=8, hidden=256, heads=4, vocab=100)
    one = planner.activation_bytes(model, planner.Split(), 64)
    for schedule, held in (("1f1b", pp), ("gpipe", m)):
        split = planner.Split(pp=pp, micro_batches=m, schedule=schedule)
        assert planner.in_flight(split) == held
        assert planner.plan(model, split, 64).memory["activations"] == pytest.approx(
            one * 8 / pp * held)


def test_the_step_time_adds_the_bubble_and_the_exposed_collectives():
    split = planner.Split(dp=8, tp=8, sp=True, pp=4, micro_batches=16, zero=1)
    p = planner.plan(GPT3, split, 2048, H100, efficiency=0.5)
    assert set(p.time) == {"compute", "pipeline bubble", "tensor-parallel collectives",
                           "data-parallel gradients (if not hidden)"}
    assert p.time["pipeline bubble"] / p.time["compute"] == pytest.approx(3 / 16)
    tokens = 16 * 2048
    assert p.time["compute"] == pytest.approx(
        GPT3.flops_per_token(2048) * tokens / 32 / (989.5e12 * 0.5))
    assert p.step_time == pytest.approx(sum(p.time.values()))
    alone = planner.plan(GPT3, planner.Split(), 2048)
    assert alone.time == {} and alone.total_memory > H100.memory
    assert not planner.fits(GPT3, planner.Split(), 2048, H100)


def test_splits_that_cannot_run_are_refused():
    m = planner.Model(layers=6, hidden=512, heads=8, vocab=100, experts=4, top_k=2)
    for split, words in ((planner.Split(tp=3), "tp (3) must divide the heads"),
                         (planner.Split(pp=4), "divide evenly among 4 pipeline chunks"),
                         (planner.Split(dp=3, ep=3), "ep (3) must divide the experts"),
                         (planner.Split(cp=3), "cp (3) must divide the sequence")):
        with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
            planner.plan(m, split, 64)
    with pytest.raises(ValueError, match="zero is a stage"):
        planner.Split(zero=4)
    with pytest.raises(ValueError, match="ep \\(2\\) must divide dp"):
        planner.Split(dp=3, ep=2)
    with pytest.raises(ValueError, match="top_k must be between"):
        planner.Model(layers=1, hidden=8, heads=2, vocab=8, experts=2, top_k=3)


@pytest.mark.parametrize("shape, split, seq, gib", [
    # the Ultra-Scale Playbook's memory plots (huggingface.co/spaces/nanotron/ultrascale-playbook,
    # assets/data/benchmarks/tp_memoryusage, tp_sp_memoryusage, cp_8Bmemoryusage; GiB)
    ((80, 8192, 64), dict(), 4096, 85.0),
    ((80, 8192, 64), dict(tp=8), 4096, 32.5),
    ((80, 8192, 64), dict(tp=16), 16384, 115.0),
    ((80, 8192, 64), dict(tp=8, sp=True), 4096, 10.625),
    ((80, 8192, 64), dict(tp=16, sp=True), 1024, 1.328125),
    ((32, 4096, 32), dict(tp=2), 4096, 11.0),
    ((32, 4096, 32), dict(tp=2, cp=4), 16384, 11.0),
])
def test_activations_reproduce_the_playbooks_memory_plots(shape, split, seq, gib):
    """The plots count 34·s·b·h per layer (no stored attention matrix), divided as TP, SP and
    CP divide it: the planner's GELU-MLP model with a fused attention gives the same."""
    layers, hidden, heads = shape
    model = planner.Model(layers=layers, hidden=hidden, heads=heads, vocab=128256, flash=True)
    got = planner.plan(model, planner.Split(**split), seq).memory["activations"]
    assert got / 2**30 == pytest.approx(gib)


def test_weights_reproduce_the_playbooks_bf16_parameters():
    """The plots' 131.41 GiB of bf16 parameters for Llama 3.1 70B (70.55e9 parameters)."""
    assert 2 * LLAMA3_70B.parameters() / 2**30 == pytest.approx(131.41, abs=0.01)
    assert 2 * LLAMA3_8B.parameters() / 2**30 == pytest.approx(14.957, abs=0.001)
