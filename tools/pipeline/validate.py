"""GPU validation: the book run where it is meant to run, planned to fit a brief GPU runner.

A GPU runner is lent to the book rarely and briefly (a quarter of an hour, its start
included). ``tools/gpu_validate.sh`` sets up the tools and calls :func:`validate`, which

1. refuses to start while another process uses the GPU (``nvidia-smi
   --query-compute-apps``), and checks again before each chapter;
2. pins itself (the pipeline, nbclient, the clock readings) to its first core and starts
   each kernel on the others, with OpenMP, MKL and PyTorch's thread counts set to their
   number (``d2l_ext.machine.plan_placement``; skipped, with a note, without affinity);
3. takes the chapters named, or else every chapter ordered by the age of its GPU outputs:
   those that never ran on a GPU first, then the oldest (:func:`gpu_history`), ties in the
   book's order (``_toc.yml``);
4. executes their PyTorch notebooks at full size, one at a time, each only if its estimated
   run time (:func:`estimate`) fits in what is left of the budget; a run still going at
   the budget's end is stopped. A chapter that finishes is written at once (both languages);
   one that fails or is stopped keeps its committed notebooks. Each run records in its run
   metadata its duration (the next estimate) and ``conditions``: load average before and
   after, CPU steal over the run, GPU clocks and throttle reasons over the run, placement;
   its cells keep nbclient's timestamps;
5. with ``--nbval``, runs nbval over the notebooks it executed (at smoke size: the outputs
   it compares do not depend on the size), if its estimate fits;
6. with ``--benchmarks``, runs the benchmarks in ``benchmarks/`` that fit (their time is set
   aside before the chapters are planned), each JSON result stamped with the machine under
   ``benchmarks/results/``;
7. prints a summary: what ran, what was skipped for lack of time, the budget used.

A run at smoke size or without a GPU (``--allow-cpu``) is a dry run: its notebooks and
benchmark results go to ``_build/dry-run``, never over the committed ones.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from d2l_ext import machine as host
from pipeline import config
from pipeline.config import LANGUAGES, BookError, shown
from pipeline.execute import Interrupted, _sigterm_stops, execute
from pipeline.sources import chapter_names
from pipeline.toc import with_section_pages

BENCHMARKS = config.ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results"

#: A chapter's full-size run on one H100 or H200, in seconds, kernel start included, until a
#: GPU run of it records its duration: conservative guesses. A chapter stopped at the end of
#: a budget says how long it ran; raise its entry above that.
CHAPTER_SECONDS = {
    "async-computation": 180,
    "multi-gpu-concise": 600,  # an H200 run was stopped unfinished after 402 s (2026-11-29)
    "tuning-tips": 300,  # step timings, loaders (the chapter took 600 s before its split)
    "tuning-tips-switches": 420,  # precisions, layouts, compilations, larger batches
    "tuning-tips-ladder": 600,  # rounds of whole epochs, compilations, time to 0.90
    # (estimates: this version of the ladder has not run on a GPU yet)
    "host-device-sync": 240,
    "host-device-sync-measuring": 180,
    "gpu-basics": 360,
    "gpu-basics-streams": 240,  # the Hogwild rounds run on the CPU
    "communication": 360,
    "communication-scale": 120,
    "memory": 180,  # the whole chapter ran in 68 s on an H200 (2026-11-29), before its split
    "memory-sharding": 240,
    "memory-oom": 180,
    "transformers": 300,  # an estimate: GPT-2 small's shape trains and recomputes on a GPU
    "transformers-attention": 120,  # an estimate: memory and byte counts, no training
}
#: A chapter missing from :data:`CHAPTER_SECONDS`.
UNKNOWN_CHAPTER_SECONDS = 600
#: Any chapter at smoke size (a dry run).
SMOKE_CHAPTER_SECONDS = 120
#: A duration recorded by an earlier GPU run counts as this much more (another machine,
#: another day): estimate = recorded x factor + seconds.
RECORDED_MARGIN = (1.2, 15)
#: nbval: pytest's start, and each notebook at smoke size.
NBVAL_SECONDS = (30, 45)
#: A benchmark at full size, and any at smoke size.
BENCHMARK_SECONDS = {"multi_device": 600, "speed_ladder": 600}
UNKNOWN_BENCHMARK_SECONDS = 600
SMOKE_BENCHMARK_SECONDS = 120
#: Kept free at the end of a budget: writing the last notebooks, the summary.
END_SLACK = 20
#: Before a chapter, how long another process on the GPU may take to leave (our last
#: kernel may still be going away) before the run stops.
BUSY_WAIT = 10

NO_CUDA = ("no CUDA GPU is visible to PyTorch {torch} (CUDA build: {cuda}). Run the GPU "
           "validation on a machine with an NVIDIA GPU and a CUDA build of PyTorch; on a "
           "CPU-only machine run tools/test.sh (or pass --allow-cpu for a dry run).")
BUSY = ("the GPU is in use by another process: {processes}. Figures measured beside it "
        "would not be the GPU's; wait until it ends (or end it) and run again.")


def clock() -> float:
    """The wall clock a budget runs on (seconds since the epoch; tests replace it)."""
    return time.time()


def parse_budget(text: str) -> float:
    """``"540"`` or ``"540s"``: seconds; ``"9m"``: minutes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|min)?\s*", text)
    if not match:
        raise ValueError(f"a budget is seconds (540) or minutes (9m), not {text!r}")
    return float(match.group(1)) * (60 if match.group(2) in ("m", "min") else 1)


class Budget:
    """The time a run may take, counted from ``started`` (``None``: no limit)."""

    def __init__(self, seconds: float | None, started: float | None = None) -> None:
        self.seconds = seconds
        self.started = clock() if started is None else started

    def used(self) -> float:
        return clock() - self.started

    def left(self) -> float:
        """Seconds left, :data:`END_SLACK` kept back (infinite without a budget)."""
        if self.seconds is None:
            return math.inf
        return self.seconds - self.used() - END_SLACK

    def deadline(self) -> float | None:
        """The end of :meth:`left` as a ``time.monotonic()`` time (for ``execute``)."""
        return None if self.seconds is None else time.monotonic() + max(self.left(), 0)


# ---------------------------------------------------------------- order and estimates
def toc_order() -> list[str]:
    """The pages in the book's order (``_toc.yml``; a chapter's section pages after it)."""
    from pipeline import toc

    return toc.pages()


def gpu_history(name: str) -> dict:
    """The book's latest GPU run of chapter ``name``: ``date`` (``None``: it never ran on a
    GPU) and ``seconds`` (its duration, if recorded). Read from the chapter's GPU record
    (``d2l_ext/data/gpu_runs/<name>.json``) and its English PyTorch notebook's run, if that
    ran on a GPU; the later one counts, the other fills in a duration it lacks."""
    import nbformat

    from d2l_ext import gpu_runs

    runs = []
    record = gpu_runs.load(name)
    if record is not None:
        runs.append(record.run)
    path = config.NOTEBOOKS / config.RUN_LANGUAGE / "torch" / f"{name}.ipynb"
    if path.exists():
        run = nbformat.read(path, 4).metadata.get("d2l_ext", {}).get("run", {})
        if run.get("gpus") and run.get("size", "full") == "full":
            runs.append(run)
    runs.sort(key=lambda run: run.get("date", ""), reverse=True)
    seconds = [run["seconds"] for run in runs if run.get("seconds")]
    return {"date": runs[0].get("date") if runs else None,
            "seconds": seconds[0] if seconds else None}


def order(names: list[str], histories: dict[str, dict]) -> list[str]:
    """``names``, those that never ran on a GPU first, then the oldest GPU run first; ties
    in the book's order."""
    toc = toc_order()
    place = {name: toc.index(name) if name in toc else len(toc) for name in names}
    return sorted(names, key=lambda n: (histories[n]["date"] is not None,
                                        histories[n]["date"] or "", place[n], n))


def estimate(name: str, smoke: bool, history: dict) -> tuple[float, str]:
    """The seconds chapter ``name`` is expected to take, and what that rests on."""
    if smoke:
        return SMOKE_CHAPTER_SECONDS, "smoke size"
    if history.get("seconds"):
        factor, extra = RECORDED_MARGIN
        return (math.ceil(history["seconds"] * factor + extra),
                f"its GPU run of {history['date']} took {history['seconds']:.0f} s")
    if name in CHAPTER_SECONDS:
        return CHAPTER_SECONDS[name], "the default for the chapter"
    return UNKNOWN_CHAPTER_SECONDS, "the default for a chapter not in the table"


def benchmark_estimate(script: Path, smoke: bool) -> float:
    if smoke:
        return SMOKE_BENCHMARK_SECONDS
    return BENCHMARK_SECONDS.get(script.stem, UNKNOWN_BENCHMARK_SECONDS)


def nbval_estimate(notebooks: int) -> float:
    return NBVAL_SECONDS[0] + NBVAL_SECONDS[1] * notebooks


# ------------------------------------------------------------------------- the parts
def benchmark_scripts() -> list[Path]:
    """The benchmarks: every ``benchmarks/*.py`` whose name does not start with ``_``."""
    return sorted(p for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))


def result_path(script: Path, machine: dict, folder: Path | None = None) -> Path:
    """``benchmarks/results/<benchmark>-<gpu or cpu>-<date>.json`` (or in ``folder``)."""
    device = machine["gpu"] if machine["gpus"] else "cpu"
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")
    return (folder or RESULTS) / f"{script.stem}-{slug}-{machine['date']}.json"


def _record():
    """``benchmarks/_record.py``: the benchmarks' shared table and result helpers."""
    spec = importlib.util.spec_from_file_location("_record", BENCHMARKS / "_record.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(cmd: list[str], smoke: bool, timeout: float | None = None) -> tuple[float, int | None]:
    """Run ``cmd`` in its own process group; (seconds, exit status), the status ``None`` if
    it ran past ``timeout`` seconds and was killed with everything it started."""
    env = dict(os.environ, D2L_SMOKE="1" if smoke else "")
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=config.ROOT, env=env, start_new_session=True)
    try:
        code = proc.wait(timeout=timeout)
    except BaseException as err:  # the timeout, or Ctrl-C
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        if not isinstance(err, subprocess.TimeoutExpired):
            raise
        code = None
    return time.perf_counter() - start, code


def _others_on_gpu() -> list[dict] | None:
    """The processes on the GPU other than this one (``None``: nobody can tell)."""
    found = host.gpu_processes()
    return None if found is None else [p for p in found if p["pid"] != os.getpid()]


def _quiet_gpu(wait: float) -> list[dict]:
    """The other processes on the GPU, after waiting up to ``wait`` seconds for them to go."""
    end = time.monotonic() + wait
    while True:
        others = _others_on_gpu() or []
        if not others or time.monotonic() >= end:
            return others
        time.sleep(1)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _table(rows: list[list]) -> str:
    """The summary table: stage and what left-aligned, the numbers right-aligned."""
    head = ["stage", "what", "estimate s", "seconds", "outcome"]
    text = [[str(r[0]), str(r[1]), _seconds(r[2]), _seconds(r[3]), str(r[4])] for r in rows]
    widths = [max(len(line[i]) for line in [head, *text]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i in (0, 1, 4) else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join(line(c) for c in [head, *text])


# ----------------------------------------------------------------------- the procedure
def validate(chapters: list[str] | None = None, *, smoke: bool = False,
             allow_cpu: bool = False, nbval: bool = False, benchmarks: bool = False,
             budget: float | None = None, started: float | None = None, pin: bool = True,
             log=print) -> int:
    """Execute, check and benchmark the PyTorch half within ``budget`` seconds counted from
    ``started`` (a ``time.time()``; default now; ``None`` budget: no limit). Returns the
    exit status: 1 if a chapter, nbval or a benchmark failed, else 0 (also when some were
    skipped for lack of time: the summary names them)."""
    import torch

    clock_budget = Budget(budget, started)
    others = _others_on_gpu()  # (before this process asks CUDA anything)
    if others:
        raise BookError(BUSY.format(processes=host.processes_named(others)))
    machine = host.describe("torch")
    if not machine["gpus"] and not allow_cpu:
        raise BookError(NO_CUDA.format(torch=torch.__version__, cuda=torch.version.cuda))
    known = chapter_names()
    unknown = sorted(set(chapters or []) - set(known))
    if unknown:
        raise BookError(f"no chapter named {', '.join(unknown)}; the chapters are: "
                        + ", ".join(known))
    _data_found()
    chapters = with_section_pages(chapters or [])
    histories = {name: gpu_history(name) for name in chapters or known}
    names = list(chapters) if chapters else order(known, histories)
    dry = smoke or not machine["gpus"]

    placement = host.plan_placement()
    pinned_before = None
    if pin and placement["pinned"]:
        pinned_before = host.pin_process(host.parse_cores(placement["pipeline_cores"]))
    where = (f"pipeline on core {placement['pipeline_cores']}, kernels on cores "
             f"{placement['kernel_cores']}" if placement["pinned"] else placement["note"])
    log(f"validating on {machine['machine']} (driver {machine['driver'] or '-'}, "
        f"CUDA {machine['cuda'] or '-'}), {machine['framework']}, Python {machine['python']}"
        + (", smoke size" if smoke else ", full size")
        + f"; {where}, {placement['threads']} threads"
        + (f"; budget {budget:.0f} s, {clock_budget.used():.0f} s used by the setup"
           if budget is not None else "; no time budget")
        + ("" if others is not None else "; nvidia-smi not found: no check for other "
           "processes on the GPU, no clock readings"))
    log(("chapters as named: " if chapters else "chapters, oldest GPU outputs first: ")
        + ", ".join(f"{n} ({histories[n]['date'] or 'never on a GPU'}, "
                    f"~{estimate(n, smoke, histories[n])[0]:.0f} s)" for n in names))

    rows: list[list] = []
    executed: list[str] = []
    saved_notebooks = config.NOTEBOOKS
    results_folder = RESULTS
    try:
        if dry:  # a dry run never replaces the committed notebooks and results
            dry_run = saved_notebooks.parent / "_build" / "dry-run"
            config.NOTEBOOKS, results_folder = dry_run / "notebooks", dry_run / "results"
            log(f"dry run: notebooks and results go to {shown(dry_run)}")
        with _sigterm_stops():
            set_aside = 0.0  # for the benchmarks asked for that fit
            planned, unplanned = [], []
            for script in benchmark_scripts() if benchmarks else []:
                need = benchmark_estimate(script, smoke)
                if set_aside + need <= clock_budget.left():
                    planned.append(script)
                    set_aside += need
                else:
                    unplanned.append(["benchmark", script.stem, need, None,
                                      f"skipped: needs ~{need:.0f} s, the budget leaves "
                                      f"{max(clock_budget.left() - set_aside, 0):.0f} s"])
            try:
                stopped = _chapters(names, histories, smoke, nbval, clock_budget, set_aside,
                                    placement, rows, executed, log)
            except KeyboardInterrupt:
                log(_summary(machine, clock_budget, rows))
                raise Interrupted("stopped during the GPU validation. Notebooks written: "
                                  + (", ".join(executed) or "none") + ".") from None
            if stopped:
                log(stopped)
            if nbval:
                _nbval(executed, clock_budget, set_aside, placement, rows)
            rows += unplanned
            results = _benchmarks(planned, machine, smoke, clock_budget, placement,
                                  results_folder, rows, log)
    finally:
        config.NOTEBOOKS = saved_notebooks
        if pinned_before is not None:
            host.pin_process(pinned_before)

    log(_summary(machine, clock_budget, rows))
    table = _record().table
    for path in results:
        result = json.loads(path.read_text(encoding="utf-8"))
        log(f"\n{result['benchmark']} ({shown(path)}):")
        log(table(result["columns"], result["rows"], result["formats"]))
    failed = [row for row in rows if "FAILED" in str(row[4])]
    return 1 if failed else 0


def _data_found() -> None:
    """Find Fashion-MNIST (the chapters train on it), downloading it if it is missing, before
    any chapter runs: a GPU runner that has neither the data nor internet access stops here,
    at once, not in every chapter after its kernel started."""
    from d2l_ext import fashion_mnist

    try:
        fashion_mnist.find()
    except fashion_mnist.DataError as err:
        raise BookError(f"{err}\nOn a GPU runner without internet access, bring the four "
                        "files along and set D2L_DATA_DIR to their folder.") from err


def _chapters(names, histories, smoke, nbval, budget, set_aside, placement, rows, executed,
              log) -> str:
    """Run the chapters that fit, one at a time; a line if the run stopped early."""
    per_chapter = nbval_estimate(len(LANGUAGES)) - NBVAL_SECONDS[0] if nbval else 0
    for i, name in enumerate(names):
        need, basis = estimate(name, smoke, histories[name])
        nbval_share = per_chapter + (NBVAL_SECONDS[0] if nbval and not executed else 0)
        room = budget.left() - set_aside - (nbval_estimate(len(LANGUAGES) * len(executed))
                                            if nbval and executed else 0)
        if need + nbval_share > room:
            rows.append(["execute", name, need, None,
                         f"skipped: needs ~{need + nbval_share:.0f} s"
                         + (" with nbval" if nbval_share else "")
                         + f", {max(room, 0):.0f} s left"])
            log(f"execute {name}: skipped for lack of time (estimate {need:.0f} s, from "
                f"{basis}; {max(room, 0):.0f} s left)")
            continue
        others = _quiet_gpu(BUSY_WAIT)
        if others:
            rows += [["execute", n, None, None, "not started: another process on the GPU"]
                     for n in names[i:]]
            return (f"stopped before {name}: another process uses the GPU "
                    f"({host.processes_named(others)}); the chapters finished are kept.")
        log(f"execute {name} (estimate {need:.0f} s, from {basis}"
            + (f"; {room:.0f} s left)" if math.isfinite(room) else ")"))
        conditions = host.Conditions(placement)
        start = clock()
        conditions.start()
        try:
            execute(name, "torch", smoke, timeout=None,  # a slow GPU takes what it needs
                    deadline=budget.deadline(), conditions=conditions)
            outcome = "ok"
            executed.append(name)
        except BookError as err:
            log(str(err))
            outcome = "FAILED (committed notebooks kept)"
        except TimeoutError:
            seconds = clock() - start
            outcome = "stopped at the budget's end (committed notebooks kept)"
            log(f"execute {name}: stopped after {seconds:.0f} s at the end of the budget; "
                f"its estimate ({need:.0f} s, from {basis}) was short: raise "
                f"CHAPTER_SECONDS[{name!r}] in tools/pipeline/validate.py above {seconds:.0f}")
        finally:
            conditions.stop()
        seconds = clock() - start
        rows.append(["execute", name, need, seconds, outcome])
        log(f"execute {name}: {outcome} in {seconds:.0f} s")
    return ""


def _nbval(executed: list[str], budget: Budget, set_aside: float, placement: dict,
           rows: list[list]) -> None:
    """nbval over the notebooks executed in this run (both languages), if it fits."""
    notebooks = [str(config.NOTEBOOKS / lang / "torch" / f"{name}.ipynb")
                 for lang in LANGUAGES for name in executed]
    need = nbval_estimate(len(notebooks))
    room = budget.left() - set_aside
    if not notebooks:
        rows.append(["nbval", "0 notebooks", None, None, "skipped: no chapter was executed"])
        return
    if need > room:
        rows.append(["nbval", f"{len(notebooks)} notebooks", need, None,
                     f"skipped: needs ~{need:.0f} s, {max(room, 0):.0f} s left"])
        return
    cmd = host.pinned_command([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "--nbval-lax", "--nbval-sanitize-with",
                          str(config.ROOT / "tests" / "nbval_sanitize.cfg"), *notebooks],
                         placement)
    seconds, code = _run(cmd, smoke=True,  # the checked cells do not depend on the size
                         timeout=room if math.isfinite(room) else None)
    rows.append(["nbval", f"{len(notebooks)} notebooks", need, seconds,
                 "passed" if code == 0 else "stopped at the budget's end" if code is None
                 else f"FAILED (pytest exit {code})"])


def _benchmarks(planned: list[Path], machine: dict, smoke: bool, budget: Budget,
                placement: dict, folder: Path, rows: list[list], log) -> list[Path]:
    """Each benchmark of ``planned`` that still fits; the results written."""
    results = []
    if planned:
        folder.mkdir(parents=True, exist_ok=True)
    for script in planned:
        need, room = benchmark_estimate(script, smoke), budget.left()
        if need > room:
            rows.append(["benchmark", script.stem, need, None,
                         f"skipped: needs ~{need:.0f} s, {max(room, 0):.0f} s left"])
            continue
        out = result_path(script, machine, folder)
        log(f"benchmark {script.stem} (estimate {need:.0f} s)")
        seconds, code = _run(host.pinned_command([sys.executable, str(script), "--json",
                                                 str(out)], placement),
                             smoke, timeout=room if math.isfinite(room) else None)
        rows.append(["benchmark", script.stem, need, seconds,
                     shown(out) if code == 0 else "stopped at the budget's end"
                     if code is None else f"FAILED (exit {code})"])
        if code == 0:
            results.append(out)
    return results


def _summary(machine: dict, budget: Budget, rows: list[list]) -> str:
    """The table of what ran, then one line each: ran, skipped for lack of time, budget."""
    ran = [r[1] for r in rows if r[3] is not None]
    skipped = [r[1] for r in rows if str(r[4]).startswith("skipped: needs")]
    used = budget.used()
    spent = (f"budget {budget.seconds:.0f} s: used {used:.0f} s, "
             f"{max(budget.seconds - used, 0):.0f} s left" if budget.seconds is not None
             else f"no time budget: took {used:.0f} s")
    return (f"\nGPU validation on {machine['machine']}, {machine['date']} ({spent})\n"
            + _table(rows)
            + f"\nran: {', '.join(ran) or 'nothing'}"
            + f"\nskipped for lack of time: {', '.join(skipped) or 'nothing'}")
