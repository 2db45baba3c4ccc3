"""The planner (d2l_ext.planner): parameter counts of published models, Korthikanti et al.'s
activation formulas for every combination of tensor, sequence parallelism and recomputation,
ZeRO's bytes per parameter, the pipeline's in-flight micro-batches from the simulator, the
step time's parts, and clear refusals of splits that cannot run."""

import numpy as np
import pytest

from d2l_ext import gpt_counts, memory_budget, planner, published_runs

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


def test_context_parallelism_divides_the_sequence_not_the_keys():
    """Each process keeps its s/cp tokens' activations and its s/cp queries' scores against
    all s keys."""
    m = planner.Model(layers=1, hidden=1024, heads=16, vocab=8)
    whole = planner.activation_bytes(m, planner.Split(), 8192)
    halves = planner.activation_bytes(m, planner.Split(cp=2), 8192)
    sbh, att = 8192 * 1024, 5 * 16 * 8192 / 1024
    assert whole == pytest.approx(sbh * (34 + att))
    assert halves == pytest.approx(sbh / 2 * (34 + att))


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
                           "data-parallel collectives (exposed)"}
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


@pytest.mark.parametrize("shape, split, seq, gib", published_runs.PLAYBOOK_ACTIVATIONS)
def test_activations_reproduce_the_playbooks_memory_plots(shape, split, seq, gib):
    """The plots count 34·s·b·h per layer (no stored attention matrix), divided as TP, SP and
    CP divide it: the planner's GELU-MLP model with a fused attention gives the same."""
    assert published_runs.playbook_activations_gib(shape, split, seq) == pytest.approx(gib)


def test_weights_reproduce_the_playbooks_bf16_parameters():
    """The plots' 131.41 GiB of bf16 parameters for Llama 3.1 70B (70.55e9 parameters)."""
    assert 2 * LLAMA3_70B.parameters() / 2**30 == pytest.approx(131.41, abs=0.01)
    assert 2 * LLAMA3_8B.parameters() / 2**30 == pytest.approx(14.957, abs=0.001)


def test_the_loss_holds_three_float32_tensors_of_logits_four_on_vocabulary_shards():
    m = planner.Model(layers=2, hidden=256, heads=4, vocab=1000)
    for split in (planner.Split(), planner.Split(tp=2, micro_batch=3), planner.Split(cp=4)):
        got = planner.plan(m, split, 64).memory["loss (float32 logits)"]
        per_logit = 16 if split.tp > 1 else 12
        assert got == per_logit * 64 / split.cp * split.micro_batch * 1000 / split.tp


def test_full_recomputation_keeps_inputs_and_rebuilds_one_layer_after_the_loss():
    """The layers keep their inputs; the layer rebuilt in the backward pass and the loss's
    logits are never held together, so the peak adds the larger of the two."""
    m = planner.Model(layers=8, hidden=256, heads=4, vocab=100)
    p = planner.plan(m, planner.Split(recompute="full"), 64)
    assert p.memory["activations"] == 8 * 2 * 64 * 256
    rebuilt = planner.activation_bytes(m, planner.Split(), 64)
    loss = p.memory["loss (float32 logits)"]
    assert rebuilt > loss and p.memory["recomputed layer, beyond the loss"] == rebuilt - loss
    wide = planner.Model(layers=8, hidden=256, heads=4, vocab=100_000)
    p = planner.plan(wide, planner.Split(recompute="full"), 64)
    assert p.memory["recomputed layer, beyond the loss"] == 0.0
    assert "recomputed layer, beyond the loss" not in planner.plan(m, planner.Split(), 64).memory


def test_data_parallel_collectives_hide_behind_the_arithmetic_they_overlap():
    """ZeRO 0–1: one all-reduce per step behind the last micro-batch's backward pass (2/3 of
    its arithmetic); ZeRO-2: a reduce-scatter behind every micro-batch's backward pass and
    the all-gather with the last; ZeRO-3: per micro-batch and layer two gathers and a
    reduce-scatter behind that micro-batch's arithmetic. A ring of k: (k − 1)α and
    (k − 1)/k of the bytes for a reduce-scatter or an all-gather."""
    slow = planner.Hardware("slow link", peak=1e12, memory=1e12, intra=1e6, inter=1e6)
    fast = planner.Hardware("fast link", peak=1e12, memory=1e12, intra=1e15, inter=1e15)
    m = planner.Model(layers=2, hidden=256, heads=4, vocab=100)
    n = m.parameters()
    half = 3 * slow.alpha + n * 2 * 3 / 4 / 1e6  # 4 replicas, 16-bit weights
    for zero in (0, 1, 2, 3):
        split = planner.Split(dp=4, zero=zero, micro_batches=2)
        p = planner.plan(m, split, 64, slow, 0.5)
        compute = p.time["compute"]
        backward = compute / 3  # one of two micro-batches: 2/3 of half the arithmetic
        want = {0: max(0, 2 * half - backward), 1: max(0, 2 * half - backward),
                2: max(0, half - backward) + max(0, 2 * half - backward),
                3: 2 * max(0, 3 * (half + (2 - 1) * 3 * slow.alpha) - compute / 2)}[zero]
        assert p.time["data-parallel collectives (exposed)"] == pytest.approx(want)
        assert planner.plan(m, split, 64, fast, 0.5).time[
            "data-parallel collectives (exposed)"] == 0.0
        assert planner.data_parallel_exposed(n, 0, split, slow, 0.0, 2) == pytest.approx(
            {0: 2, 1: 2, 2: 3, 3: 2 * 3}[zero] * half
            + (2 * 3 * 3 * slow.alpha if zero == 3 else 0))


def test_the_replicas_link_follows_where_their_ranks_sit():
    """Ranks go tensor-parallel first, then context-parallel, then data-parallel: replicas
    share a node while tp·cp·dp fits in it, however many stages there are."""
    in_node = planner.Split(dp=2, tp=2, cp=2, pp=8)
    across = planner.Split(dp=4, tp=2, cp=2, pp=2)
    for split, link in ((in_node, H100.intra), (across, H100.inter)):
        got = planner.data_parallel_exposed(1e9, 0, split, H100, 0.0, 1)
        k = split.dp * split.cp
        assert got == pytest.approx(2 * (k - 1) * H100.alpha + 1e9 * 4 * (k - 1) / k / link)


def test_expert_state_is_sharded_over_the_replicas_that_share_each_expert():
    """With ep taken from dp, each expert has dp·cp/ep replicas to shard its state over."""
    moe = planner.Model(layers=2, hidden=256, heads=4, vocab=100, experts=8, top_k=2)
    split = planner.Split(dp=8, ep=8, zero=1)
    dense = 2 * moe.attention_parameters() + moe.embedding_parameters()
    experts = 2 * moe.expert_parameters()  # 8 experts over 8 processes: one each
    want = (dense * memory_budget.zero_bytes_per_parameter(1, 8)
            + experts * memory_budget.zero_bytes_per_parameter(1, 1))
    assert planner.plan(moe, split, 64).memory["weights, gradients, optimizer"] == \
        pytest.approx(want)
    assert planner.data_parallel_exposed(dense, experts, split, H100, 0.0, 2) == \
        pytest.approx(14 * H100.alpha + dense * 4 * 7 / 8 / H100.intra)


def test_tensor_parallel_collectives_are_rings_and_replay_under_full_recomputation():
    split = planner.Split(tp=4)
    one = 6 * H100.alpha + 2 * 3 / 4 * (2 * 1024 * 4096 * 2) / H100.intra
    assert planner.tensor_parallel_seconds(LLAMA3_8B, split, 2048, H100) == pytest.approx(
        4 * one)
    assert planner.tensor_parallel_seconds(
        LLAMA3_8B, planner.Split(tp=4, recompute="full"), 2048, H100) == pytest.approx(6 * one)


def test_inputs_that_cannot_describe_a_run_are_refused():
    for fields, words in ((dict(kv_heads=3), "must divide the heads"),
                          (dict(ffn=-1), "ffn must be a whole number, 0 or more"),
                          (dict(layers=2.5), "layers must be a whole number")):
        with pytest.raises(ValueError, match=words):
            planner.Model(**dict(dict(layers=2, hidden=64, heads=4, vocab=10), **fields))
    with pytest.raises(ValueError, match="dp must be a whole number"):
        planner.Split(dp=2.5)
    with pytest.raises(ValueError, match="zero is a stage"):
        planner.Split(zero=True)
    assert planner.Split(dp=np.int64(2)).dp == 2  # any whole number will do
    # a NumPy int32 is kept as a Python int: the counts made from it cannot overflow
    wide = dict(layers=96, hidden=12288, heads=96, vocab=50257)
    in_int32 = planner.Model(**{k: np.int32(v) for k, v in wide.items()})
    assert type(in_int32.hidden) is int and type(planner.Split(tp=np.int32(8)).tp) is int
    assert in_int32.parameters() == planner.Model(**wide).parameters() > 2**31
    for bad in (dict(peak=0), dict(memory=float("nan")), dict(inter=float("nan"))):
        with pytest.raises(ValueError, match="above 0"):
            planner.Hardware("none", **dict(dict(peak=1, memory=1, intra=1, inter=1), **bad))
    with pytest.raises(ValueError, match="per_node"):
        planner.Hardware("none", peak=1, memory=1, intra=1, inter=1, per_node=0)
    # chunks count only for an interleaved schedule
    planner.plan(planner.Model(layers=4, hidden=64, heads=4, vocab=10),
                 planner.Split(pp=2, chunks=3, micro_batches=2), 64)
    with pytest.raises(ValueError, match="the planner models the schedules"):
        planner.Split(pp=4, micro_batches=8, schedule="zero-bubble")
    m = planner.Model(layers=2, hidden=64, heads=4, vocab=10)
    with pytest.raises(ValueError, match="at least 1"):
        planner.plan(m, planner.Split(), 0)
    for bad in (0, -0.5, 1.5):
        with pytest.raises(ValueError, match="efficiency"):
            planner.plan(m, planner.Split(), 64, H100, bad)


def test_the_context_parallel_ring_hides_behind_attention_on_fast_links():
    m = planner.Model(layers=2, hidden=1024, heads=8, kv_heads=2, vocab=100)
    split = planner.Split(cp=4)
    slow = planner.Hardware("slow", peak=1e15, memory=1e12, intra=1e6, inter=1e6, alpha=0)
    kv = 2 * 1 * 2048 * 1024 * 2 / 8 * 2  # keys and values of one shard, bf16
    attention = 12 * 8192 * 1024 * 2048 / (1e15 * 0.5)
    assert planner.context_parallel_exposed(m, split, 8192, slow, 0.5) == pytest.approx(
        3 * 3 * kv / 1e6 - attention)
    assert planner.context_parallel_exposed(m, split, 8192, H100, 0.5) == 0.0


def test_tokens_per_gpu_second_counts_every_replica():
    split = planner.Split(dp=4, tp=2, micro_batch=2, micro_batches=3)
    p = planner.Plan(time={"compute": 2.0})
    assert planner.tokens_per_gpu_second(split, 100, p) == 2 * 3 * 100 * 4 / 8 / 2.0


def test_search_returns_splits_that_fit_fastest_first():
    found = planner.search(LLAMA3_8B, 16, 4096, 32, H100)
    assert found and all(p.total_memory <= H100.memory for _, p in found)
    times = [p.step_time for _, p in found]
    assert times == sorted(times)
    for split, _ in found:
        assert split.gpus == 16 and 32 % split.dp == 0 and split.tp <= 8
        assert split.micro_batches * split.dp == 32
    assert planner.search(LLAMA3_70B, 1, 4096, 1, H100) == []
    with pytest.raises(ValueError, match="at least 1"):
        planner.search(LLAMA3_8B, 0, 4096, 1, H100)
    roomy = planner.search(LLAMA3_8B, 16, 4096, 32, H100, headroom=0.3)
    assert 0 < len(roomy) < len(found)
    assert all(p.total_memory <= 0.7 * H100.memory for _, p in roomy)
    one = planner.search(LLAMA3_8B, 8, 4096, 1, H100)  # dp·cp = 1: ZeRO has nothing to shard
    assert all(s.zero == 0 for s, _ in one if s.dp * s.cp == 1)


def test_hardware_presets_come_from_the_datasheets():
    h100 = planner.HARDWARE["H100 SXM"]
    assert h100.peak == 989.5e12 and h100.intra == 450e9 and h100.inter == 50e9
    assert planner.HARDWARE["A100 SXM 80GB"].peak == 312e12
    assert planner.HARDWARE["H200 SXM"].memory == 141e9


def test_published_runs_recover_their_own_efficiency():
    run = published_runs.RUNS[0]
    e = published_runs.calibrated_efficiency(run, H100)
    p = planner.plan(run.model, run.split, run.seq, H100, e)
    assert planner.tokens_per_gpu_second(run.split, run.seq, p) == pytest.approx(
        run.tokens_per_second, rel=1e-6)
    assert published_runs.LLAMA31_8B.parameters() == LLAMA3_8B.parameters()
    for r in published_runs.RUNS:  # every published split is one the planner accepts
        assert r.split.gpus in (8, 128, 256)
        planner.plan(r.model, r.split, r.seq, H100)


@pytest.mark.parametrize("stages", [2, 3, 4, 5, 8])
def test_the_calculator_s_closed_forms_match_the_simulated_schedules(stages):
    """planner.js computes in closed form what plan() simulates: the idle share
    (p − 1)/(v·m + p − 1) and the micro-batches the busiest stage holds: GPipe m, 1F1B
    min(p, m), interleaved ⌈min(v·m, (v + 1)·p − 1)/v⌉."""
    for m in (1, 2, 3, stages, 2 * stages, 4 * stages, 8 * stages):
        for schedule in ("gpipe", "1f1b"):
            split = planner.Split(pp=stages, micro_batches=m, schedule=schedule)
            assert planner.in_flight(split) == (m if schedule == "gpipe" else min(stages, m))
            assert planner.bubble(split) == pytest.approx((stages - 1) / (m + stages - 1))
        for v in (1, 2, 3, 4):
            if m % stages:
                continue
            split = planner.Split(pp=stages, micro_batches=m, schedule="interleaved", chunks=v)
            assert planner.in_flight(split) == -(-min(v * m, (v + 1) * stages - 1) // v)
            assert planner.bubble(split) == pytest.approx((stages - 1) / (v * m + stages - 1))
