"""What machine a measurement came from: GPUs, driver, CPU and versions.

Every recorded run of the book (executed notebooks, benchmark results) is stamped with
:func:`describe`, so that a figure always travels with the machine that produced it.
Importing this module imports no framework.
"""

from __future__ import annotations

import datetime
import platform
import shutil
import subprocess


def cpu_name() -> str:
    """The CPU's model name (from ``/proc/cpuinfo`` where there is one)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def _nvidia_smi(field: str) -> str:
    """One ``nvidia-smi --query-gpu`` field of the first GPU, or ``""``."""
    if shutil.which("nvidia-smi") is None:
        return ""
    try:
        done = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = done.stdout.strip().splitlines()
    return lines[0].strip() if done.returncode == 0 and lines else ""


def _framework_gpus(framework: str) -> tuple[str, int, str, str]:
    """(framework with version, number of GPUs, first GPU's name, CUDA version)."""
    if framework == "torch":
        import torch

        n = torch.cuda.device_count()
        name = torch.cuda.get_device_name(0) if n else ""
        return f"PyTorch {torch.__version__}", n, name, (torch.version.cuda or "") if n else ""
    if framework == "mxnet":
        import mxnet as mx

        n = mx.context.num_gpus()
        return f"MXNet {mx.__version__}", n, _nvidia_smi("name") if n else "", ""
    raise ValueError(f"unknown framework {framework!r}: use 'torch' or 'mxnet'")


def describe(framework: str = "torch") -> dict:
    """The machine and versions this process runs on, as a JSON-ready dict.

    Keys: ``machine`` (``"1 x NVIDIA H100 80GB HBM3"`` or ``"CPU only (<cpu>)"``),
    ``gpus``, ``gpu``, ``driver``, ``cuda``, ``cpu``, ``framework``, ``python``,
    ``platform`` and ``date``.
    """
    name, gpus, gpu, cuda = _framework_gpus(framework)
    cpu = cpu_name()
    return {
        "machine": f"{gpus} x {gpu}" if gpus else f"CPU only ({cpu})",
        "gpus": gpus,
        "gpu": gpu,
        "driver": _nvidia_smi("driver_version") if gpus else "",
        "cuda": cuda,
        "cpu": cpu,
        "framework": name,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": datetime.date.today().isoformat(),
    }
