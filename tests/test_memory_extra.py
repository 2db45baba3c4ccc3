"""d2l_ext.memory_budget: budgets counted from shapes (ZeRO, recipes, FSDP2's moments, the
state of lean optimizers), checked against the ZeRO paper's example and against what
PyTorch's optimizers allocate; the leak meter against leaks of known size."""

from __future__ import annotations

import gc

import pytest

from d2l_ext import memory_budget as budget

MiB = 2**20


# ---------------------------------------------------------------------- arithmetic only
def test_the_zero_papers_worked_example():
    """Rajbhandari et al. (2020), Figure 1: 7.5 B parameters, 64 GPUs, K = 12."""
    gb = [budget.zero_gb(7.5e9, 64, stage) for stage in range(4)]
    assert [round(x, 1) for x in gb] == [120.0, 31.4, 16.6, 1.9]
    assert budget.zero_bytes_per_parameter(0, 64) == 16
    assert budget.zero_bytes_per_parameter(3, 1) == 16  # one process: nothing to shard


def test_zero_stages_shard_in_order_and_reject_nonsense():
    assert budget.zero_bytes_per_parameter(1, 4, 4, 4, 8) == 4 + 4 + 2  # float32 Adam
    assert budget.zero_bytes_per_parameter(2, 4, 4, 4, 8) == 4 + 1 + 2
    assert budget.zero_bytes_per_parameter(3, 4, 4, 4, 8) == 4
    with pytest.raises(ValueError, match="stages 0 to 3"):
        budget.zero_bytes_per_parameter(4, 8)
    with pytest.raises(ValueError, match="at least one"):
        budget.zero_bytes_per_parameter(1, 0)


def test_recipes_add_up():
    totals = {name: r.total for name, r in budget.RECIPES.items()}
    assert totals == {"float32": 16, "bfloat16": 8, "mixed": 16,
                      "mixed, float32 gradients": 18, "mixed, 16-bit and float32 gradients": 20}


def test_fsdp2_moments_follow_the_passes():
    units, k = [10, 20, 30], 5
    moments = budget.fsdp2_moments(units, k, param_bytes=2, reduce_bytes=4)
    assert [m.label for m in moments] == ["forward 1", "forward 2", "forward 3",
                                          "backward 3", "backward 2", "backward 1"]
    state = 12 * 60 / k
    f1, f2, b3, b2, b1 = moments[0], moments[1], moments[3], moments[4], moments[5]
    assert (f1.sharded, f1.gathered, f1.all_gather, f1.gradients) == (state, 20, 20, 0)
    assert (f2.gathered, f2.all_gather) == (40, 2 * (20 + 10))  # its buffer and the previous
    # gradients in the param type (2 B), the reduce-scatter input in the reduce type (4 B)
    assert (b3.sharded, b3.gathered, b3.all_gather, b3.gradients, b3.reduce_scatter) == (
        state, 60, 40, 60, 0)  # nothing reduced before the first unit of backward
    assert (b2.sharded, b2.all_gather, b2.reduce_scatter) == (state + 4 * 30 / k, 20, 120)
    assert (b1.sharded, b1.all_gather) == (state + 4 * 50 / k, 0)  # nothing to prefetch
    assert b1.total == b1.sharded + 20 + 0 + 20 + 80


def test_eight_bit_state_as_bitsandbytes_keeps_it_lora_and_fits():
    """bitsandbytes' Adam8bit: one absmax per 256 numbers per state, and tensors of fewer
    than 4,096 numbers in float32; the paper's 2,048-number blocks on request."""
    assert budget.eight_bit_state_bytes(4096) == 2 * (4096 + 4 * 16)
    assert budget.eight_bit_state_bytes(4097) == 2 * (4097 + 4 * 17)  # a partial block
    assert budget.eight_bit_state_bytes(4095) == 2 * 4 * 4095  # too small: float32
    assert budget.eight_bit_state_bytes(2048, block=2048, min_size=0) == 2 * (2048 + 4)
    assert budget.optimizer_state_counted("adam 8-bit", [(4096, 8), (8,)]) == (
        2 * (4096 * 8 + 4 * 128) + 2 * 4 * 8)  # the step counter is a Python number
    assert budget.lora_parameters([(100, 50), (10, 10)], 4) == 4 * 150 + 4 * 20
    assert budget.fits(100, 40, 7) == 8
    assert budget.fits(100, 120, 7) == 0
    with pytest.raises(ValueError):
        budget.fits(100, 40, 0)


def test_optimizer_state_counted_by_hand():
    shapes = [(3, 5), (5,)]
    assert budget.optimizer_state_counted("sgd", shapes) == 0
    assert budget.optimizer_state_counted("sgd momentum", shapes) == 4 * 20
    assert budget.optimizer_state_counted("adam", shapes) == 8 * 20 + 2 * 4
    assert budget.optimizer_state_counted("adafactor", shapes) == 4 * (3 + 5) + 4 * 5 + 2 * 4
    assert budget.optimizer_state_counted("adafactor", [(2, 3, 5)]) == 4 * (6 + 10) + 4
    # on an accelerator the step counters stay on the host (Adam unless capturable/fused;
    # Adafactor always)
    assert budget.optimizer_state_counted("adam", shapes, device="cuda") == 8 * 20
    assert budget.optimizer_state_counted("adam", shapes, device="cuda:1",
                                          capturable=True) == 8 * 20 + 2 * 4
    assert budget.optimizer_state_counted("adafactor", shapes, device="cuda",
                                          capturable=True) == 4 * (3 + 5) + 4 * 5
    assert budget.optimizer_state_counted("muon", [(3, 5)]) == 4 * 15
    with pytest.raises(ValueError, match="two-dimensional"):
        budget.optimizer_state_counted("muon", shapes)
    with pytest.raises(ValueError, match="no count"):
        budget.optimizer_state_counted("lion", shapes)


def test_snapshot_bytes_sums_devices_by_category_name():
    class Category(str):
        value = "Activation"

    snapshot = {"cpu": {Category("ACT"): 5, "Total": 5}, "meta": {"Activation": 2, "Total": 2}}
    assert budget.snapshot_bytes(snapshot) == {"Activation": 7, "Total": 7}


# ---------------------------------------------------------------------- against PyTorch
torch = pytest.importorskip("torch")
nn = torch.nn


def _first_step_state(opts, model) -> int:
    model(torch.randn(4, model[0].in_features)).sum().backward()
    for opt in opts:
        opt.step()
    return sum(v.untyped_storage().nbytes() for opt in opts for s in opt.state.values()
               for v in s.values() if isinstance(v, torch.Tensor))


@pytest.mark.parametrize("name", ["sgd momentum", "adam", "adafactor", "muon"])
def test_optimizer_state_counted_matches_torch_optim(name):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 7), nn.ReLU(), nn.Linear(7, 3))
    shapes = [tuple(p.shape) for p in model.parameters()]
    params = list(model.parameters())
    if name == "sgd momentum":
        opts = [torch.optim.SGD(params, lr=0.1, momentum=0.9)]
        counted = budget.optimizer_state_counted(name, shapes)
    elif name == "adam":
        opts = [torch.optim.Adam(params)]
        counted = budget.optimizer_state_counted(name, shapes)
    elif name == "adafactor":
        opts = [torch.optim.Adafactor(params)]
        counted = budget.optimizer_state_counted(name, shapes)
    else:
        opts = [torch.optim.Muon([p for p in params if p.ndim == 2]),
                torch.optim.AdamW([p for p in params if p.ndim != 2])]
        counted = (budget.optimizer_state_counted("muon", [s for s in shapes if len(s) == 2])
                   + budget.optimizer_state_counted("adam", [s for s in shapes if len(s) != 2]))
    assert _first_step_state(opts, model) == counted


def test_meta_models_are_counted_at_full_size():
    """Sizing a model on the meta device (the chapter's "will it fit" example) needs
    memory.parameter_bytes to count meta storages at their size."""
    from d2l_ext import memory

    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(10, 30), nn.Linear(30, 2, dtype=torch.bfloat16))
    assert memory.parameter_bytes(model) == 4 * (10 * 30 + 30) + 2 * (30 * 2 + 2)


def test_growth_sees_a_leak_and_gc_frees_a_cycle():
    kept = []

    def leak():
        kept.append(torch.empty(MiB // 4))  # 1 MiB per call, kept

    assert budget.growth(leak, 3, "cpu") == [MiB, 2 * MiB, 3 * MiB]
    kept.clear()

    def cycle():
        record = {"t": torch.empty(MiB // 4)}
        record["self"] = record

    gc.disable()
    try:
        sizes = budget.growth(cycle, 3, "cpu", after=gc.collect)
    finally:
        gc.enable()
    assert sizes == [MiB, 2 * MiB, 3 * MiB, 0]


@pytest.mark.parametrize("reduce_float32", [False, True])
def test_fsdp2_moments_match_pytorchs_fsdp_mem_tracker(reduce_float32):
    """FSDP2's own code, run on fake tensors with a fake group of 4 processes, holds what
    fsdp2_moments counts, to the byte but for Adam's step counters (4 bytes a tensor); with
    a float32 reduce type too (the unsharded gradients stay in the param type)."""
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        pytest.skip("a process group exists already")
    k, width, depth = 4, 64, 3
    dist.init_process_group("fake", rank=0, world_size=k, store=FakeStore())
    try:
        mesh = init_device_mesh("cpu", (k,))
        with FakeTensorMode():
            stack = nn.Sequential(*[nn.Linear(width, width, bias=False) for _ in range(depth)])
            policy = MixedPrecisionPolicy(
                param_dtype=torch.bfloat16,
                reduce_dtype=torch.float32 if reduce_float32 else None)
            for layer in stack:
                fully_shard(layer, mesh=mesh, mp_policy=policy)
            fully_shard(stack, mesh=mesh, mp_policy=policy)
            opt = torch.optim.Adam(stack.parameters())
            inputs = torch.randn(8, width)
            tracker = FSDPMemTracker(stack, opt)
            tracker.track_inputs((inputs,))
            with tracker:
                for i in range(2):
                    stack(inputs).float().sum().backward()
                    opt.step()
                    opt.zero_grad()
                    if i == 0:
                        tracker.reset_mod_stats()
    finally:
        dist.destroy_process_group()
    counted = budget.fsdp2_moments([width * width] * depth, k,
                                   reduce_bytes=4 if reduce_float32 else 2)
    tracked = ([budget.fsdp_tracked(tracker, stack[i], "Peak Forward") for i in range(depth)]
               + [budget.fsdp_tracked(tracker, stack[i], "Before Post-Backward")
                  for i in reversed(range(depth))])
    for c, t in zip(counted, tracked):
        steps = 4 * depth
        assert t == {f: getattr(c, f) + (steps if f == "sharded" else 0) for f in t}, c.label
    with pytest.raises(ValueError, match="no 'Nothing' snapshot"):
        budget.fsdp_tracked(tracker, stack[0], "Nothing")



def test_kvstore_servers_hold_small_arrays_whole_and_slice_big_ones():
    """MXNet's EncodeDefaultKey: key * 9973 % S for arrays under the bound, else one slice
    per server; every number is held exactly once."""
    assert budget.kvstore_server_numbers([10, 20, 30], 1) == [60]
    assert budget.kvstore_server_numbers([10, 20, 30], 2) == [10 + 30, 20]  # 9973 is odd
    assert budget.kvstore_server_numbers([7], 3, bound=5) == [2, 3, 2]  # round(7/3), ...
    assert budget.kvstore_server_numbers([5], 2, bound=5) == [3, 2]  # C rounds 2.5 up
    sizes = [784 * 1024, 1024, 1024 * 1024, 1024, 1024 * 10, 10]
    for servers in (2, 3, 4):
        held = budget.kvstore_server_numbers(sizes, servers)
        assert sum(held) == sum(sizes)
    assert budget.kvstore_server_numbers(sizes, 2)[0] == 784 * 1024 + 1024 * 10 + 2**19
    with pytest.raises(ValueError, match="at least one server"):
        budget.kvstore_server_numbers(sizes, 0)
