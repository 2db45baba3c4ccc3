"""Chapter "GPU basics": the hand-built DataParallel the page teaches gives the one-device
result, and the page's Hogwild script learns (and fails cleanly)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = ROOT / "chapters" / "en" / "gpu-basics.md"


def _cells(framework: str) -> list[str]:
    pytest.importorskip("yaml", reason="the book tools need the full environment")
    sys.path.insert(0, str(ROOT / "tools"))
    from pipeline import sources

    return [c.source for c in sources.parse(CHAPTER).cells
            if c.kind == "code" and c.framework == framework]


def _run_cells(framework: str, markers: tuple[str, ...], names: dict) -> dict:
    """Execute the page's code cells of ``framework`` that contain the markers, in order."""
    cells = _cells(framework)
    for marker in markers:
        found = [c for c in cells if marker in c]
        assert len(found) == 1, f"{len(found)} {framework} cells contain {marker!r}"
        exec(found[0], names)
    return names


def test_the_pages_data_parallel_equals_one_device_torch():
    torch = pytest.importorskip("torch")
    from d2l_ext import torch as d2l
    from d2l_ext.utils import text_table

    names = _run_cells("torch", ("def data_parallel(", "one_device = outputs_and_grads"), {
        "torch": torch, "nn": torch.nn, "F": torch.nn.functional, "d2l": d2l,
        "text_table": text_table, "on_gpu": False})
    assert len(names["devices"]) == 2
    (label, outputs, gradients), = names["dp_rows"]
    assert label == "hand-built, cpu, cpu"
    assert outputs < 1e-6 and gradients < 1e-4
    # an odd batch, and one smaller than the number of devices
    data_parallel, lenet = names["data_parallel"], names["lenet"]
    for batch in (5, 1):
        X = torch.randn(batch, 1, 28, 28)
        torch.testing.assert_close(data_parallel(lenet, X, [torch.device("cpu")] * 3), lenet(X))


def test_the_pages_data_parallel_equals_one_device_mxnet(numpy_too_new):
    if numpy_too_new:
        pytest.skip("MXNet needs numpy < 1.24")
    mx = pytest.importorskip("mxnet")
    from mxnet import autograd, gluon, init, np, npx

    from d2l_ext import mxnet as d2l
    from d2l_ext.utils import text_table

    npx.set_np()
    names = _run_cells("mxnet", ("def data_parallel(", "def make_lenet("), {
        "mx": mx, "autograd": autograd, "gluon": gluon, "init": init, "np": np, "d2l": d2l,
        "text_table": text_table, "on_gpu": False})
    (label, outputs, gradients), = names["dp_rows"]
    assert label == "hand-built, cpu(0), cpu(1)"
    assert outputs < 1e-5 and gradients < 1e-4


@pytest.fixture
def hogwild(tmp_path, fmnist_dir, chapter_script):
    """Run the page's hogwild.py on a slice of Fashion-MNIST in ``tmp_path``."""
    pytest.importorskip("torch")
    script = chapter_script("gpu-basics", "hogwild.py")
    (tmp_path / "hogwild.py").write_text(script, encoding="utf-8")
    env = dict(os.environ, D2L_DATA_DIR=str(fmnist_dir))

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "hogwild.py", "--num-train", "2000", "--num-test", "1000", *args],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    return run


def test_the_pages_hogwild_script_learns(hogwild, tmp_path):
    """Two processes train the shared model; the parent, which never trains, sees it learn."""
    done = hogwild("--processes", "2", "--epochs", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "hogwild.json").read_text())
    assert result["processes"] == 2 and result["examples"] == 2000
    assert result["accuracy_before"] < 0.2  # chance is 0.1
    assert result["accuracy_after"] > 0.6
    assert "2 processes, 2 epochs of 2,000 images" in done.stdout


def test_a_failing_hogwild_process_is_reported_and_leaves_no_result(hogwild, tmp_path):
    done = hogwild("--processes", "2", "--batch-size", "0")
    assert done.returncode != 0
    assert "2 training processes failed (exit codes [1, 1])" in done.stderr
    assert not (tmp_path / "hogwild.json").exists()
