"""Code written for d2l's computational-performance chapters runs on d2l_ext.

d2l-en's chapter sources (chapter_computational-performance/*.md at commit 23d7a5ae, both
the PyTorch and the MXNet tab) use the ``d2l.`` names in ``USED``. Each must exist in both
halves of d2l_ext with d2l's meaning. The tests call them the way those chapters do (our
code, written after theirs), and compare with d2l 1.0.3's own implementation where it can
run here: ``d2l.mxnet`` imports; from ``d2l/torch.py`` (which needs torchvision to import)
the functions are executed from its source.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import numpy
import pytest

#: name -> the d2l-en chapters (chapter_computational-performance/) that use it
USED = {
    "Accumulator": ["multiple-gpus-concise"],
    "Animator": ["multiple-gpus", "multiple-gpus-concise"],
    "Benchmark": ["async-computation", "auto-parallelism"],
    "Residual": ["multiple-gpus-concise"],
    "Timer": ["hybridize", "multiple-gpus", "multiple-gpus-concise"],
    "accuracy": ["multiple-gpus-concise"],
    "evaluate_accuracy_gpu": ["multiple-gpus", "multiple-gpus-concise"],
    "load_data_fashion_mnist": ["multiple-gpus", "multiple-gpus-concise"],
    "sgd": ["multiple-gpus"],
    "split_batch": ["multiple-gpus-concise"],
    "try_all_gpus": ["auto-parallelism", "multiple-gpus-concise"],
    "try_gpu": ["async-computation", "multiple-gpus", "multiple-gpus-concise"],
}


def ours(framework: str, numpy_too_new: bool):
    if framework == "mxnet":
        if numpy_too_new:
            pytest.skip("MXNet 1.9.1 needs numpy < 1.24")
        pytest.importorskip("mxnet")
    else:
        pytest.importorskip("torch")
    return importlib.import_module(f"d2l_ext.{framework}")


@pytest.mark.parametrize("framework", ["torch", "mxnet"])
@pytest.mark.parametrize("name", sorted(USED))
def test_every_name_d2l_chapters_use_exists(framework, name, numpy_too_new):
    module = ours(framework, numpy_too_new)
    assert hasattr(module, name), f"d2l_ext.{framework} lacks d2l.{name}"
    assert name in module.__all__


def d2l_torch_function(name: str):
    """A function of d2l/torch.py, executed from its source with torch imported."""
    spec = importlib.util.find_spec("d2l")
    if spec is None or spec.origin is None:
        pytest.skip("d2l is not installed")
    tree = ast.parse((Path(spec.origin).parent / "torch.py").read_text(encoding="utf-8"))
    node = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name][-1]
    namespace = {"torch": importlib.import_module("torch")}
    exec(compile(ast.Module([node], type_ignores=[]), "d2l/torch.py", "exec"), namespace)
    return namespace[name]


def test_torch_sgd_is_d2ls():
    torch = pytest.importorskip("torch")
    from d2l_ext import torch as d2l

    theirs = d2l_torch_function("sgd")
    params = []
    for step in (theirs, d2l.sgd):
        torch.manual_seed(0)
        w = torch.randn(3, 2, requires_grad=True)
        b = torch.zeros(2, requires_grad=True)
        (torch.ones(4, 3) @ w + b).square().sum().backward()
        step([w, b], 0.1, 4)
        assert w.grad.abs().sum() == 0 and b.grad.abs().sum() == 0  # zeroed, as d2l
        params.append((w.detach().clone(), b.detach().clone()))
    for a, b in zip(*params):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_mxnet_sgd_is_d2ls(numpy_too_new):
    d2l = ours("mxnet", numpy_too_new)
    theirs = pytest.importorskip("d2l.mxnet")
    from mxnet import autograd, np

    results = []
    for step in (theirs.sgd, d2l.sgd):
        w = np.array([[1.0, -2.0], [0.5, 3.0]])
        w.attach_grad()
        with autograd.record():
            loss = (np.ones((4, 2)) @ w).sum()
        loss.backward()
        step([w], 0.1, 4)
        results.append(w.asnumpy())
    numpy.testing.assert_array_equal(*results)


def test_torch_hand_written_data_parallelism_like_the_d2l_chapter():
    """multiple-gpus: a replica of the parameters per device, the minibatch split with
    split_batch, gradients summed by hand (allreduce), then d2l.sgd on every replica with the
    full batch size. The replicas must stay equal and match one full-batch step."""
    torch = pytest.importorskip("torch")
    from d2l_ext import torch as d2l

    torch.manual_seed(0)
    X, y = torch.randn(10, 3), torch.randint(0, 2, (10,))
    w0 = torch.randn(3, 2)
    devices = [d2l.try_gpu(0), d2l.try_gpu(1)]  # two CPUs here, as the chapter's [gpu(0), gpu(1)]
    replicas = [w0.clone().to(d).requires_grad_() for d in devices]
    X_shards, y_shards = d2l.split_batch(X, y, devices)
    loss = torch.nn.CrossEntropyLoss(reduction="none")
    for w, Xs, ys in zip(replicas, X_shards, y_shards):
        loss(Xs @ w, ys).sum().backward()
    total = sum(w.grad.to(devices[0]) for w in replicas)
    for w in replicas:
        w.grad[:] = total.to(w.device)
        d2l.sgd([w], 0.1, X.shape[0])
    single = w0.clone().requires_grad_()
    loss(X @ single, y).sum().backward()
    d2l.sgd([single], 0.1, X.shape[0])
    for w in replicas:
        torch.testing.assert_close(w.detach().cpu(), single.detach())


@pytest.mark.parametrize("framework", ["torch", "mxnet"])
def test_calls_as_the_d2l_chapters_write_them(framework, numpy_too_new, capsys):
    d2l = ours(framework, numpy_too_new)
    num_epochs = 2
    animator = d2l.Animator("epoch", "test acc", xlim=[1, num_epochs])  # positional labels
    timer = d2l.Timer()
    for epoch in range(num_epochs):
        timer.start()
        timer.stop()
        animator.add(epoch + 1, (0.5 + 0.1 * epoch,))
    assert animator.Y == [[0.5, 0.6]] and timer.avg() >= 0
    with d2l.Benchmark("GPU1 time"):
        pass
    assert capsys.readouterr().out.startswith("GPU1 time: ")
    assert d2l.try_gpu() in d2l.try_all_gpus() or d2l.try_all_gpus() == [d2l.cpu()]
    block = d2l.Residual(8, use_1x1conv=True, strides=2)  # lazy input size, as the chapter
    if framework == "torch":
        import torch

        out = block(torch.zeros(2, 3, 16, 16))
    else:
        from mxnet import np

        block.initialize()
        out = block(np.zeros((2, 3, 16, 16)))
    assert tuple(out.shape) == (2, 8, 8, 8)
