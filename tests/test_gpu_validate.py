"""tools/gpu_validate.sh and ``book.py validate``: a clear refusal without CUDA or beside
another GPU process, the budget (what fits runs, what does not is skipped and reported,
what finished is kept), the order (never on a GPU first, then the oldest), the conditions
each run records, and a dry run of the whole procedure end to end, in a temporary book with
a scripted ``nvidia-smi``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
nbformat = pytest.importorskip("nbformat", reason="the book tools need the full environment")
pytest.importorskip("nbclient", reason="the book tools need the full environment")
pytest.importorskip("yaml", reason="the book tools need the full environment")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from pipeline import config, execute, runinfo, validate  # noqa: E402
from pipeline.config import BookError  # noqa: E402

from d2l_ext import gpu_runs, machine  # noqa: E402

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"

#: nvidia-smi as a script: no process on the GPU unless FAKE_SMI_BUSY is set; clocks with the
#: reasons field of an older driver (clocks_throttle_reasons), or of a newer one
#: (clocks_event_reasons) if FAKE_SMI_NEW is set.
FAKE_SMI = """#!/bin/sh
case "$*" in
  *query-compute-apps*)
    if [ -n "$FAKE_SMI_BUSY" ]; then echo "4242, python3, 20480"; echo "4343, trainer, 512"; fi
    exit 0 ;;
  *clocks_event_reasons*)
    if [ -n "$FAKE_SMI_NEW" ]; then
      echo "1980, 2619, 1980, 2619, 95, 0x0000000000000000"; exit 0
    fi
    echo 'Field "clocks_event_reasons.active" is not a valid field to query.'; exit 2 ;;
  *clocks_throttle_reasons*)
    echo "1755, 2619, 1980, 2619, 87, 0x0000000000000004"; exit 0 ;;
esac
echo "fake nvidia-smi: unexpected $*" >&2
exit 1
"""


@pytest.fixture
def fake_smi(tmp_path, monkeypatch) -> Path:
    """A scripted nvidia-smi first on PATH; returns its folder."""
    folder = tmp_path / "fake-bin"
    folder.mkdir()
    (folder / "nvidia-smi").write_text(FAKE_SMI)
    (folder / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")
    for name in ("FAKE_SMI_BUSY", "FAKE_SMI_NEW"):
        monkeypatch.delenv(name, raising=False)
    return folder


@pytest.fixture
def no_smi(monkeypatch):
    """No nvidia-smi on PATH (as on this CPU machine)."""
    monkeypatch.setenv("PATH", SYSTEM_PATH)
    if machine.shutil.which("nvidia-smi"):
        pytest.skip("this machine has an nvidia-smi")


def _gpu_validate(python: str, *args: str, path: str = SYSTEM_PATH, cwd: Path = ROOT,
                  **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(cwd / "tools" / "gpu_validate.sh"), *args],
                          env={"PYTHON": python, "PATH": path, **env},
                          capture_output=True, text=True, timeout=300, cwd="/")


# ------------------------------------------------------------------ refusals
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


def test_gpu_validate_refuses_while_another_process_uses_the_gpu(fake_smi):
    """Before installing anything, naming the processes."""
    done = _gpu_validate(sys.executable, "--allow-cpu", "--smoke",
                         path=f"{fake_smi}:{SYSTEM_PATH}", FAKE_SMI_BUSY="1")
    assert done.returncode == 1, done.stderr
    assert ("gpu_validate.sh: the GPU is in use by another process: 4242 python3 (20480 MiB), "
            "4343 trainer (512 MiB)") in done.stderr
    assert done.stdout == ""


@no_cuda
def test_validate_refuses_without_cuda_unless_asked():
    with pytest.raises(BookError, match="no CUDA GPU is visible.*--allow-cpu"):
        validate.validate()


def test_validate_refuses_while_another_process_uses_the_gpu(fake_smi, monkeypatch):
    monkeypatch.setenv("FAKE_SMI_BUSY", "1")
    monkeypatch.setattr(validate, "execute", lambda *a, **k: pytest.fail("a chapter ran"))
    with pytest.raises(BookError, match=r"in use by another process: 4242 python3 \(20480 MiB"):
        validate.validate(allow_cpu=True, smoke=True, pin=False)


def test_a_process_that_appears_on_the_gpu_stops_the_run_before_the_next_chapter(
        book, monkeypatch):
    """The chapters finished are kept; the others are reported as not started."""
    intruder = [{"pid": 7, "name": "intruder", "memory_mib": 1}]
    seen = iter([[], []])  # the check at the start, the one before a
    monkeypatch.setattr(validate, "_others_on_gpu", lambda: next(seen, intruder))
    monkeypatch.setattr(validate, "BUSY_WAIT", 0)
    calls, lines = [], []
    monkeypatch.setattr(validate, "execute", lambda name, *a, **k: calls.append(name))
    book(["a", "b", "c"])
    assert validate.validate(allow_cpu=True, smoke=True, pin=False, log=lines.append) == 0
    assert calls == ["a"]
    assert "stopped before b: another process uses the GPU (7 intruder (1 MiB)); the " \
        "chapters finished are kept." in lines
    rows = _rows(lines)
    assert rows["b"][-1] == rows["c"][-1] == "not started: another process on the GPU"


# ------------------------------------------------------------------ order and budget
@pytest.fixture
def book(tmp_path, monkeypatch):
    """``book(names, seconds={})``: a book of chapters ``names`` (in that _toc.yml order),
    none of which ran on a GPU, each estimated at ``seconds[name]`` (default 100 s);
    notebooks (dry runs too) and GPU records stay in ``tmp_path``."""
    monkeypatch.setattr(config, "NOTEBOOKS", tmp_path / "notebooks")
    monkeypatch.setattr(gpu_runs, "RECORDS", tmp_path / "records")
    monkeypatch.setattr(validate, "_others_on_gpu", lambda: [])

    def make(names: list[str], seconds: dict | None = None) -> None:
        monkeypatch.setattr(validate, "chapter_names", lambda: sorted(names))
        monkeypatch.setattr(validate, "toc_order", lambda: list(names))
        monkeypatch.setattr(validate, "CHAPTER_SECONDS",
                            {n: (seconds or {}).get(n, 100) for n in names})

    return make


class FakeClock:
    """The budget's clock, moved on by the fake chapters' runs."""

    def __init__(self, monkeypatch, now: float = 1_000_000.0) -> None:
        self.now = now
        monkeypatch.setattr(validate, "clock", lambda: self.now)


def _rows(lines: list[str]) -> dict[str, list[str]]:
    """The summary table's rows by their "what" column, split on runs of 2+ spaces."""
    import re

    start = next(i for i, line in enumerate(lines) if line.startswith("\nGPU validation on"))
    table = lines[start].splitlines()[3:]  # "", the title, the header
    table = [r for r in table if not r.startswith(("ran:", "skipped for lack of time:"))]
    return {re.split(r"\s{2,}", r)[1]: re.split(r"\s{2,}", r) for r in table}


def test_parse_budget_takes_seconds_or_minutes():
    assert validate.parse_budget("540") == validate.parse_budget("540s") == 540
    assert validate.parse_budget("9m") == 540
    with pytest.raises(ValueError, match="seconds .* or minutes"):
        validate.parse_budget("nine minutes")


def _record(chapter: str, date: str, seconds: float | None = None) -> None:
    run = {"machine": "1 x NVIDIA H100", "gpus": 1, "gpu": "NVIDIA H100",
           "framework": "PyTorch 2.11", "date": date, "size": "full"}
    if seconds:
        run["seconds"] = seconds
    gpu_runs.RECORDS.mkdir(parents=True, exist_ok=True)
    gpu_runs.path(chapter).write_text(gpu_runs.to_json(gpu_runs.GpuRun(
        chapter, run, "abc1234", "v1", (gpu_runs.Figure("x", "x", 1),))), encoding="utf-8")


def _notebook_run(chapter: str, date: str, gpus: int, seconds: float | None = None) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["d2l_ext"] = {"run": {"gpus": gpus, "date": date, "size": "full",
                                      **({"seconds": seconds} if seconds else {})}}
    path = config.NOTEBOOKS / "en" / "torch" / f"{chapter}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def test_chapters_that_never_ran_on_a_gpu_come_first_then_the_oldest(book):
    """A chapter's GPU age: its GPU record's date or its PyTorch notebook's if that ran on a
    GPU (the later); a notebook run on a CPU does not count. Ties in the book's order."""
    book(["e", "d", "c", "b", "a"])
    _record("a", "2026-11-20")
    _record("e", "2026-11-20")
    _record("c", "2026-11-01")
    _notebook_run("c", "2026-11-10", gpus=1, seconds=100)  # later than c's record
    _notebook_run("d", "2026-11-25", gpus=0)  # a CPU run: d never ran on a GPU
    histories = {n: validate.gpu_history(n) for n in "abcde"}
    assert histories["c"] == {"date": "2026-11-10", "seconds": 100}
    assert histories["d"] == histories["b"] == {"date": None, "seconds": None}
    assert validate.order(list("abcde"), histories) == ["d", "b", "c", "e", "a"]


def test_the_estimate_comes_from_the_last_gpu_run_else_the_table(book):
    book(["a", "b"], {"a": 300, "b": 250})
    _record("a", "2026-11-20", seconds=200)
    factor, extra = validate.RECORDED_MARGIN
    need, basis = validate.estimate("a", False, validate.gpu_history("a"))
    assert need == pytest.approx(200 * factor + extra, abs=1) and "took 200 s" in basis
    assert validate.estimate("b", False, validate.gpu_history("b"))[0] == 250
    assert validate.estimate("zz", False, {"date": None, "seconds": None})[0] == \
        validate.UNKNOWN_CHAPTER_SECONDS
    assert validate.estimate("a", True, validate.gpu_history("a"))[0] == \
        validate.SMOKE_CHAPTER_SECONDS


def test_a_chapter_that_does_not_fit_is_skipped_and_reported_the_finished_ones_kept(
        book, monkeypatch, tmp_path):
    """Budget 300 s (20 s kept back): a (100 s) runs and takes 90 s; b (400 s) would not
    finish in the 190 s left and is skipped; c (50 s) fits and runs; d (60 s) is stopped at
    the budget's end (its run raises TimeoutError). a and c stay written."""
    book(["a", "b", "c", "d"], {"a": 100, "b": 400, "c": 50, "d": 60})
    clock = FakeClock(monkeypatch)
    took = {"a": 90, "c": 40, "d": 45}
    calls, lines = [], []

    def fake_execute(name, framework, smoke, timeout=1800, deadline=None, conditions=None):
        calls.append((name, framework, smoke, timeout, deadline))
        clock.now += took[name]
        if name == "d":
            raise TimeoutError("the run reached its deadline")
        (tmp_path / f"{name}.written").touch()
        return []

    monkeypatch.setattr(validate, "execute", fake_execute)
    status = validate.validate(allow_cpu=True, budget=300, started=clock.now, pin=False,
                               log=lines.append)
    assert status == 0  # nothing failed; the summary names what did not run
    assert [c[0] for c in calls] == ["a", "c", "d"]
    assert all(c[1:4] == ("torch", False, None) and c[4] is not None for c in calls)
    rows = _rows(lines)
    assert rows["a"] == ["execute", "a", "100", "90", "ok"]
    assert rows["b"][-1] == "skipped: needs ~400 s, 190 s left"
    assert rows["c"][-1] == "ok"
    assert rows["d"][-1] == "stopped at the budget's end (committed notebooks kept)"
    assert any("raise CHAPTER_SECONDS['d']" in line for line in lines)
    assert sorted(p.name for p in tmp_path.glob("*.written")) == ["a.written", "c.written"]
    summary = lines[-1]
    assert "budget 300 s: used 175 s, 125 s left" in summary
    assert "ran: a, c, d" in summary and "skipped for lack of time: b" in summary


def test_nbval_and_benchmarks_are_asked_for_and_their_time_set_aside(book, monkeypatch,
                                                                      tmp_path):
    """Without flags neither runs; asked for, the benchmarks that fit have their time set
    aside before the chapters and nbval needs time with each chapter: here b no longer fits.
    nbval checks the notebooks of the chapters executed in this run only."""
    book(["a", "b"], {"a": 300, "b": 200})
    clock = FakeClock(monkeypatch)
    monkeypatch.setattr(validate, "benchmark_scripts",
                        lambda: [Path("benchmarks/big.py"), Path("benchmarks/huge.py")])
    monkeypatch.setattr(validate, "BENCHMARK_SECONDS", {"big": 400, "huge": 5000})
    runs = []

    def fake_run(cmd, smoke, timeout=None):
        runs.append((cmd, smoke, timeout))
        clock.now += 50
        if "pytest" not in cmd:
            out = Path(cmd[cmd.index("--json") + 1])
            out.write_text(json.dumps(dict(benchmark="big", columns=["x"], rows=[[1]],
                                           formats=["d"])), encoding="utf-8")
        return 50.0, 0

    def fake_execute(name, *args, **kwargs):
        clock.now += 100

    monkeypatch.setattr(validate, "execute", fake_execute)
    monkeypatch.setattr(validate, "_run", fake_run)
    lines = []
    assert validate.validate(allow_cpu=True, budget=1200, started=clock.now, pin=False,
                             log=lines.append) == 0
    assert runs == []  # neither nbval nor the benchmarks unless asked
    clock.now += 10_000
    lines = []
    assert validate.validate(allow_cpu=True, budget=1200, started=clock.now, pin=False,
                             nbval=True, benchmarks=True, log=lines.append) == 0
    rows = _rows(lines)
    # 1180 s (20 s kept back): 400 s set aside for big (huge never fits); a needs 300 s and
    # nbval's 30 + 2 x 45 s; after a (100 s), b needs 200 + 90 s of 1180 - 100 - 400 - 120
    # = 560 s left: it fits
    assert rows["a"][-1] == "ok" and rows["b"][-1] == "ok"
    assert rows["huge"][-1].startswith("skipped: needs ~5000 s")
    assert rows["big"][-1].endswith(".json")
    nbval_cmd = runs[0][0]
    notebooks = [Path(a) for a in nbval_cmd if a.endswith(".ipynb")]
    assert sorted(p.parent.parent.name + "/" + p.stem for p in notebooks) == [
        "en/a", "en/b", "zh/a", "zh/b"]
    assert all("_build/dry-run/notebooks" in str(p) for p in notebooks)  # a dry run
    assert runs[0][1] is True  # nbval at smoke size
    assert "d2l_ext.machine" in nbval_cmd  # pinned and threads set, as the kernels
    clock.now += 10_000
    book(["a", "b"], {"a": 300, "b": 600})
    runs.clear()
    lines = []
    validate.validate(allow_cpu=True, budget=1200, started=clock.now, pin=False, nbval=True,
                      benchmarks=True, log=lines.append)
    rows = _rows(lines)
    assert rows["b"][-1] == "skipped: needs ~690 s with nbval, 560 s left"


def test_validate_goes_on_after_a_failed_chapter_and_reports_it(book, monkeypatch):
    """A chapter that fails (a cell error, a timeout, a dead kernel: execute raises BookError
    for each) is a FAILED row; the other chapters and the exit status follow; without a
    budget every chapter runs, with no time limit; the process's cores are restored."""
    book(["async-computation", "tuning-tips", "memory"])
    calls, lines = [], []

    def fake_execute(name, framework, smoke, timeout=1800, deadline=None, conditions=None):
        calls.append((name, timeout, deadline))
        if name == "tuning-tips":
            raise BookError("tuning-tips.md (torch) failed")
        return []

    monkeypatch.setattr(validate, "execute", fake_execute)
    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    status = validate.validate(allow_cpu=True, log=lines.append)
    if before is not None:
        assert os.sched_getaffinity(0) == before
    assert [c[0] for c in calls] == ["async-computation", "tuning-tips", "memory"]
    assert {c[1:] for c in calls} == {(None, None)}
    assert status == 1
    summary = lines[-1]
    assert "tuning-tips" in summary and "FAILED" in summary and "no time budget" in summary
    assert sum("FAILED" in line for line in summary.splitlines()) == 1
    monkeypatch.setattr(validate, "execute", lambda *a, **k: [])
    assert validate.validate(allow_cpu=True, pin=False, log=lines.append) == 0


def test_a_timeout_or_a_dead_kernel_fails_the_chapter_not_the_run(monkeypatch):
    """nbclient's CellTimeoutError and DeadKernelError become BookError (validate catches
    those), with nothing written."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    for error in (CellTimeoutError("cell ran past 1800 s"), DeadKernelError("kernel died")):
        def fail(*args, error=error, **kwargs):
            raise error

        monkeypatch.setattr(execute, "run_notebook", fail)
        with pytest.raises(BookError, match="failed; the committed notebooks are unchanged"):
            execute.execute("async-computation", "torch", smoke=True)


@pytest.mark.parametrize("failing", ["nbval", "bad", None])
def test_a_failed_nbval_or_benchmark_is_a_failed_row_and_fails_the_run(book, monkeypatch,
                                                                       failing):
    """nbval's exit status and each benchmark's become rows of the summary: one that failed
    is the only FAILED row, with its exit status, and makes validate's exit status 1; each
    benchmark that ran prints its table after the summary."""
    book(["demo"])
    lines = []

    def fake_run(cmd, smoke, timeout=None):
        what = "nbval" if "pytest" in cmd else Path(cmd[cmd.index("--json") - 1]).stem
        if what == failing:
            return 1.0, 3
        if what != "nbval":
            Path(cmd[cmd.index("--json") + 1]).write_text(json.dumps(dict(
                benchmark=what, columns=["rung", "sec"], rows=[["base", 1.5]],
                formats=["", ".1f"])), encoding="utf-8")
        return 1.0, 0

    monkeypatch.setattr(validate, "execute", lambda *args, **kwargs: [])
    monkeypatch.setattr(validate, "benchmark_scripts",
                        lambda: [Path("benchmarks/good.py"), Path("benchmarks/bad.py")])
    monkeypatch.setattr(validate, "_run", fake_run)
    status = validate.validate(allow_cpu=True, nbval=True, benchmarks=True, pin=False,
                               log=lines.append)
    title = next(i for i, line in enumerate(lines) if line.startswith("\nGPU validation on"))
    rows = _rows(lines)
    assert list(rows) == ["demo", "2 notebooks", "good", "bad"]
    failed = [what for what, row in rows.items() if "FAILED" in row[-1]]
    assert failed == {"nbval": ["2 notebooks"], "bad": ["bad"], None: []}[failing]
    assert status == (1 if failing else 0)
    if failing:
        assert "exit 3" in rows[failed[0]][-1]
    assert "_build/dry-run/results/good-cpu-" in rows["good"][-1]  # a dry run's results
    printed = [line.split(" (", 1)[0].strip() for line in lines[title + 1::2]]
    assert printed == (["good"] if failing == "bad" else ["good", "bad"])
    assert "base  1.5" in lines[title + 2]


def test_benchmarks_are_the_scripts_not_their_helpers():
    names = [p.name for p in validate.benchmark_scripts()]
    assert "multi_device.py" in names
    assert not [n for n in names if n.startswith("_")]


def test_results_are_named_by_benchmark_gpu_and_date(tmp_path):
    machine_ = {"gpus": 1, "gpu": "NVIDIA H100 80GB HBM3", "date": "2026-11-23"}
    path = validate.result_path(Path("benchmarks/multi_device.py"), machine_)
    assert path == validate.RESULTS / "multi_device-nvidia-h100-80gb-hbm3-2026-11-23.json"
    cpu = validate.result_path(Path("x/speed.py"), dict(machine_, gpus=0, gpu=""), tmp_path)
    assert cpu == tmp_path / "speed-cpu-2026-11-23.json"


# ------------------------------------------------------------------ the conditions
def test_steal_is_the_share_of_cpu_time_the_hypervisor_took():
    before = [100, 0, 50, 800, 0, 0, 0, 50, 0, 0]
    after = [200, 0, 100, 1550, 0, 0, 0, 150, 30, 0]  # guest time is inside user time
    hz = os.sysconf("SC_CLK_TCK")
    assert machine.steal(before, after) == {"percent": 10.0, "seconds": round(100 / hz, 2)}
    assert machine.steal(None, after) is None
    ticks = machine.cpu_ticks()
    if Path("/proc/stat").exists():
        assert len(ticks) >= 8 and machine.steal(ticks, machine.cpu_ticks())["percent"] >= 0


def test_clock_reasons_name_the_bits_but_not_idle():
    assert machine.clock_reasons(0x1) == []
    assert machine.clock_reasons(0x0) == machine.clock_reasons(None) == []
    assert machine.clock_reasons(0x4 | 0x40 | 0x1) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert machine.clock_reasons(0x1000) == ["0x1000"]


@pytest.mark.parametrize("new_driver", [True, False])
def test_clocks_are_read_under_either_name_of_the_reasons_field(fake_smi, monkeypatch,
                                                                new_driver):
    if new_driver:
        monkeypatch.setenv("FAKE_SMI_NEW", "1")
    reading = machine.gpu_clocks()
    field = "clocks_event_reasons.active" if new_driver else "clocks_throttle_reasons.active"
    assert reading["field"] == field
    assert (reading["sm"], reading["max_sm"], reading["mem"], reading["max_mem"]) == (
        (1980, 1980, 2619, 2619) if new_driver else (1755, 1980, 2619, 2619))
    sampler = machine.ClockSampler(interval=0.05)
    sampler.start()
    time.sleep(0.3)
    summary = sampler.stop()
    assert summary["samples"] >= 3 and summary["busy_samples"] == summary["samples"]
    assert summary["reasons_field"] == field
    assert summary["throttle_reasons"] == ([] if new_driver else ["sw_power_cap"])
    assert summary["sm_mhz"]["median"] == (1980 if new_driver else 1755)


def test_without_nvidia_smi_nothing_is_read_and_a_note_says_so(no_smi):
    assert machine.gpu_clocks() == {"note": "nvidia-smi not found"}
    assert machine.gpu_processes() is None
    sampler = machine.ClockSampler()
    sampler.start()
    assert sampler.stop() == {"note": "nvidia-smi not found"}


def test_without_cpu_affinity_nothing_is_pinned_and_a_note_says_so(monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    plan = machine.plan_placement()
    assert plan["pinned"] is False and "not available" in plan["note"] and plan["threads"] >= 1
    cmd = machine.pinned_command(["python3", "-c", "pass"], plan)
    assert "--cores" not in cmd and cmd[-3:] == ["python3", "-c", "pass"]


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity here")
def test_the_launcher_pins_the_command_and_sets_the_thread_counts():
    core = min(os.sched_getaffinity(0))
    plan = {"pinned": True, "kernel_cores": str(core), "threads": 3}
    probe = ("import json, os; print(json.dumps([sorted(os.sched_getaffinity(0)), "
             "[os.environ[v] for v in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS', "
             "'OPENBLAS_NUM_THREADS', 'D2L_PINNED')]]))")
    done = subprocess.run(machine.pinned_command([sys.executable, "-c", probe], plan),
                          capture_output=True, text=True, check=True, timeout=60)
    assert json.loads(done.stdout) == [[core], ["3", "3", "3", "1"]]
    assert machine.cores_text({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    assert machine.parse_cores("0-2,5,7-8") == {0, 1, 2, 5, 7, 8}


def test_a_cpu_is_named_without_trademark_signs_and_in_each_language():
    assert runinfo.cpu_name("Intel(R) Xeon(R) Processor", "en") == "Intel Xeon Processor"
    assert runinfo.cpu_name("Intel(R) Xeon(R) Processor", "zh") == "Intel Xeon 处理器"
    assert runinfo.cpu_name("AMD EPYC 7R13 Processor", "zh") == "AMD EPYC 7R13 处理器"
    assert runinfo.cpu_name("Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz", "en") == \
        "Intel Core i7-8700 CPU @ 3.20GHz"
    assert runinfo.cpu_name("arm", "zh") == "arm"  # a bare architecture stays as it is
    run = {"cpu": "Intel(R) Xeon(R) Processor", "gpus": 0}
    assert runinfo.machine_name(run, "zh") == "仅 CPU（Intel Xeon 处理器）"


def test_the_run_note_names_the_clocks_of_a_gpu_run_only():
    run = {"machine": "1 x NVIDIA H100 80GB HBM3", "gpus": 1, "cpu": "Xeon",
           "framework": "PyTorch 2.11.0", "python": "3.12", "date": "2026-11-24",
           "size": "full"}
    plain = runinfo.run_note(run, "en")
    assert "clock" not in plain and plain.endswith("device).")
    clocks = {"sm_mhz": {"min": 1700, "median": 1755, "max": 1980}, "max_sm_mhz": 1980,
              "throttle_reasons": []}
    quiet = dict(run, conditions={"gpu_clocks": clocks})
    assert runinfo.run_note(quiet, "en").endswith(", GPU clocks at 1755/1980 MHz, no throttling.")
    assert runinfo.run_note(quiet, "zh").endswith("，GPU 时钟 1755/1980 MHz，未降频。")
    hot = dict(run, conditions={"gpu_clocks": dict(clocks, throttle_reasons=[
        "sw_power_cap", "sw_thermal_slowdown", "hw_thermal_slowdown"])})
    assert runinfo.run_note(hot, "en").endswith("1755/1980 MHz, throttled (power cap, thermal).")
    assert runinfo.run_note(hot, "zh").endswith("有降频（功耗上限、温度）。")
    cpu = dict(quiet, gpus=0, machine="CPU only (Xeon)")
    assert "clock" not in runinfo.run_note(cpu, "en")
    assert runinfo.run_note(dict(run, conditions={"gpu_clocks": {"note": "nvidia-smi not found"}}),
                            "en") == plain


# ------------------------------------------------------------ real (tiny) kernels
DEMO = """# {title}

```{{code-cell}} ipython3
# NBVAL_CHECK_OUTPUT
print(6 * 7)
```

```{{code-cell}} ipython3
{last}
```
"""


def _write_chapter(root: Path, name: str, last: str = "print('done')") -> None:
    for lang, title in (("en", "Demo"), ("zh", "演示")):
        path = root / "chapters" / lang / f"{name}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(DEMO.format(title=title, last=last), encoding="utf-8")


def test_a_plain_execute_keeps_the_cells_timestamps_and_records_no_conditions(
        tmp_path, monkeypatch):
    """Both languages keep nbclient's per-cell timestamps (the same run); a run outside
    the GPU validation records nothing more (no duration, no conditions)."""
    monkeypatch.setattr(config, "CHAPTERS", tmp_path / "chapters")
    monkeypatch.setattr(config, "NOTEBOOKS", tmp_path / "notebooks")
    _write_chapter(tmp_path, "demo")
    execute.execute("demo", "torch", smoke=True)
    en, zh = (nbformat.read(tmp_path / "notebooks" / lang / "torch" / "demo.ipynb", 4)
              for lang in ("en", "zh"))
    for nb in (en, zh):
        run = nb.metadata["d2l_ext"]["run"]
        assert "conditions" not in run and "seconds" not in run and "placement" not in run
        for cell in (c for c in nb.cells if c.cell_type == "code"):
            stamps = cell.metadata["execution"]
            assert stamps["iopub.execute_input"] <= stamps["shell.execute_reply"]
    assert ([c.metadata["execution"] for c in en.cells if c.cell_type == "code"]
            == [c.metadata["execution"] for c in zh.cells if c.cell_type == "code"])


def test_a_run_past_its_deadline_is_stopped_and_writes_nothing(tmp_path, monkeypatch):
    """The kernel (and what it started) is killed, the committed notebooks stay."""
    monkeypatch.setattr(config, "CHAPTERS", tmp_path / "chapters")
    monkeypatch.setattr(config, "NOTEBOOKS", tmp_path / "notebooks")
    _write_chapter(tmp_path, "slow")
    execute.execute("slow", "torch", smoke=True)
    committed = {lang: (tmp_path / "notebooks" / lang / "torch" / "slow.ipynb").read_bytes()
                 for lang in ("en", "zh")}
    pid_file = tmp_path / "kernel.pid"
    _write_chapter(tmp_path, "slow", f"import os, time\nopen({str(pid_file)!r}, 'w')"
                                     ".write(str(os.getpid()))\ntime.sleep(120)")
    start = time.monotonic()
    with pytest.raises(TimeoutError) as stopped:
        execute.execute("slow", "torch", smoke=True, deadline=start + 10)
    assert time.monotonic() - start < 40
    assert "committed notebooks are unchanged" in " ".join(stopped.value.__notes__)
    for lang, content in committed.items():
        assert (tmp_path / "notebooks" / lang / "torch" / "slow.ipynb").read_bytes() == content
    unfinished = nbformat.read(tmp_path / "_build" / "unfinished" / "slow-torch.ipynb", 4)
    cells = {c.source.splitlines()[-1]: c for c in unfinished.cells if c.cell_type == "code"}
    assert cells["print(6 * 7)"].outputs[0]["text"] == "42\n"
    assert "shell.execute_reply" not in cells["time.sleep(120)"].metadata["execution"]
    assert "_build/unfinished/slow-torch.ipynb" in " ".join(stopped.value.__notes__)
    pid = int(pid_file.read_text())
    for _ in range(50):
        if not execute._alive(pid) or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail("the kernel outlived its deadline")


def test_dry_run_end_to_end(tmp_path, fake_smi):
    """``bash tools/gpu_validate.sh --allow-cpu --smoke`` in a temporary book (its own copy
    of the tools, one tiny chapter, one tiny benchmark) with a scripted nvidia-smi: the
    chapter, nbval and the benchmark run within the budget, the notebooks and result go to
    _build/dry-run, and each language's notebook records the run's duration, load, steal,
    GPU clocks and throttling, placement, and its cells' timestamps."""
    import shutil

    book_root = tmp_path / "book"
    (book_root / "tools").mkdir(parents=True)
    for item in ("book.py", "gpu_validate.sh", "requirements-gpu.txt"):
        shutil.copy(ROOT / "tools" / item, book_root / "tools" / item)
    shutil.copytree(ROOT / "tools" / "pipeline", book_root / "tools" / "pipeline",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "_config.yml", book_root / "_config.yml")
    (book_root / "_toc.yml").write_text("format: jb-book\nroot: index\nchapters:\n"
                                        "  - file: chapters/demo\n", encoding="utf-8")
    (book_root / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "nbval_sanitize.cfg", book_root / "tests")
    (book_root / "benchmarks").mkdir()
    shutil.copy(ROOT / "benchmarks" / "_record.py", book_root / "benchmarks")
    (book_root / "benchmarks" / "tiny.py").write_text(
        "import os, sys\n"
        "sys.path.insert(0, os.path.dirname(__file__))\n"
        "from _record import save\n"
        "cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else 0\n"
        "save(sys.argv[sys.argv.index('--json') + 1], 'tiny', 'torch', {}, ['cores', 'threads'],"
        " [[cores, os.environ['OMP_NUM_THREADS']]], ['d', ''])\n", encoding="utf-8")
    _write_chapter(book_root, "demo", "import torch\nprint(torch.ones(3).sum().item())")

    done = _gpu_validate(sys.executable, "--allow-cpu", "--smoke", "--no-install", "--nbval",
                         "--benchmarks", "--budget", "10m", cwd=book_root,
                         path=f"{fake_smi}:{Path(sys.executable).parent}:{SYSTEM_PATH}",
                         HOME=str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "gpu_validate.sh: no GPU (dry run)" in out
    assert "budget 600 s: used" in out and "skipped for lack of time: nothing" in out
    lines = out.splitlines()
    assert any(x.startswith("execute ") and x.endswith(" ok") for x in lines)
    assert any(x.startswith("nbval ") and x.endswith(" passed") for x in lines)
    assert any(x.startswith("benchmark ") and "_build/dry-run/results/tiny-cpu-" in x
               for x in lines)
    assert not (book_root / "notebooks").exists()  # the committed place is left alone
    assert not (book_root / "benchmarks" / "results").exists()
    dry = book_root / "_build" / "dry-run"
    en, zh = (nbformat.read(dry / "notebooks" / lang / "torch" / "demo.ipynb", 4)
              for lang in ("en", "zh"))
    run = en.metadata["d2l_ext"]["run"]
    assert zh.metadata["d2l_ext"]["run"] == run
    assert 0 < run["seconds"] < 300 and run["size"] == "smoke"
    conditions = run["conditions"]
    assert len(conditions["load"]["before"]) == len(conditions["load"]["after"]) == 3
    assert conditions["steal"]["percent"] >= 0 and conditions["steal"]["seconds"] >= 0
    clocks = conditions["gpu_clocks"]
    assert clocks["reasons_field"] == "clocks_throttle_reasons.active"  # an older driver
    assert clocks["sm_mhz"]["median"] == 1755 and clocks["max_sm_mhz"] == 1980
    assert clocks["mem_mhz"]["median"] == 2619 and clocks["max_mem_mhz"] == 2619
    assert clocks["throttle_reasons"] == ["sw_power_cap"] and clocks["samples"] >= 2
    placement = conditions["placement"]
    kernel = placement["kernel"]  # what the kernel saw
    assert kernel["OMP_NUM_THREADS"] == kernel["MKL_NUM_THREADS"] == str(placement["threads"])
    assert kernel["torch_threads"] == placement["threads"]
    if placement["pinned"]:
        assert kernel["cores"] == placement["kernel_cores"]
        assert placement["pipeline_cores"] not in machine.parse_cores(kernel["cores"])
    else:
        assert placement["note"]
    for nb in (en, zh):
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(c.metadata["execution"]["shell.execute_reply"] for c in code)
        assert code[2].outputs[0]["text"] == "3.0\n"
    note = next(c for c in en.cells if c.metadata.get("d2l_ext", {}).get("role") == "run-note")
    assert "clock" not in note.source  # a CPU run's note names no GPU clocks
    cores, threads = json.loads(next((dry / "results").glob("tiny-cpu-*.json"))
                                .read_text())["rows"][0]  # the benchmark ran as the kernel
    assert threads == str(placement["threads"])
    if placement["pinned"]:
        assert cores == len(machine.parse_cores(placement["kernel_cores"]))


def test_a_failed_run_keeps_what_it_executed_apart_from_the_committed_notebooks(
        tmp_path, monkeypatch):
    """The cells a failed run executed, with their outputs, go to _build/unfinished (named
    in the error), to read after the GPU runner is gone; the committed notebooks stay."""
    monkeypatch.setattr(config, "CHAPTERS", tmp_path / "chapters")
    monkeypatch.setattr(config, "NOTEBOOKS", tmp_path / "notebooks")
    _write_chapter(tmp_path, "broken", "raise ValueError('planted')")
    with pytest.raises(BookError, match="planted") as failed:
        execute.execute("broken", "torch", smoke=True)
    assert "what ran: " in str(failed.value)
    assert "_build/unfinished/broken-torch.ipynb" in str(failed.value)
    kept = nbformat.read(execute.unfinished_path("broken", "torch"), 4)
    cells = {c.source.splitlines()[-1]: c for c in kept.cells if c.cell_type == "code"}
    assert cells["print(6 * 7)"].outputs[0]["text"] == "42\n"
    assert cells["raise ValueError('planted')"].outputs[0]["ename"] == "ValueError"
    assert not (tmp_path / "notebooks").exists()
    assert not list((tmp_path / "_build" / "unfinished").glob(".*.part"))


def test_validate_stops_before_any_chapter_where_fashion_mnist_is_missing(book, monkeypatch):
    """No data and no internet: one clear error naming D2L_DATA_DIR, and no chapter starts."""
    from d2l_ext import fashion_mnist

    book(["async-computation"])

    def missing(*args, **kwargs):
        raise fashion_mnist.DataError("Fashion-MNIST was not found and could not be "
                                      "downloaded (no network).")

    monkeypatch.setattr(fashion_mnist, "find", missing)
    monkeypatch.setattr(validate, "execute", lambda *a, **k: pytest.fail("a chapter ran"))
    with pytest.raises(BookError, match="(?s)not found.*set D2L_DATA_DIR"):
        validate.validate(allow_cpu=True, pin=False, log=lambda line: None)
