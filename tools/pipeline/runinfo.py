"""Where a run happened: the record the kernel reports, and the note each page shows."""

from __future__ import annotations

import re

#: Run in the kernel after a notebook: prints the machine and versions as JSON; in a kernel
#: that the GPU validation pinned to cores (``D2L_PINNED``), also where it ran.
_PROBE = """
import json as _json
import os as _os
from d2l_ext.machine import describe as _describe, placement_seen as _placement_seen
_run = _describe({framework!r})
if _os.environ.get("D2L_PINNED"):
    _run["placement"] = _placement_seen({framework!r})
print(_json.dumps(_run))
"""

_SIZES = {"en": {"full": "default sizes (the notebook sizes itself to the device)",
                 "smoke": "smoke size (a quick, reduced run)"},
          "zh": {"full": "默认规模（由笔记本按设备选定）",
                 "smoke": "冒烟测试规模（缩小的快速运行）"}}


def probe(framework: str) -> str:
    """The code that reports, as JSON, the machine and versions a notebook ran on."""
    return _PROBE.format(framework=framework)


def cpu_name(cpu: str, lang: str) -> str:
    """The processor's name as the system reports it, without trademark signs, and in zh
    with 处理器 for the word "Processor": "Intel(R) Xeon(R) Processor" is "Intel Xeon 处理器"."""
    words = [word for word in re.sub(r"\((R|TM|tm)\)", "", cpu).split()]
    if lang == "zh":
        words = ["处理器" if word == "Processor" else word for word in words]
    return " ".join(words)


def machine_name(run: dict, lang: str) -> str:
    """The machine of a run as a page in ``lang`` names it."""
    if run.get("gpus"):
        gpu = run.get("gpu") or run["machine"]
        return f"{run['gpus']} 块 {gpu}" if lang == "zh" else f"{run['gpus']} \u00d7 {gpu}"
    cpu = cpu_name(run["cpu"], lang)
    return f"仅 CPU（{cpu}）" if lang == "zh" else f"CPU only ({cpu})"


#: The reasons a GPU held its clocks back (``d2l_ext.machine.CLOCK_REASONS``), as the run
#: note names them.
_REASONS = {
    "en": {"applications_clocks_setting": "application clocks setting",
           "sw_power_cap": "power cap", "hw_slowdown": "hardware slowdown",
           "sync_boost": "sync boost", "sw_thermal_slowdown": "thermal",
           "hw_thermal_slowdown": "thermal", "hw_power_brake_slowdown": "power brake",
           "display_clock_setting": "display clock setting"},
    "zh": {"applications_clocks_setting": "应用时钟设置", "sw_power_cap": "功耗上限",
           "hw_slowdown": "硬件降速", "sync_boost": "同步加速", "sw_thermal_slowdown": "温度",
           "hw_thermal_slowdown": "温度", "hw_power_brake_slowdown": "电源制动",
           "display_clock_setting": "显示时钟设置"},
}


def clocks_note(run: dict, lang: str) -> str:
    """``"GPU clocks at 1755/1980 MHz, no throttling"`` for a GPU run whose clocks the GPU
    validation recorded (the SM clock's median while the GPU was busy, of its maximum);
    ``""`` otherwise."""
    clocks = run.get("conditions", {}).get("gpu_clocks") or {}
    if not run.get("gpus") or not clocks.get("sm_mhz") or not clocks.get("max_sm_mhz"):
        return ""
    mhz = f"{clocks['sm_mhz']['median']}/{clocks['max_sm_mhz']} MHz"
    reasons = clocks.get("throttle_reasons")
    names = list(dict.fromkeys(_REASONS[lang].get(r, r) for r in reasons or []))
    sep = "、" if lang == "zh" else ", "
    if lang == "zh":
        state = ("降频原因未知" if reasons is None else
                 f"有降频（{sep.join(names)}）" if names else "未降频")
        return f"GPU 时钟 {mhz}，{state}"
    state = ("throttling unknown" if reasons is None else
             f"throttled ({sep.join(names)})" if names else "no throttling")
    return f"GPU clocks at {mhz}, {state}"


def run_note(run: dict, lang: str) -> str:
    """The sentence under a page's title: which machine, versions and size made its outputs
    (and for a GPU run whose clocks were recorded, the clocks)."""
    size = _SIZES[lang][run["size"]]
    clocks = clocks_note(run, lang)
    if lang == "zh":
        return (f"> 本页输出来自一次真实运行：{machine_name(run, lang)}，{run['framework']}，"
                f"Python {run['python']}，{run['date']}，{size}"
                + (f"，{clocks}" if clocks else "") + "。")
    return (f"> The outputs on this page come from a real run on {machine_name(run, lang)}, "
            f"{run['framework']}, Python {run['python']}, {run['date']}, {size}"
            + (f", {clocks}" if clocks else "") + ".")
