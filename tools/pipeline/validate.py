"""GPU validation: the book run where it is meant to run.

``tools/gpu_validate.sh`` sets up the tools and calls :func:`validate`, which

1. executes every chapter's PyTorch notebook at full size (one run fills both languages;
   a chapter that fails keeps its committed notebooks),
2. runs nbval over the executed PyTorch notebooks (at smoke size: the outputs it compares
   do not depend on the size, and a full-size second run of the ladder would double the
   time on a slow GPU),
3. runs every benchmark in ``benchmarks/`` and writes its JSON result, stamped with the
   machine, under ``benchmarks/results/``,
4. prints a summary: what ran, how long it took, the benchmark tables.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from pipeline import config
from pipeline.config import LANGUAGES, BookError, shown
from pipeline.execute import execute
from pipeline.sources import chapter_names

BENCHMARKS = config.ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results"

NO_CUDA = ("no CUDA GPU is visible to PyTorch {torch} (CUDA build: {cuda}). Run the GPU "
           "validation on a machine with an NVIDIA GPU and a CUDA build of PyTorch; on a "
           "CPU-only machine run tools/test.sh (or pass --allow-cpu for a dry run).")


def benchmark_scripts() -> list[Path]:
    """The benchmarks: every ``benchmarks/*.py`` whose name does not start with ``_``."""
    return sorted(p for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_"))


def result_path(script: Path, machine: dict) -> Path:
    """``benchmarks/results/<benchmark>-<gpu or cpu>-<date>.json``."""
    device = machine["gpu"] if machine["gpus"] else "cpu"
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")
    return RESULTS / f"{script.stem}-{slug}-{machine['date']}.json"


def _record():
    """``benchmarks/_record.py``: the benchmarks' shared table and result helpers."""
    spec = importlib.util.spec_from_file_location("_record", BENCHMARKS / "_record.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(cmd: list[str], smoke: bool) -> tuple[float, int]:
    env = dict(os.environ, D2L_SMOKE="1" if smoke else "")
    start = time.perf_counter()
    code = subprocess.run(cmd, cwd=config.ROOT, env=env).returncode
    return time.perf_counter() - start, code


def validate(smoke: bool = False, allow_cpu: bool = False, nbval: bool = True,
             benchmarks: bool = True, log=print) -> int:
    """Execute, check and benchmark the PyTorch half; returns the exit status (0: all ok)."""
    import torch

    from d2l_ext.machine import describe

    machine = describe("torch")
    if not machine["gpus"] and not allow_cpu:
        raise BookError(NO_CUDA.format(torch=torch.__version__, cuda=torch.version.cuda))
    log(f"validating on {machine['machine']} (driver {machine['driver'] or '-'}, "
        f"CUDA {machine['cuda'] or '-'}), {machine['framework']}, Python {machine['python']}"
        + (", smoke size" if smoke else ", full size"))
    rows: list[list] = []

    for name in chapter_names():
        start = time.perf_counter()
        try:
            execute(name, "torch", smoke, timeout=None)  # a slow GPU takes what it needs
            outcome = "ok"
        except BookError as err:
            log(str(err))
            outcome = "FAILED (committed notebooks kept)"
        rows.append(["execute", name, time.perf_counter() - start, outcome])
        log(f"execute {name}: {outcome}")

    if nbval:
        notebooks = [str(config.NOTEBOOKS / lang / "torch" / f"{name}.ipynb")
                     for lang in LANGUAGES for name in chapter_names()]
        seconds, code = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                              "--nbval-lax", "--nbval-sanitize-with",
                              str(config.ROOT / "tests" / "nbval_sanitize.cfg"), *notebooks],
                             smoke=True)  # the checked cells do not depend on the size
        rows.append(["nbval", f"{len(notebooks)} notebooks", seconds,
                     "passed" if code == 0 else f"FAILED (pytest exit {code})"])

    results = []
    if benchmarks:
        RESULTS.mkdir(parents=True, exist_ok=True)
        for script in benchmark_scripts():
            out = result_path(script, machine)
            seconds, code = _run([sys.executable, str(script), "--json", str(out)], smoke)
            rows.append(["benchmark", script.stem, seconds,
                         shown(out) if code == 0 else f"FAILED (exit {code})"])
            if code == 0:
                results.append(out)

    table = _record().table
    log(f"\nGPU validation on {machine['machine']}, {machine['date']}")
    log(table(["stage", "what", "seconds", "outcome"], rows, ["", "", ".0f", ""]))
    for path in results:
        result = json.loads(path.read_text(encoding="utf-8"))
        log(f"\n{result['benchmark']} ({shown(path)}):")
        log(table(result["columns"], result["rows"], result["formats"]))
    failed = [row for row in rows if "FAILED" in str(row[3])]
    return 1 if failed else 0
