"""tools/gpu_validate.sh and ``book.py validate``: a clear refusal without CUDA, and the
pieces of the validation that do not need a GPU (where results go, what is a benchmark)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("nbformat", reason="the book tools need the full environment")
pytest.importorskip("yaml", reason="the book tools need the full environment")

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


def test_validate_goes_on_after_a_failed_chapter_and_reports_it(monkeypatch):
    """A chapter that fails (a cell error, a timeout, a dead kernel: execute raises BookError
    for each) is a FAILED row; the other chapters, nbval (at smoke size) and the exit
    status follow; no chapter runs under a time limit."""
    calls, runs, lines = [], [], []

    def fake_execute(name, framework, smoke, timeout=1800):
        calls.append((name, framework, smoke, timeout))
        if name == "tuning-tips":
            raise BookError("tuning-tips.md (torch) failed")
        return []

    def fake_run(cmd, smoke):
        runs.append((cmd, smoke))
        return 1.0, 0

    monkeypatch.setattr(validate, "execute", fake_execute)
    monkeypatch.setattr(validate, "_run", fake_run)
    status = validate.validate(allow_cpu=True, benchmarks=False, log=lines.append)
    names = validate.chapter_names()
    assert [c[0] for c in calls] == names and {c[3] for c in calls} == {None}
    assert status == 1
    summary = lines[-1]
    assert "tuning-tips" in summary and "FAILED" in summary
    assert [smoke for _, smoke in runs] == [True]  # nbval at smoke size
    assert sum("FAILED" in line for line in summary.splitlines()) == 1
    monkeypatch.setattr(validate, "execute", lambda *a, **k: [])
    assert validate.validate(allow_cpu=True, benchmarks=False, log=lines.append) == 0


def test_a_timeout_or_a_dead_kernel_fails_the_chapter_not_the_run(monkeypatch):
    """nbclient's CellTimeoutError and DeadKernelError become BookError (validate catches
    those), with nothing written."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from pipeline import execute as execute_module

    for error in (CellTimeoutError("cell ran past 1800 s"), DeadKernelError("kernel died")):
        def fail(*args, error=error, **kwargs):
            raise error

        monkeypatch.setattr(execute_module, "run_notebook", fail)
        with pytest.raises(BookError, match="failed; the committed notebooks are unchanged"):
            execute_module.execute("async-computation", "torch", smoke=True)


@pytest.mark.parametrize("failing", ["nbval", "bad", None])
def test_a_failed_nbval_or_benchmark_is_a_failed_row_and_fails_the_run(monkeypatch, tmp_path,
                                                                        failing):
    """nbval's exit status and each benchmark's become rows of the summary: one that failed
    is the only FAILED row, with its exit status, and makes validate's exit status 1; each
    benchmark that ran prints its table after the summary."""
    lines = []

    def fake_run(cmd, smoke):
        what = "nbval" if "pytest" in cmd else Path(cmd[1]).stem
        if what == failing:
            return 1.0, 3
        if what != "nbval":
            Path(cmd[3]).write_text(json.dumps(dict(
                benchmark=what, columns=["rung", "sec"], rows=[["base", 1.5]],
                formats=["", ".1f"])), encoding="utf-8")
        return 1.0, 0

    monkeypatch.setattr(validate, "chapter_names", lambda: ["demo"])
    monkeypatch.setattr(validate, "execute", lambda *args, **kwargs: [])
    monkeypatch.setattr(validate, "RESULTS", tmp_path)
    monkeypatch.setattr(validate, "benchmark_scripts",
                        lambda: [Path("benchmarks/good.py"), Path("benchmarks/bad.py")])
    monkeypatch.setattr(validate, "_run", fake_run)
    status = validate.validate(allow_cpu=True, log=lines.append)
    title = next(i for i, line in enumerate(lines) if line.startswith("\nGPU validation on"))
    rows = {row.split()[1]: row for row in lines[title + 1].splitlines()[1:]}
    assert list(rows) == ["demo", "2", "good", "bad"]  # "2": nbval's 2 notebooks
    failed = [what for what, row in rows.items() if "FAILED" in row]
    assert failed == {"nbval": ["2"], "bad": ["bad"], None: []}[failing]
    assert status == (1 if failing else 0)
    if failing:
        assert "exit 3" in rows[failed[0]]
    assert str(tmp_path / "good-cpu-") in rows["good"]
    printed = [line.split(" (", 1)[0].strip() for line in lines[title + 2::2]]
    assert printed == (["good"] if failing == "bad" else ["good", "bad"])
    assert "base  1.5" in lines[title + 3]
