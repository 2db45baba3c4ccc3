"""d2l_ext.parallel: stand-ins for torch.nn.parallel's four data-parallel primitives that take
any device. The replicas of several CPU "devices" hold distinct tensors, as replicas on
distinct GPUs do, so these tests exercise what a multi-GPU run exercises: each replica
computing with its own weights, in its own thread, gradients summed back into the module."""

import collections
import threading
import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from d2l_ext import parallel  # noqa: E402

CPUS = [torch.device("cpu")] * 3


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 6 * 6, 5))


def _data_parallel(module, X, devices):
    replicas = parallel.replicate(module, devices)
    inputs = parallel.scatter(X, devices)
    outputs = parallel.parallel_apply(replicas[:len(inputs)], inputs)
    return parallel.gather(outputs, devices[0])


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


@pytest.mark.parametrize("batch", [9, 10, 2])  # uneven, even, fewer examples than devices
def test_data_parallel_equals_one_device_value_and_gradient(batch):
    X = torch.randn(batch, 1, 6, 6)
    one, many = _net(), _net()
    expected = one(X)
    expected.square().sum().backward()
    got = _data_parallel(many, X, CPUS)
    got.square().sum().backward()
    torch.testing.assert_close(got, expected)
    for a, b in zip(many.parameters(), one.parameters()):
        torch.testing.assert_close(a.grad, b.grad)


def test_replicas_are_module_copies_with_their_own_tensors_and_no_parameters():
    net = _net()
    replicas = parallel.replicate(net, CPUS)
    assert all(type(r) is nn.Sequential and r is not net for r in replicas)
    assert all(list(r.parameters()) == [] for r in replicas)  # copies, not Parameters
    weights = [r[0].weight for r in replicas]
    assert _storage(weights[0]) == _storage(net[0].weight)  # the first shares the module's
    assert len({_storage(w) for w in weights}) == 3  # the others have their own memory
    for w in weights:
        assert w.grad_fn is not None  # differentiable copies
        torch.testing.assert_close(w, net[0].weight)
    detached = parallel.replicate(net, CPUS, detach=True)
    assert not any(r[3].weight.requires_grad for r in detached)


def test_concurrent_replicas_compute_with_their_own_weights_and_leave_the_module_alone():
    """The bug this catches: replicas that swap their tensors into one shared module while
    they run (torch.func.functional_call) see each other's weights when threads overlap,
    and can leave the module's Parameters replaced."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 256))
    params = dict(net.named_parameters())
    values = {name: p.detach().clone() for name, p in params.items()}
    replicas = parallel.replicate(net, [torch.device("cpu")] * 4, detach=True)
    with torch.no_grad():
        for j, replica in enumerate(replicas[1:], start=2):
            replica[2].weight.mul_(j)  # replica j computes j * net(x) - net's bias (j - 1)
    inputs = [torch.randn(64, 256) for _ in replicas]
    with torch.no_grad():
        expected = [net(x) * j - net[2].bias * (j - 1) for j, x in enumerate(inputs, start=1)]
        for _ in range(25):
            outputs = parallel.parallel_apply(replicas, inputs)
            for out, want in zip(outputs, expected):
                torch.testing.assert_close(out, want)
    for name, p in net.named_parameters():
        assert p is params[name] and isinstance(p, nn.Parameter)
        torch.testing.assert_close(p.detach(), values[name])


def test_tied_parameters_stay_tied_in_every_replica():
    torch.manual_seed(0)
    one = nn.Sequential(nn.Linear(5, 5), nn.ReLU(), nn.Linear(5, 5))
    one[2].weight = one[0].weight
    many = nn.Sequential(nn.Linear(5, 5), nn.ReLU(), nn.Linear(5, 5))
    many.load_state_dict(one.state_dict())
    many[2].weight = many[0].weight
    for replica in parallel.replicate(many, CPUS):
        assert replica[2].weight is replica[0].weight
    X = torch.randn(7, 5)
    one(X).square().sum().backward()
    _data_parallel(many, X, CPUS).square().sum().backward()
    torch.testing.assert_close(many[0].weight.grad, one[0].weight.grad)


def test_batchnorm_statistics_reach_the_module_from_the_first_replica_only():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    reference = nn.BatchNorm1d(4)
    X = torch.randn(8, 4)
    replicas = parallel.replicate(net, CPUS[:2])
    assert replicas[0][1].running_mean is net[1].running_mean
    assert _storage(replicas[1][1].running_mean) != _storage(net[1].running_mean)
    parallel.parallel_apply(replicas, parallel.scatter(X, CPUS[:2]))
    with torch.no_grad():
        reference(net[0](X[:4]))  # the first replica's slice
    torch.testing.assert_close(net[1].running_mean, reference.running_mean)
    assert net[1].num_batches_tracked.item() == 1
    assert not torch.allclose(replicas[1][1].running_mean, net[1].running_mean)


def test_scatter_follows_torchs_rules():
    parts = parallel.scatter(torch.arange(10), CPUS)
    assert isinstance(parts, tuple)
    assert [p.tolist() for p in parts] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert len(parallel.scatter(torch.arange(2), CPUS)) == 2  # a batch smaller than devices
    pairs = parallel.scatter((torch.arange(6), torch.arange(6) * 10, "tag"), CPUS)
    assert [(a.tolist(), b.tolist(), c) for a, b, c in pairs] == [
        ([0, 1], [0, 10], "tag"), ([2, 3], [20, 30], "tag"), ([4, 5], [40, 50], "tag")]
    dicts = parallel.scatter({"x": torch.arange(4), "n": 1}, CPUS[:2])
    assert [(d["x"].tolist(), d["n"]) for d in dicts] == [([0, 1], 1), ([2, 3], 1)]
    lists = parallel.scatter([torch.arange(3), torch.arange(6)], CPUS)
    assert [[t.tolist() for t in parts] for parts in lists] == [
        [[0], [0, 1]], [[1], [2, 3]], [[2], [4, 5]]]
    Batch = collections.namedtuple("Batch", "x y")
    batches = parallel.scatter(Batch(torch.arange(4), torch.arange(4)), CPUS[:2])
    assert all(type(b) is Batch for b in batches) and batches[1].y.tolist() == [2, 3]
    assert len(parallel.scatter((torch.arange(2), torch.arange(6)), CPUS)) == 2  # shortest
    columns = parallel.scatter(torch.arange(12).reshape(2, 6), CPUS, dim=1)
    assert [c.shape for c in columns] == [(2, 2)] * 3


class Scale(nn.Module):
    def forward(self, x, scale=1.0):
        return x * scale


def test_parallel_apply_passes_kwargs_and_devices_as_torch_does():
    out = parallel.parallel_apply([Scale(), Scale()], [torch.ones(2), (torch.ones(2),)],
                                  [{"scale": 2.0}, {"scale": 3.0}], ["cpu", torch.device("cpu")])
    assert [o.tolist() for o in out] == [[2.0, 2.0], [3.0, 3.0]]
    assert parallel.parallel_apply([Scale()], [[torch.ones(1)]])[0].tolist() == [1.0]


def test_parallel_apply_runs_each_replica_in_a_thread_with_the_callers_grad_mode():
    seen = []

    class Probe(nn.Module):
        def forward(self, x):
            seen.append((threading.get_ident(), torch.is_grad_enabled()))
            return x * 2

    with torch.no_grad():
        out = parallel.parallel_apply([Probe(), Probe()], [torch.ones(1), (torch.ones(1),)])
    assert [o.item() for o in out] == [2.0, 2.0]
    assert {grad for _, grad in seen} == {False}
    assert threading.get_ident() not in {ident for ident, _ in seen}
    seen.clear()
    parallel.parallel_apply([Probe()], [torch.ones(1)])  # one module: in the caller's thread
    assert seen == [(threading.get_ident(), True)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_parallel_apply_passes_the_autocast_state_to_the_threads(dtype):
    """Autocast, and its dtype, are per thread: a new thread runs without autocast, and with
    the default dtype (bfloat16 on a CPU) where autocast is turned on without one."""
    linears = parallel.replicate(nn.Linear(4, 3), CPUS[:2])
    X = torch.randn(4, 4)
    with torch.autocast("cpu", dtype=dtype):
        outputs = parallel.parallel_apply(linears, parallel.scatter(X, CPUS[:2]))
    assert [o.dtype for o in outputs] == [dtype, dtype]
    assert [o.dtype for o in parallel.parallel_apply(linears, [X, X])] == [torch.float32] * 2


def test_an_exception_in_a_thread_is_raised_in_the_caller_with_its_type_and_replica():
    class Broken(nn.Module):
        def forward(self, x):
            raise KeyError("replica failed")

    with pytest.raises(KeyError, match="replica 1 on cpu.*replica failed"):
        parallel.parallel_apply([nn.Identity(), Broken()], [torch.ones(1), torch.ones(1)])


def test_gather_follows_torchs_rules():
    outputs = [{"y": torch.ones(2, 3), "aux": (torch.zeros(1), None)},
               {"y": torch.ones(1, 3), "aux": (torch.ones(1), None)}]
    got = parallel.gather(outputs, "cpu")
    assert got["y"].shape == (3, 3) and got["aux"][0].tolist() == [0.0, 1.0]
    assert got["aux"][1] is None
    assert parallel.gather([torch.ones(2, 1), torch.ones(2, 1)], -1, dim=1).shape == (2, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        losses = parallel.gather([torch.tensor(1.0), torch.tensor(2.0)], "cpu")
    assert losses.tolist() == [1.0, 2.0] and "scalars" in str(caught[0].message)


def test_bad_input_says_what_to_do():
    with pytest.raises(ValueError, match="one input per module"):
        parallel.parallel_apply([nn.Identity()] * 3, [torch.ones(1)])
    with pytest.raises(ValueError, match="one dict per module"):
        parallel.parallel_apply([nn.Identity()] * 2, [torch.ones(1)] * 2, [{}])
    with pytest.raises(ValueError, match="one device per module"):
        parallel.parallel_apply([nn.Identity()] * 2, [torch.ones(1)] * 2, None, ["cpu"])
    with pytest.raises(ValueError, match="at least one device"):
        parallel.scatter(torch.ones(2), [])
    with pytest.raises(TypeError, match="one per replica"):
        parallel.gather([], "cpu")
    with pytest.raises(TypeError, match="cannot combine outputs of type int"):
        parallel.gather([1, 2], "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU torch's primitives work")
def test_torchs_primitives_refuse_a_cpu_each_in_its_own_way():
    """What the GPU-basics chapter says of torch's four functions on a machine without a GPU."""
    from torch.nn.parallel import gather, parallel_apply, replicate, scatter

    cpu, net, X = torch.device("cpu"), nn.Linear(3, 2), torch.randn(4, 3)
    with pytest.raises(ValueError, match="Expected a non cpu device"):
        replicate(net, [cpu, cpu])
    with pytest.raises(ValueError, match="Expected a non cpu device"):
        scatter(X, [cpu, cpu])
    with pytest.raises(RuntimeError, match="accelerator"):
        parallel_apply([net, net], [X[:2], X[2:]])
    with pytest.raises(AssertionError, match="not implemented for CPU tensors"):
        gather([X[:2], X[2:]], "cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's primitives need a GPU")
def test_the_stand_ins_agree_with_torchs_primitives_on_gpus():
    from torch.nn.parallel import gather, parallel_apply, replicate, scatter

    devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    net = _net().to(devices[0])
    X = torch.randn(8, 1, 6, 6, device=devices[0])
    replicas = replicate(net, devices)
    inputs = scatter(X, devices)
    theirs = gather(parallel_apply(replicas[:len(inputs)], inputs), devices[0])
    torch.testing.assert_close(_data_parallel(net, X, devices), theirs)
    # two stand-ins on one GPU: distinct tensors on the same device, the one-device result
    torch.testing.assert_close(_data_parallel(net, X, [devices[0]] * 2), net(X))
