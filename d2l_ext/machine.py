"""What machine a measurement came from: GPUs, driver, CPU and versions.

Every recorded run of the book (executed notebooks, benchmark results) is stamped with
:func:`describe`, so that a figure always travels with the machine that produced it. The GPU
validation also records the conditions of each run (:class:`Conditions`: load, CPU steal,
GPU clocks and throttle reasons, the cores and threads of the kernel, which it starts
through ``python -m d2l_ext.machine``, :func:`launch`) and refuses a GPU that another
process uses (:func:`gpu_processes`). Importing this module imports no framework, nor
anything outside the standard library.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time


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


# ------------------------------------------------------------------ the conditions of a run
# The GPU validation (tools/gpu_validate.sh, tools/pipeline/validate.py) records with each
# chapter it runs what could have disturbed its figures: the load on the machine and the CPU
# time the hypervisor took (steal) over the run, the GPU's clocks and the reasons it held
# them back, and where the kernel ran (its cores and thread count). A runner lent briefly
# is trusted only as far as these say it was quiet.

#: The variables that set the thread count of OpenMP, MKL and OpenBLAS (PyTorch's intra-op
#: pool takes OMP_NUM_THREADS).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
#: The GPU's throttle (since driver 535 "clocks event") reasons, by bit of the active mask.
CLOCK_REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
                 0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
                 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
                 0x100: "display_clock_setting"}
#: The field of the active reasons: newer drivers name it clocks_event_reasons, older ones
#: clocks_throttle_reasons (tried in this order; then the clocks alone).
REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active", "")
_CLOCK_FIELDS = "clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,utilization.gpu"


def load_average() -> list[float] | None:
    """The load average over 1, 5 and 15 minutes, or ``None`` where the system has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def cpu_ticks() -> list[int] | None:
    """The machine's CPU time so far, in clock ticks, from ``/proc/stat``'s ``cpu`` line:
    user, nice, system, idle, iowait, irq, softirq, steal, ...; ``None`` without it."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    return [int(x) for x in fields[1:]]


def steal(before: list[int] | None, after: list[int] | None) -> dict | None:
    """CPU time the hypervisor gave to others between two :func:`cpu_ticks`: ``percent`` of
    all the machine's CPU time, and ``seconds`` (summed over the cores)."""
    if before is None or after is None or min(len(before), len(after)) < 8:
        return None
    delta = [a - b for a, b in zip(after[:8], before[:8])]  # guest time is inside user time
    total = sum(delta)
    return {"percent": round(100 * delta[7] / total, 2) if total > 0 else 0.0,
            "seconds": round(delta[7] / os.sysconf("SC_CLK_TCK"), 2)}


def _smi(*args: str) -> subprocess.CompletedProcess | None:
    """``nvidia-smi ARGS``, or ``None`` where there is no nvidia-smi or it hangs."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _number(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def gpu_processes() -> list[dict] | None:
    """The processes that hold a CUDA context on a GPU (``nvidia-smi --query-compute-apps``):
    ``pid``, ``name`` and ``memory_mib`` each; ``None`` where nvidia-smi is missing or fails
    (then nobody can tell). In a container, nvidia-smi may not see other containers'."""
    done = _smi("--query-compute-apps=pid,process_name,used_memory",
                "--format=csv,noheader,nounits")
    if done is None or done.returncode != 0:
        return None
    found = []
    for line in done.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            found.append({"pid": int(parts[0]), "name": ",".join(parts[1:-1]),
                          "memory_mib": _number(parts[-1])})
    return found


def processes_named(processes: list[dict]) -> str:
    """``"4242 python3 (20480 MiB), ..."``."""
    return ", ".join(f"{p['pid']} {p['name']}"
                     + (f" ({p['memory_mib']} MiB)" if p.get("memory_mib") is not None else "")
                     for p in processes)


def clock_reasons(mask: int | None) -> list[str]:
    """The reasons in an active-reasons mask that held the clocks back (idle is not one)."""
    if not mask:
        return []
    names = [name for bit, name in CLOCK_REASONS.items() if mask & bit]
    names += [hex(1 << i) for i in range(mask.bit_length())
              if mask & (1 << i) and (1 << i) not in CLOCK_REASONS]
    return [n for n in names if n != "gpu_idle"]


def gpu_clocks(field: str | None = None) -> dict:
    """One reading of the first GPU: ``sm``, ``mem`` (current clocks, MHz), ``max_sm``,
    ``max_mem``, ``util`` (%), ``reasons`` (the active mask) and ``field`` (the name of the
    reasons field this driver knows; pass it back to skip the others). ``{"note": ...}``
    where there is no reading (no nvidia-smi, no GPU)."""
    if shutil.which("nvidia-smi") is None:
        return {"note": "nvidia-smi not found"}
    refused = ""
    for name in REASON_FIELDS if field is None else (field,):
        done = _smi(f"--query-gpu={_CLOCK_FIELDS}" + (f",{name}" if name else ""),
                    "--format=csv,noheader,nounits")
        if done is None:
            return {"note": "nvidia-smi did not answer"}
        lines = done.stdout.strip().splitlines()
        values = [v.strip() for v in lines[0].split(",")] if lines else []
        if done.returncode == 0 and len(values) == 5 + bool(name):
            sm, mem, max_sm, max_mem, util = (_number(v) for v in values[:5])
            mask = None
            if name:
                try:
                    mask = int(values[5], 16)
                except ValueError:
                    pass
            return {"sm": sm, "mem": mem, "max_sm": max_sm, "max_mem": max_mem, "util": util,
                    "reasons": mask, "field": name}
        refused = (done.stderr.strip() or done.stdout.strip() or
                   f"exit status {done.returncode}").splitlines()[-1]
    return {"note": f"nvidia-smi gave no clocks: {refused}"}


class ClockSampler:
    """Reads :func:`gpu_clocks` every ``interval`` seconds in a thread, from :meth:`start` to
    :meth:`stop`, which sums the readings up: the SM and memory clocks while the GPU was
    busy (all readings if it never was), the maximum clocks and the reasons seen."""

    def __init__(self, interval: float = 2.0) -> None:
        self.interval = interval
        self.samples: list[dict] = []
        self.note = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        first = gpu_clocks()
        if "note" in first:
            self.note = first["note"]
            return
        self.samples.append(first)
        self._thread = threading.Thread(target=self._loop, name="gpu-clocks", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._read()

    def _read(self) -> None:
        sample = gpu_clocks(self.samples[0]["field"])
        if "note" not in sample:
            self.samples.append(sample)

    def stop(self) -> dict:
        """Stop reading; the summary (``{"note": ...}`` without readings)."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._read()  # the state at the end
        if not self.samples:
            return {"note": self.note or "no reading"}
        busy = [s for s in self.samples if (s["util"] or 0) > 0]

        def spread(key: str) -> dict | None:
            values = sorted(s[key] for s in busy or self.samples if s[key] is not None)
            if not values:
                return None
            return {"min": values[0], "median": statistics.median_low(values),
                    "max": values[-1]}

        last = self.samples[-1]
        reasons = sorted({r for s in self.samples for r in clock_reasons(s["reasons"])})
        return {"samples": len(self.samples), "busy_samples": len(busy),
                "sm_mhz": spread("sm"), "mem_mhz": spread("mem"),
                "max_sm_mhz": last["max_sm"], "max_mem_mhz": last["max_mem"],
                "reasons_field": last["field"] or None,
                "throttle_reasons": reasons if last["field"] else None,
                "throttled_samples": sum(bool(clock_reasons(s["reasons"]))
                                         for s in self.samples)}


# ------------------------------------------------------------- where the kernel runs
def cores_text(cores) -> str:
    """``{0, 1, 2, 5}`` -> ``"0-2,5"``."""
    ranges: list[list[int]] = []
    for core in sorted(cores):
        if ranges and core == ranges[-1][1] + 1:
            ranges[-1][1] = core
        else:
            ranges.append([core, core])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in ranges)


def parse_cores(text: str) -> set[int]:
    """``"0-2,5"`` -> ``{0, 1, 2, 5}``."""
    cores: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cores.update(range(int(first), int(last or first) + 1))
    return cores


def plan_placement() -> dict:
    """Where the GPU validation runs what: the first core this process may use for the
    pipeline (nbclient, the clock readings), the others for the kernel (and the DataLoader
    workers it starts, which inherit its cores), with every thread count set to the number
    of the kernel's cores. Without CPU affinity, or with one core, nothing is pinned (a
    ``note`` says why) and the thread count is the number of cores."""
    if not (hasattr(os, "sched_getaffinity") and hasattr(os, "sched_setaffinity")):
        return {"pinned": False, "threads": os.cpu_count() or 1,
                "note": "CPU affinity is not available on this system: nothing pinned"}
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return {"pinned": False, "threads": 1,
                "note": f"one core ({cores_text(cores)}): the kernel shares it, nothing pinned"}
    return {"pinned": True, "pipeline_cores": cores_text(cores[:1]),
            "kernel_cores": cores_text(cores[1:]), "threads": len(cores) - 1}


def pin_process(cores: set[int]) -> set[int] | None:
    """Pin every thread of this process to ``cores`` (threads started later inherit the
    pin of the thread that starts them); the cores it had before, ``None`` if it cannot."""
    try:
        before = os.sched_getaffinity(0)
        tasks = [int(t) for t in os.listdir("/proc/self/task")] if os.path.isdir(
            "/proc/self/task") else [0]
        for task in tasks:
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                os.sched_setaffinity(task, cores)
    except (AttributeError, OSError):
        return None
    return before


def pinned_command(cmd: list[str], placement: dict) -> list[str]:
    """``cmd`` started through :func:`launch` (``python -m d2l_ext.machine``): on the
    kernel's cores of ``placement`` (:func:`plan_placement`), with the thread counts set."""
    prefix = [sys.executable, "-m", "d2l_ext.machine", "--threads", str(placement["threads"])]
    if placement.get("pinned"):
        prefix += ["--cores", placement["kernel_cores"]]
    return [*prefix, "--", *cmd]


def placement_seen(framework: str = "torch") -> dict:
    """Where this process runs, as it sees it: its cores, the thread-count variables and,
    once the framework is imported, its thread count."""
    seen: dict = {"cores": cores_text(os.sched_getaffinity(0))
                  if hasattr(os, "sched_getaffinity") else ""}
    seen.update({v: os.environ.get(v, "") for v in THREAD_VARIABLES})
    if framework == "torch" and "torch" in sys.modules:
        seen["torch_threads"] = sys.modules["torch"].get_num_threads()
    return seen


class Conditions:
    """The GPU validation's watch over one chapter's run: the kernel starts through
    :meth:`kernel_command` (pinned, thread counts set); :meth:`start` and :meth:`finish`
    bracket the run and add to its record (``run``) its duration (``seconds``) and its
    ``conditions``: the load average before and after, the steal over the run, the GPU's
    clocks and throttle reasons over the run (:class:`ClockSampler`), and the placement
    planned and the one the kernel saw (the probe reports it as ``placement``)."""

    def __init__(self, placement: dict, interval: float = 2.0) -> None:
        self.placement = placement
        self.interval = interval
        self._clocks: ClockSampler | None = None

    def kernel_command(self, cmd: list[str]) -> list[str]:
        return pinned_command(cmd, self.placement)

    def start(self) -> None:
        self._started = time.monotonic()
        self._load = load_average()
        self._ticks = cpu_ticks()
        self._clocks = ClockSampler(self.interval)
        self._clocks.start()

    def stop(self) -> dict:
        """Stop reading the clocks (also after a run that failed); their summary."""
        clocks, self._clocks = self._clocks, None
        return clocks.stop() if clocks is not None else {"note": "not read"}

    def finish(self, run: dict) -> dict:
        """``run`` with the run's duration and conditions."""
        seconds = time.monotonic() - self._started
        ticks = cpu_ticks()
        run = dict(run)
        placement = dict(self.placement)
        seen = run.pop("placement", None)
        if seen is not None:
            placement["kernel"] = seen
        run["seconds"] = round(seconds, 1)
        run["conditions"] = {"load": {"before": self._load, "after": load_average()},
                             "steal": steal(self._ticks, ticks), "gpu_clocks": self.stop(),
                             "placement": placement}
        return run


def launch(argv: list[str]) -> None:
    """``python -m d2l_ext.machine [--cores 1-15] --threads N -- COMMAND ...``: run COMMAND
    (it replaces this process) with every thread-count variable at N and, given cores,
    pinned to them. ``D2L_PINNED`` tells the kernel's probe to report where it ran."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m d2l_ext.machine",
                                     description=launch.__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--cores", help="e.g. 1-15 (default: as inherited)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        parser.error("no command to run")
    os.environ.update({v: str(args.threads) for v in THREAD_VARIABLES}, D2L_PINNED="1")
    if args.cores:
        os.sched_setaffinity(0, parse_cores(args.cores))
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    launch(sys.argv[1:])
