"""Compatibility with d2l 1.0.3: same signatures (ours may only add optional parameters),
same printed output and the same behaviour where the book relies on it.

Uses ``d2l.mxnet`` where MXNet imports. ``d2l.torch`` imports torchvision at the top, which
d2l_ext does without (no CPU build of torchvision installs here); torchvision serves d2l only
to load data (``transforms``, ``datasets``), so where it is missing ``d2l.torch`` is imported
with a stand-in ``torchvision`` module that only its data loading would touch, and the tests
compare d2l's real functions and classes with ours.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
import sys
import types
from pathlib import Path

import numpy
import pytest

SHARED = ["Benchmark", "Timer", "Accumulator", "Animator", "try_gpu", "try_all_gpus",
          "num_gpus", "split_batch", "Residual", "resnet18", "evaluate_accuracy_gpu",
          "load_data_fashion_mnist", "get_dataloader_workers", "accuracy", "sgd"]
ONLY = {"mxnet": ["evaluate_accuracy_gpus"], "torch": []}
METHODS = {"Timer": ["start", "stop", "avg", "sum", "cumsum"], "Accumulator": ["add", "reset"],
           "Animator": ["add"]}
FRAMEWORKS = ["mxnet", "torch"]


def modules(framework: str, numpy_too_new: bool):
    """(d2l's module, ours) for ``framework``; skips the test where d2l's cannot be imported."""
    pytest.importorskip("d2l", reason="d2l is not installed")
    if framework == "mxnet":
        if numpy_too_new:
            pytest.skip(f"MXNet 1.9.1 needs numpy < 1.24, this is numpy {numpy.__version__}")
        pytest.importorskip("mxnet")
    else:
        pytest.importorskip("torch")
    theirs = import_d2l_torch() if framework == "torch" else importlib.import_module("d2l.mxnet")
    return theirs, importlib.import_module(f"d2l_ext.{framework}")


class _NoTorchvision(types.ModuleType):
    """Stands in for torchvision while d2l.torch is imported; any use of it says so."""

    def __getattr__(self, name: str):
        raise AttributeError(f"torchvision.{name}: torchvision is not installed; a stand-in "
                             "let d2l.torch import (d2l uses it to load data only)")


def import_d2l_torch():
    """``d2l.torch``; with a stand-in for torchvision where torchvision is not installed."""
    import torch  # noqa: F401 - before the stand-in: torch itself looks for torchvision

    if importlib.util.find_spec("torchvision") is not None or "d2l.torch" in sys.modules:
        return importlib.import_module("d2l.torch")
    stand_in = _NoTorchvision("torchvision")
    stand_in.__path__ = []
    stand_in.transforms = _NoTorchvision("torchvision.transforms")
    added = {"torchvision": stand_in, "torchvision.transforms": stand_in.transforms}
    sys.modules.update(added)
    try:
        return importlib.import_module("d2l.torch")
    finally:  # only d2l.torch keeps the stand-in; nothing else can import it
        for name in added:
            sys.modules.pop(name, None)


@pytest.fixture(params=FRAMEWORKS)
def pair(request, numpy_too_new):
    return modules(request.param, numpy_too_new)


def same_default(a, b) -> bool:
    if callable(a) and callable(b):  # e.g. split_f=split_batch: each module's own function
        return a.__name__ == b.__name__
    return type(a) is type(b) and a == b


def assert_extends(theirs, ours, where: str) -> None:
    """Every parameter of ``theirs`` is in ``ours`` at the same place with the same name,
    kind and default; ``ours`` only adds trailing parameters that have defaults."""
    sig = theirs if isinstance(theirs, inspect.Signature) else inspect.signature(theirs)
    t = list(sig.parameters.values())
    o = list(inspect.signature(ours).parameters.values())
    assert len(o) >= len(t), f"{where}: {inspect.signature(ours)} lacks parameters"
    for p, q in zip(t, o):
        assert (q.name, q.kind) == (p.name, p.kind), f"{where}: {q} is not d2l's {p}"
        assert same_default(p.default, q.default), f"{where}: {q} is not d2l's {p}"
    for q in o[len(t):]:
        assert q.kind in (q.POSITIONAL_OR_KEYWORD, q.KEYWORD_ONLY), f"{where}: extra {q}"
        assert q.default is not q.empty, f"{where}: extra {q} has no default"


def _default(node: ast.expr):
    """A literal default's value; other defaults (calls, names) as their source text."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        return f"<source: {ast.unparse(node)}>"


def _signature(func: ast.FunctionDef) -> inspect.Signature:
    """The signature of a ``def`` read from source."""
    args, P = func.args, inspect.Parameter
    positional = args.posonlyargs + args.args
    defaults = [P.empty] * (len(positional) - len(args.defaults)) + [
        _default(d) for d in args.defaults]
    params = [P(a.arg, P.POSITIONAL_ONLY if i < len(args.posonlyargs) else
                P.POSITIONAL_OR_KEYWORD, default=d)
              for i, (a, d) in enumerate(zip(positional, defaults))]
    if args.vararg:
        params.append(P(args.vararg.arg, P.VAR_POSITIONAL))
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        params.append(P(a.arg, P.KEYWORD_ONLY,
                        default=P.empty if d is None else _default(d)))
    if args.kwarg:
        params.append(P(args.kwarg.arg, P.VAR_KEYWORD))
    return inspect.Signature(params)


def d2l_torch_source_signatures() -> dict[str, inspect.Signature]:
    """``{"name": sig, "Class.method": sig}`` for d2l/torch.py, read without importing it."""
    spec = importlib.util.find_spec("d2l")
    if spec is None or spec.origin is None:
        pytest.skip("d2l is not installed")
    tree = ast.parse((Path(spec.origin).parent / "torch.py").read_text(encoding="utf-8"))
    sigs = {}
    for node in tree.body:  # the last definition of a name wins, as at import time
        if isinstance(node, ast.FunctionDef):
            sigs[node.name] = _signature(node)
        elif isinstance(node, ast.ClassDef):
            sigs[node.name] = None
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    sigs[f"{node.name}.{item.name}"] = _signature(item)
    return sigs


@pytest.mark.parametrize("name", SHARED)
def test_signature_from_d2l_torch_source(name):
    """The same check as below, against d2l.torch's source (works without torchvision)."""
    pytest.importorskip("torch")
    from d2l_ext import torch as ours_mod

    sigs = d2l_torch_source_signatures()
    assert name in sigs, f"d2l.torch has no {name}"
    ours = getattr(ours_mod, name)
    if sigs[name] is None:  # a class
        assert inspect.isclass(ours)
        assert_extends(sigs[f"{name}.__init__"], ours.__init__, f"{name}.__init__")
        for method in METHODS.get(name, []):
            assert_extends(sigs[f"{name}.{method}"], getattr(ours, method), f"{name}.{method}")
    else:
        assert_extends(sigs[name], ours, name)


@pytest.mark.parametrize(("framework", "name"),
                         [(fw, name) for fw in FRAMEWORKS for name in SHARED + ONLY[fw]])
def test_signature(framework, name, numpy_too_new):
    theirs_mod, ours_mod = modules(framework, numpy_too_new)
    theirs, ours = getattr(theirs_mod, name), getattr(ours_mod, name)
    assert inspect.isclass(theirs) == inspect.isclass(ours)
    if inspect.isclass(theirs):
        assert_extends(theirs.__init__, ours.__init__, f"{name}.__init__")
        for method in METHODS.get(name, []):
            assert_extends(getattr(theirs, method), getattr(ours, method), f"{name}.{method}")
    else:
        assert_extends(theirs, ours, name)


def test_assert_extends_rejects_incompatible_signatures():
    """The checker itself: it must catch what it is meant to catch."""

    def d2l_f(a, b=1):
        pass

    def renamed(a, c=1):
        pass

    def new_default(a, b=2):
        pass

    def extra_required(a, b=1, c=None, *, d):
        pass

    def ok(a, b=1, c=None, *, d=3):
        pass

    assert_extends(d2l_f, ok, "ok")
    for bad in (renamed, new_default, extra_required, lambda a: None):
        with pytest.raises(AssertionError):
            assert_extends(d2l_f, bad, "bad")


def mask_numbers(text: str) -> str:
    return re.sub(r"\d+\.(\d+)", lambda m: "N." + "d" * len(m.group(1)), text)


def test_benchmark_prints_like_d2l(pair, capsys):
    theirs, ours = pair
    printed = []
    for module in (theirs, ours):
        with module.Benchmark("matrix multiplication"):
            pass
        printed.append(capsys.readouterr().out)
    assert mask_numbers(printed[0]) == mask_numbers(printed[1])
    assert mask_numbers(printed[1]) == "matrix multiplication: N.dddd sec\n"
    with ours.Benchmark():
        pass
    with theirs.Benchmark():
        pass
    out = mask_numbers(capsys.readouterr().out)
    assert out == "Done: N.dddd sec\n" * 2


def test_accumulator_like_d2l(pair):
    accumulators = [module.Accumulator(3) for module in pair]
    for acc in accumulators:
        acc.add(1, 2, 3)
        acc.add(0.5, numpy.float32(0.25), 4)
    assert accumulators[0].data == accumulators[1].data == [1.5, 2.25, 7.0]
    assert [accumulators[0][i] for i in range(3)] == [accumulators[1][i] for i in range(3)]
    for acc in accumulators:
        acc.reset()
        acc.add(2, 2)  # fewer values than variables: d2l keeps only as many
    assert accumulators[0].data == accumulators[1].data == [2.0, 2.0]


def test_animator_data_like_d2l(pair, capsys, monkeypatch):
    theirs, ours = pair
    if "IPython" in sys.modules:  # a shell left by another test in this worker: not a notebook
        monkeypatch.setattr(sys.modules["IPython"], "get_ipython", lambda: None)
    animators = [module.Animator(xlabel="epoch", legend=["a", "b", "c"]) for module in pair]
    for animator in animators:
        animator.add(1, (0.5, 0.25, None))
        animator.add(2, (0.4, 0.3, 0.9))
    assert animators[0].X == animators[1].X == [[1, 2], [1, 2], [2]]
    assert animators[0].Y == animators[1].Y == [[0.5, 0.4], [0.25, 0.3], [0.9]]
    capsys.readouterr()  # d2l's Animator prints the figure outside a notebook
    import matplotlib.pyplot as plt

    plt.close("all")


def test_resnet18_parameters_like_d2l(pair):
    theirs, ours = pair
    counts = []
    for module in (theirs, ours):
        net = module.resnet18(10)
        if hasattr(net, "collect_params"):  # gluon: shapes are known after a forward pass
            net.initialize()
            net(module.np.zeros((1, 1, 28, 28)))
            counts.append(sum(p.data().size for p in net.collect_params().values()))
        else:
            net(__import__("torch").zeros(1, 1, 28, 28))  # d2l's has lazy layers
            counts.append(sum(p.numel() for p in net.parameters()))
    assert counts[0] == counts[1]


def test_split_batch_like_d2l_mxnet(numpy_too_new):
    theirs, ours = modules("mxnet", numpy_too_new)
    np = ours.np
    X = np.arange(8 * 5, dtype="float32").reshape(8, 5)
    y = np.arange(8)
    devices = [ours.cpu(0), ours.cpu(1)]
    ref, got = theirs.split_batch(X, y, devices), ours.split_batch(X, y, devices)
    for ref_shards, got_shards in zip(ref, got):
        assert len(ref_shards) == len(got_shards) == 2
        for r, g in zip(ref_shards, got_shards):
            assert r.ctx == g.ctx
            numpy.testing.assert_array_equal(r.asnumpy(), g.asnumpy())
