"""d2l_ext.parallel: CPU stand-ins for torch.nn.parallel's four data-parallel primitives."""

import threading

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


@pytest.mark.parametrize("batch", [9, 10, 2])
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


def test_replicas_have_no_parameters_of_their_own():
    net = _net()
    replica = parallel.replicate(net, CPUS[:1])[0]
    assert list(replica.parameters()) == []
    assert replica(torch.randn(2, 1, 6, 6)).shape == (2, 5)


def test_scatter_splits_along_the_first_dimension():
    parts = parallel.scatter(torch.arange(10), CPUS)
    assert [p.tolist() for p in parts] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert len(parallel.scatter(torch.arange(2), CPUS)) == 2


def test_parallel_apply_runs_each_replica_in_a_thread_with_the_callers_grad_mode():
    seen = []

    class Probe(nn.Module):
        def forward(self, x):
            seen.append((threading.get_ident(), torch.is_grad_enabled()))
            return x * 2

    probes = [Probe(), Probe()]
    with torch.no_grad():
        out = parallel.parallel_apply(probes, [torch.ones(1), (torch.ones(1),)])
    assert [o.item() for o in out] == [2.0, 2.0]
    assert {grad for _, grad in seen} == {False}
    assert threading.get_ident() not in {ident for ident, _ in seen}


def test_an_exception_in_a_thread_is_raised_in_the_caller():
    class Broken(nn.Module):
        def forward(self, x):
            raise RuntimeError("replica failed")

    with pytest.raises(RuntimeError, match="replica failed"):
        parallel.parallel_apply([nn.Identity(), Broken()], [torch.ones(1), torch.ones(1)])


def test_bad_input_says_what_to_do():
    with pytest.raises(TypeError, match="scatter each tensor"):
        parallel.scatter((torch.ones(2), torch.ones(2)), CPUS)
    with pytest.raises(ValueError, match="one input per module"):
        parallel.parallel_apply([nn.Identity()] * 3, [torch.ones(1)])
    with pytest.raises(TypeError, match="one output per replica"):
        parallel.gather([], "cpu")


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
