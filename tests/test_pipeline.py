"""The pipeline-schedule simulator (d2l_ext.pipeline): every schedule runs each operation once,
in an order the dependencies allow; the bubble equals (p − 1)/(m + p − 1) for GPipe and 1F1B
and (p − 1)/(v·m + p − 1) interleaved; 1F1B holds p − s micro-batches where GPipe holds m;
splitting the backward and deferring weight gradients trades memory for a smaller bubble."""

import itertools

import pytest

from d2l_ext import pipeline as pp

SIZES = [(1, 1), (1, 5), (2, 1), (2, 6), (3, 3), (4, 4), (4, 8), (4, 11), (8, 16), (5, 2)]


def _ops_per_stage(orders, micros, chunks=1, kinds=("F", "B")):
    expected = {pp.Op(k, i, c) for k in kinds for i in range(micros) for c in range(chunks)}
    return all(set(order) == expected and len(order) == len(expected) for order in orders)


@pytest.mark.parametrize("stages, micros", SIZES)
@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
@pytest.mark.parametrize("f, b", [(1.0, 1.0), (1.0, 2.0), (0.3, 0.7)])
def test_gpipe_and_1f1b_bubbles_follow_the_formula(name, stages, micros, f, b):
    orders = pp.schedule(name, stages, micros)
    assert _ops_per_stage(orders, micros)
    timeline = pp.simulate(orders, pp.Costs(f, b))
    assert pp.makespan(timeline) == pytest.approx((micros + stages - 1) * (f + b))
    assert pp.bubble(timeline) == pytest.approx(pp.bubble_formula(stages, micros))


@pytest.mark.parametrize("stages, micros", SIZES)
def test_1f1b_holds_p_minus_s_micro_batches_and_gpipe_all_of_them(stages, micros):
    one = pp.in_flight(pp.simulate(pp.one_f_one_b(stages, micros)))
    assert one == {s: min(stages - s, micros) for s in range(stages)}
    assert pp.in_flight(pp.simulate(pp.gpipe(stages, micros))) == dict.fromkeys(
        range(stages), micros)


@pytest.mark.parametrize("stages, micros, chunks",
                         [(2, 2, 2), (2, 6, 3), (4, 4, 2), (4, 8, 2), (4, 16, 4), (3, 9, 2)])
def test_interleaving_divides_the_bubble_by_the_chunks(stages, micros, chunks):
    orders = pp.interleaved(stages, micros, chunks)
    assert _ops_per_stage(orders, micros, chunks)
    costs = pp.Costs(1.0 / chunks, 2.0 / chunks)  # a chunk holds 1/v of the stage's layers
    timeline = pp.simulate(orders, costs, chunks=chunks)
    assert pp.bubble(timeline) == pytest.approx(pp.bubble_formula(stages, micros, chunks))
    # the same work as 1F1B, in less time, holding more chunk-activations on the first stage
    plain = pp.simulate(pp.one_f_one_b(stages, micros), pp.Costs(1.0, 2.0))
    assert pp.makespan(timeline) < pp.makespan(plain) or stages == 1
    assert pp.in_flight(timeline)[0] / chunks >= pp.in_flight(plain)[0]


def test_interleaving_needs_whole_groups_of_micro_batches():
    with pytest.raises(ValueError, match="multiple of the stages"):
        pp.interleaved(4, 6, 2)


@pytest.mark.parametrize("stages, micros", [(2, 4), (4, 4), (4, 8), (8, 16), (3, 7)])
def test_deferring_weight_gradients_trades_memory_for_bubble(stages, micros):
    """F = B = W = 1. No deferral: 1F1B with a split backward, (p − 1)(F + B) idle per stage;
    no limit: (p − 1)(F + B − W); each deferral in between helps, and holds more."""
    costs = pp.Costs(1.0, 1.0, 1.0)
    work = micros * 3.0
    spans, held = [], []
    for deferred in [0, *range(1, stages), None]:
        orders = pp.zero_bubble(stages, micros, costs, deferred=deferred)
        assert _ops_per_stage(orders, micros, kinds=("F", "B", "W"))
        timeline = pp.simulate(orders, costs)
        spans.append(pp.makespan(timeline))
        held.append(pp.in_flight(timeline)[0])
    split = pp.simulate(pp.one_f_one_b(stages, micros, split=True), costs)
    assert spans[0] == pp.makespan(split) == work + (stages - 1) * 2
    assert pp.in_flight(split)[0] == held[0] == min(stages, micros)
    assert spans[-1] == work + (stages - 1) * 1
    assert all(a >= b for a, b in itertools.pairwise(spans))
    assert all(a <= b for a, b in itertools.pairwise(held))
    assert spans[stages - 1] == spans[-1]  # p − 1 deferred weight gradients suffice here


def test_the_unsplit_backward_costs_more_than_the_split_one():
    """1F1B whose B includes W (B = 2) against B and W apart (1 + 1): the stage before waits
    only for B, so the split schedule ends (p − 1)·W sooner."""
    whole = pp.simulate(pp.one_f_one_b(4, 8), pp.Costs(1.0, 2.0))
    split = pp.simulate(pp.one_f_one_b(4, 8, split=True), pp.Costs(1.0, 1.0, 1.0))
    assert pp.makespan(whole) - pp.makespan(split) == pytest.approx(3.0)


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_sending_adds_one_delay_per_hop_each_way(name):
    quiet = pp.makespan(pp.simulate(pp.schedule(name, 4, 8), pp.Costs(1.0, 2.0)))
    loud = pp.makespan(pp.simulate(pp.schedule(name, 4, 8), pp.Costs(1.0, 2.0, send=0.25)))
    assert loud - quiet >= 2 * 3 * 0.25 - 1e-9  # at least (p − 1) hops forward and back


def test_simulate_refuses_orders_it_cannot_run():
    with pytest.raises(ValueError, match="deadlocks"):
        pp.simulate([[pp.Op("B", 0), pp.Op("F", 0)], [pp.Op("F", 0), pp.Op("B", 0)]])
    with pytest.raises(ValueError, match="which no stage runs"):
        pp.simulate([[pp.Op("F", 0), pp.Op("B", 0)], [pp.Op("B", 0)]])
    with pytest.raises(ValueError, match="unknown kind 'X'"):
        pp.simulate([[pp.Op("X", 0)]])
    with pytest.raises(ValueError, match="twice"):
        pp.simulate([[pp.Op("F", 0), pp.Op("F", 0)]])
    with pytest.raises(ValueError, match="no stages"):
        pp.simulate([])


def test_bad_sizes_and_names_are_refused():
    with pytest.raises(ValueError, match="at least 1"):
        pp.gpipe(0, 4)
    with pytest.raises(ValueError, match="at least 1"):
        pp.bubble_formula(4, 0)
    with pytest.raises(ValueError, match="one of gpipe, 1f1b, interleaved, zero-bubble"):
        pp.schedule("dualpipe", 4, 8)
    with pytest.raises(ValueError, match="must take time"):
        pp.zero_bubble(4, 8, pp.Costs(1.0, 2.0))
    with pytest.raises(ValueError, match="at least 0"):
        pp.zero_bubble(4, 8, deferred=-1)


def test_each_stage_runs_one_operation_at_a_time_after_its_inputs():
    costs = pp.Costs(1.0, 1.0, 1.0, send=0.1)
    timeline = pp.simulate(pp.zero_bubble(4, 8, costs, deferred=2), costs)
    by_stage = {}
    for i in timeline:
        by_stage.setdefault(i.stage, []).append(i)
    for intervals in by_stage.values():
        intervals.sort(key=lambda i: i.start)
        assert all(a.end <= b.start + 1e-12 for a, b in itertools.pairwise(intervals))
    end = {(i.stage, i.op): i.end for i in timeline}
    for i in timeline:
        if i.op.kind == "F" and i.stage > 0:
            assert i.start >= end[(i.stage - 1, i.op)] + 0.1 - 1e-12
        if i.op.kind == "B" and i.stage < 3:
            assert i.start >= end[(i.stage + 1, i.op)] + 0.1 - 1e-12
        if i.op.kind == "W":
            assert i.start >= end[(i.stage, pp.Op("B", i.op.micro))]


@pytest.mark.parametrize("stages, micros", [(2, 4), (3, 7), (4, 4), (4, 8), (4, 32), (8, 16)])
def test_zb_h1_keeps_1f1b_s_peak_and_a_third_of_its_bubble(stages, micros):
    """F = B = W: each stage idles p − 1 units, a third of 1F1B's 3(p − 1), and every stage
    keeps p micro-batches, 1F1B's peak (on its first stage)."""
    orders = pp.zb_h1(stages, micros)
    assert _ops_per_stage(orders, micros, kinds=("F", "B", "W"))
    costs = pp.Costs(1.0, 1.0, 1.0)
    timeline = pp.simulate(orders, costs)
    assert pp.makespan(timeline) == pytest.approx(3 * micros + stages - 1)
    plain = pp.simulate(pp.one_f_one_b(stages, micros), pp.Costs(1.0, 2.0))  # B + W whole
    assert pp.makespan(plain) - 3 * micros == pytest.approx(3 * (stages - 1))
    assert pp.in_flight(timeline) == dict.fromkeys(range(stages), min(stages, micros))
    assert max(pp.in_flight(plain).values()) == min(stages, micros)
