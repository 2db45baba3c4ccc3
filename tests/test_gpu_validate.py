"""tools/gpu_validate.sh and ``book.py validate``: a clear refusal without CUDA, and the
pieces of the validation that do not need a GPU (where results go, what is a benchmark)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("nbformat", reason="the book tools need the full environment")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from pipeline import validate  # noqa: E402
from pipeline.config import BookError  # noqa: E402

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")


def _gpu_validate(python: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "tools" / "gpu_validate.sh"), *args],
                          env={"PYTHON": python, "PATH": "/usr/local/bin:/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120, cwd="/")


@no_cuda
def test_gpu_validate_refuses_a_machine_without_cuda_before_installing_anything():
    done = _gpu_validate(sys.executable)
    assert done.returncode == 1
    assert "gpu_validate.sh: no CUDA GPU is visible to PyTorch" in done.stderr
    assert "tools/test.sh" in done.stderr
    assert done.stdout == ""  # nothing was installed, nothing else ran


def test_gpu_validate_names_a_python_without_torch(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")],
                   check=True)
    done = _gpu_validate(str(tmp_path / "venv" / "bin" / "python"))
    assert done.returncode == 1
    assert "PyTorch is not installed for" in done.stderr


def test_gpu_validate_names_a_missing_python():
    done = _gpu_validate("/nonexistent/python3")
    assert done.returncode == 1
    assert "no /nonexistent/python3 found" in done.stderr


@no_cuda
def test_validate_refuses_without_cuda_unless_asked():
    with pytest.raises(BookError, match="no CUDA GPU is visible.*--allow-cpu"):
        validate.validate()


def test_benchmarks_are_the_scripts_not_their_helpers():
    names = [p.name for p in validate.benchmark_scripts()]
    assert "multi_device.py" in names
    assert not [n for n in names if n.startswith("_")]


def test_results_are_named_by_benchmark_gpu_and_date():
    machine = {"gpus": 1, "gpu": "NVIDIA H100 80GB HBM3", "date": "2026-11-23"}
    path = validate.result_path(Path("benchmarks/multi_device.py"), machine)
    assert path == validate.RESULTS / "multi_device-nvidia-h100-80gb-hbm3-2026-11-23.json"
    cpu = validate.result_path(Path("x/speed.py"), dict(machine, gpus=0, gpu=""))
    assert cpu.name == "speed-cpu-2026-11-23.json"
